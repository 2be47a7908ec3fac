"""The parts of OAuth verification one by one (claims, scopes, keys, the verifier's checks and memory) and the
messages of limits: quick, exact tests, so that a mutation of tokens' checks does not go unseen."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from conftest import config_from
from issuer import Issuer
from toolcrib.config import IdentityConfig
from toolcrib.limits import Limit, LimitBook, compile_limits, parse_rate
from toolcrib.mcp import oauth
from toolcrib.mcp.oauth import Identity, Verifier, claim_values, claims_match, identity_of, scopes_of

ISS = "https://idp.example.com/realms/main"
AUD = "https://tools.example.com"


# -- claims -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("claims", "path", "values"), [
    ({"sub": "alice"}, "sub", ["alice"]),
    ({"realm_access": {"roles": ["a", "b"]}}, "realm_access.roles", ["a", "b"]),
    ({"realm_access": ["not", "an", "object"]}, "realm_access.roles", []),
    ({"groups": ["x", 7, True, None, {"y": 1}, "z"]}, "groups", ["x", "7", "z"]),
    ({"n": 5}, "n", ["5"]),
    ({"flag": True}, "flag", []),
    ({"obj": {"a": 1}}, "obj", []),
    ({"azp": "cli"}, "client_id", ["cli"]),
    ({"azp": "cli", "client_id": "own"}, "client_id", ["own"]),
    ({"azp": "cli"}, "sub", []),
    ({"a.b": "dotted key"}, "a.b", []),
])
def test_claim_values(claims: dict[str, Any], path: str, values: list[str]) -> None:
    assert claim_values(claims, path) == values


@pytest.mark.parametrize(("claims", "scopes"), [
    ({"scope": "a b  c"}, {"a", "b", "c"}),
    ({"scp": ["a", 1, "b"]}, {"a", "b"}),
    ({"scp": "a b"}, {"a", "b"}),
    ({"scope": "a", "scp": ["b"]}, {"a"}),
    ({"scope": 5}, set()),
    ({}, set()),
])
def test_scopes_of(claims: dict[str, Any], scopes: set[str]) -> None:
    assert scopes_of(claims) == frozenset(scopes)


def test_claims_match_needs_every_claim_named() -> None:
    identity = IdentityConfig(claims={"client_id": "bot-*", "groups": ["staff", "ops"]})
    assert claims_match(identity, {"azp": "bot-1", "groups": ["x", "ops"]})
    assert not claims_match(identity, {"azp": "bot-1", "groups": ["x"]})
    assert not claims_match(identity, {"azp": "Bot-1", "groups": ["ops"]})  # case-sensitive
    assert not claims_match(identity, {"groups": ["ops"]})


def test_identity_of_records_who_and_what_scopes_it_lacks() -> None:
    identity = IdentityConfig(claims={"sub": "*"}, needs_scope={"write": {}, "admin": {}})
    found = identity_of({"sub": "alice", "azp": "cli", "iss": ISS, "scope": "read write"}, identity)
    assert found == Identity(kind="oauth", subject="alice", client="cli", issuer=ISS,
                             scopes=frozenset({"read", "write"}), lacking=frozenset({"admin"}))
    assert found.record() == {"kind": "oauth", "subject": "alice", "client": "cli", "issuer": ISS}
    odd = identity_of({"sub": 42, "iss": ISS}, identity)
    assert (odd.subject, odd.client) == (None, None)
    assert Identity(kind="token", credential="$T").record() == {"kind": "token", "credential": "$T"}


# -- keys from a JWKS file ----------------------------------------------------------------------------------------


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    with Issuer() as running:
        yield running


def verifier(tmp_path: Path, jwks: Any, **oauth_keys: Any) -> Verifier:
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    extra = "".join(f"{key} = {json.dumps(value)}\n" for key, value in oauth_keys.items())
    text = f'[oauth]\nissuer = "{ISS}"\naudience = "{AUD}"\njwks_file = "jwks.json"\n{extra}'
    return Verifier(config_from(text, tmp_path))


def sign(issuer: Issuer, drop: tuple[str, ...] = (), **claims: Any) -> str:
    body = {"iss": ISS, "aud": AUD, "sub": "s", "exp": int(time.time()) + 300, **claims}
    for key in drop:
        body.pop(key)
    kid = claims.pop("kid", None)
    return jwt.encode(body, issuer.keys[0][1], algorithm="RS256", headers={"kid": kid or issuer.keys[0][0]})


def verify(v: Verifier, token: str) -> dict[str, Any] | None:
    return anyio.run(v.claims, token)


def test_keys_skip_what_is_not_a_public_signing_key(tmp_path: Path, issuer: Issuer,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    good = issuer.jwks()["keys"][0]
    private = {**good, "kid": "private", "d": "AAAA"}
    v = verifier(tmp_path, {"keys": [{**good, "kid": "enc", "use": "enc"}, private, "junk",
                                     {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
                                     {**good, "use": "sig"}]})
    with caplog.at_level(logging.WARNING, logger="toolcrib.serve"):
        assert verify(v, sign(issuer))["sub"] == "s"
    assert sorted(v.keys.by_id) == [good["kid"]]
    assert v.keys.by_id[good["kid"]][1] == "RS256"
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["the OAuth issuer's key 'broken' is not usable"]
    assert verify(v, sign(issuer, kid="enc")) is None


def test_a_token_without_a_key_id_is_verified_with_the_only_key(tmp_path: Path, issuer: Issuer) -> None:
    good = issuer.jwks()["keys"][0]
    unnamed = {k: v for k, v in good.items() if k != "kid"}
    token = jwt.encode({"iss": ISS, "aud": AUD, "exp": int(time.time()) + 60}, issuer.keys[0][1], algorithm="RS256")
    assert verify(verifier(tmp_path, {"keys": [unnamed]}), token) is not None
    second = Issuer()
    two = {"keys": [unnamed, {k: v for k, v in second.jwks()["keys"][0].items() if k != "kid"}]}
    assert verify(verifier(tmp_path, two), token) is None  # two keys: which one is not the token's to leave open
    assert verify(verifier(tmp_path, {"keys": []}), token) is None


def test_generation_counts_only_changes_of_the_published_keys(tmp_path: Path, issuer: Issuer) -> None:
    v = verifier(tmp_path, issuer.jwks())
    verify(v, sign(issuer))
    assert v.keys.generation == 1
    anyio.run(v.keys._refresh)
    assert v.keys.generation == 1
    issuer.rotate(keep_old=True)
    (tmp_path / "jwks.json").write_text(json.dumps(issuer.jwks()))
    anyio.run(v.keys._refresh)
    assert v.keys.generation == 2 and len(v.keys.by_id) == 2


def test_a_jwks_file_that_is_not_one_keeps_the_keys_known(tmp_path: Path, issuer: Issuer,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    v = verifier(tmp_path, issuer.jwks())
    token = sign(issuer)
    assert verify(v, token) is not None
    (tmp_path / "jwks.json").write_text(json.dumps(["not", "a", "jwks"]))
    with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
        assert verify(v, sign(issuer, sub="other")) is not None  # the file changed: read again, refused, kept
    assert [r.getMessage() for r in caplog.records] == [
        "the OAuth issuer's keys could not be read: a JWKS is a JSON object with \"keys\""]


def discovered(issuer: Issuer, tmp_path: Path) -> Verifier:
    return Verifier(config_from(f'[oauth]\nissuer = "{issuer.url}"\naudience = "{AUD}"\n', tmp_path))


def test_keys_are_found_through_rfc_8414_when_there_is_no_openid_discovery(tmp_path: Path) -> None:
    with Issuer(oidc=False) as issuer:
        token = jwt.encode({"iss": issuer.url, "aud": AUD, "exp": int(time.time()) + 60}, issuer.keys[0][1],
                           algorithm="RS256", headers={"kid": issuer.keys[0][0]})
        assert verify(discovered(issuer, tmp_path), token) is not None
        assert issuer.fetches == 1


def test_metadata_that_names_another_issuer_is_not_trusted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with Issuer(metadata_issuer="https://evil.example") as issuer:
        token = jwt.encode({"iss": issuer.url, "aud": AUD, "exp": int(time.time()) + 60}, issuer.keys[0][1],
                           algorithm="RS256", headers={"kid": issuer.keys[0][0]})
        with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
            assert verify(discovered(issuer, tmp_path), token) is None
        assert issuer.fetches == 0
    base = issuer.url
    assert [r.getMessage() for r in caplog.records] == [
        "the OAuth issuer's keys could not be fetched: no jwks_uri in the issuer's metadata ("
        f"{base}/.well-known/openid-configuration: names issuer 'https://evil.example', not '{base}'; "
        f"{base}/.well-known/oauth-authorization-server: names issuer 'https://evil.example', not '{base}'); set "
        "jwks_url"]


def test_metadata_without_a_jwks_uri_and_a_redirected_jwks_are_not_followed(tmp_path: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    with Issuer(jwks_uri=False) as issuer, caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
        token = jwt.encode({"iss": issuer.url, "aud": AUD, "exp": int(time.time()) + 60}, issuer.keys[0][1],
                           algorithm="RS256", headers={"kid": issuer.keys[0][0]})
        assert verify(discovered(issuer, tmp_path), token) is None
        moved = Verifier(config_from(f'[oauth]\nissuer = "{issuer.url}"\naudience = "{AUD}"\n'
                                     f'jwks_url = "{issuer.url}/jwks-moved"\n', tmp_path))
        assert verify(moved, token) is None  # a JWKS that redirects elsewhere is not followed
        assert issuer.fetches == 0
    base = issuer.url
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == ("the OAuth issuer's keys could not be fetched: no jwks_uri in the issuer's metadata ("
                           f"{base}/.well-known/openid-configuration: no jwks_uri; "
                           f"{base}/.well-known/oauth-authorization-server: no jwks_uri); set jwks_url")
    assert messages[1].startswith("the OAuth issuer's keys could not be fetched: Redirect response '302 Found'")


@pytest.mark.parametrize("oidc", [True, False], ids=["openid", "rfc8414"])
def test_an_issuer_with_a_path_and_a_trailing_slash_is_discovered_below_it(tmp_path: Path, oidc: bool) -> None:
    with Issuer(path="/realms/X", oidc=oidc) as issuer:
        issuer.metadata_issuer = issuer.url + "/"
        token = jwt.encode({"iss": issuer.url + "/", "aud": AUD, "exp": int(time.time()) + 60}, issuer.keys[0][1],
                           algorithm="RS256", headers={"kid": issuer.keys[0][0]})
        v = Verifier(config_from(f'[oauth]\nissuer = "{issuer.url}/"\naudience = "{AUD}"\n', tmp_path))
        assert verify(v, token) is not None
    assert issuer.requests == ["/realms/X/.well-known/openid-configuration",
                               *([] if oidc else ["/.well-known/oauth-authorization-server/realms/X"]), "/jwks"]
    assert set(issuer.accepts) == {"application/json"}  # metadata and keys alike are asked for as JSON


def test_an_issuer_written_with_a_trailing_slash_is_discovered(tmp_path: Path) -> None:
    with Issuer() as issuer:
        issuer.metadata_issuer = issuer.url + "/"
        token = jwt.encode({"iss": issuer.url + "/", "aud": AUD, "exp": int(time.time()) + 60}, issuer.keys[0][1],
                           algorithm="RS256", headers={"kid": issuer.keys[0][0]})
        v = Verifier(config_from(f'[oauth]\nissuer = "{issuer.url}/"\naudience = "{AUD}"\n', tmp_path))
        assert verify(v, token) is not None


# -- the verifier's checks ----------------------------------------------------------------------------------------


REASONS = {
    "no expiry": 'access token refused: Token is missing the "exp" claim',
    "expired beyond the leeway": "access token refused: Signature has expired",
    "another algorithm than its key's": "access token refused: key 'KID' is for RS256, the token says PS256",
    "an algorithm not accepted": "access token refused: algorithm 'RS512' is not accepted",
    "unknown key": "access token refused: no key of the issuer has id 'nope'",
    "wrong audience": "access token refused: Audience doesn't match",
}


def bad_token(case: str, issuer: Issuer) -> str:
    key, kid = issuer.keys[0][1], issuer.keys[0][0]
    now = int(time.time())
    if case == "no expiry":
        return sign(issuer, drop=("exp",))
    if case == "expired beyond the leeway":
        return sign(issuer, exp=now - 45)
    if case == "another algorithm than its key's":
        return jwt.encode({"iss": ISS, "aud": AUD, "exp": now + 60}, key, algorithm="PS256", headers={"kid": kid})
    if case == "an algorithm not accepted":
        return jwt.encode({"iss": ISS, "aud": AUD, "exp": now + 60}, key, algorithm="RS512", headers={"kid": kid})
    if case == "unknown key":
        return sign(issuer, kid="nope")
    return sign(issuer, aud="https://elsewhere.example")  # wrong audience


@pytest.mark.parametrize("case", sorted(REASONS))
def test_each_refusal_is_logged_with_its_reason(tmp_path: Path, issuer: Issuer, case: str,
                                                caplog: pytest.LogCaptureFixture) -> None:
    v = verifier(tmp_path, issuer.jwks(), algorithms=["RS256", "PS256"])
    with caplog.at_level(logging.INFO, logger="toolcrib.serve"):
        assert verify(v, bad_token(case, issuer)) is None
    assert [r.getMessage() for r in caplog.records] == [REASONS[case].replace("KID", issuer.keys[0][0])]


def test_the_leeway_forgives_a_little_clock_skew(tmp_path: Path, issuer: Issuer) -> None:
    v = verifier(tmp_path, issuer.jwks())
    assert verify(v, sign(issuer, exp=int(time.time()) - 10)) is not None  # 30 s by default
    assert verify(verifier(tmp_path, issuer.jwks(), leeway=0), sign(issuer, exp=int(time.time()) - 10)) is None


def test_an_ec_key_verifies_es256(tmp_path: Path) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    jwk = {**json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key())), "kid": "ec", "alg": "ES256"}
    token = jwt.encode({"iss": ISS, "aud": AUD, "exp": int(time.time()) + 60}, key, algorithm="ES256",
                       headers={"kid": "ec"})
    assert verify(verifier(tmp_path, {"keys": [jwk]}), token) is not None


def test_remembered_tokens_are_bounded_oldest_out(tmp_path: Path, issuer: Issuer,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oauth, "MAX_VERIFIED", 2)
    v = verifier(tmp_path, issuer.jwks())
    tokens = [sign(issuer, sub=f"s{n}") for n in range(3)]
    for token in tokens:
        verify(v, token)
    assert list(v._verified) == tokens[1:]
    verify(v, tokens[1])
    assert list(v._verified) == tokens[1:]


def test_a_remembered_token_is_checked_again_when_the_keys_change(tmp_path: Path, issuer: Issuer) -> None:
    v = verifier(tmp_path, issuer.jwks())
    token = sign(issuer)
    assert verify(v, token) is not None
    issuer.rotate()
    (tmp_path / "jwks.json").write_text(json.dumps(issuer.jwks(), indent=2))
    assert verify(v, token) is None  # the file changed, was read again, and the old key is gone


# -- limits' words ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("rate", "words", "wait"), [
    ("1/second", "1 calls a second", "1 s"),
    ("2/minute", "2 calls a minute", "30 s"),
    ("3/hour", "3 calls an hour", "1200 s"),
    ("4/day", "4 calls a day", "21600 s"),
])
def test_a_refusal_says_the_limit_and_when(rate: str, words: str, wait: str) -> None:
    clock = [0.0]
    book = LimitBook(lambda: clock[0])
    limits = list(compile_limits("a", config_from(f'[agents.a.limits]\nrate = "{rate}"\n').config.agents["a"].limits))
    count = parse_rate(rate).count
    for _ in range(count):
        assert isinstance(book.enter("a", limits), list)
    refused = book.enter("a", limits)
    assert not isinstance(refused, list)
    assert (refused.text, refused.limit) == (f"Rate limited: agent 'a' may make at most {words}; try again in "
                                             f"{wait}.", "*")
    assert refused.retry_after == pytest.approx(parse_rate(rate).seconds / count)


def test_both_parts_of_a_limit_are_described_and_a_pattern_named() -> None:
    limits = compile_limits("a", config_from(
        '[agents.a.limits.tools."web__*"]\nrate = "5/minute"\nin_flight = 2\n').config.agents["a"].limits)
    (limit,) = limits
    assert isinstance(limit, Limit) and limit.covers("web__fetch") and not limit.covers("fs__ls")
    assert limit.describe("a") == ("agent 'a' may make at most 5 calls of web__* a minute and 2 calls of web__* at "
                                   "once")
    book = LimitBook(lambda: 0.0)
    first, second = book.enter("a", [limit]), book.enter("a", [limit])
    refused = book.enter("a", [limit])
    assert not isinstance(refused, list) and refused.retry_after is None and refused.limit == "web__*"
    assert isinstance(first, list) and isinstance(second, list)
    book.leave(first)
    assert isinstance(book.enter("a", [limit]), list)  # one place given back, and the rate still had tokens


def test_a_refused_call_takes_nothing_from_the_other_limits() -> None:
    config = config_from('[agents.a.limits]\nrate = "2/minute"\n[agents.a.limits.tools."x"]\nin_flight = 1\n')
    limits = list(compile_limits("a", config.config.agents["a"].limits))
    book = LimitBook(lambda: 0.0)
    held = book.enter("a", limits)
    assert isinstance(held, list)
    assert not isinstance(book.enter("a", limits), list)  # the in-flight limit refuses...
    book.leave(held)
    assert isinstance(book.enter("a", limits), list)  # ...and the refused call did not use the rate's second call
    assert not isinstance(book.enter("a", limits[:1]), list)


# -- keys: files, refreshes and what is published -------------------------------------------------------------------


def test_a_jwks_file_that_never_ends_is_cut_off_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    """A named pipe nobody writes: opening it waits forever, so the read runs in a worker thread under the
    refresh's one deadline (as a fetch does), and the host goes on."""
    import os

    monkeypatch.setattr(oauth, "FETCH_TIMEOUT", 0.3)
    os.mkfifo(tmp_path / "jwks.json")
    v = Verifier(config_from(f'[oauth]\nissuer = "{ISS}"\naudience = "{AUD}"\njwks_file = "jwks.json"\n', tmp_path))
    try:
        with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
            assert verify(v, jwt.encode({"iss": ISS}, "k" * 32, algorithm="HS256")) is None
            assert anyio.run(v.keys.get, None) is None
    finally:
        os.close(os.open(tmp_path / "jwks.json", os.O_WRONLY | os.O_NONBLOCK))  # the waiting thread goes
    assert [r.getMessage() for r in caplog.records][:1] == [
        "the OAuth issuer's keys could not be read: no whole answer within 0.3 seconds"]


def test_a_jwks_file_that_runs_on_past_the_cap_is_refused_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A named pipe that is written past the cap and never ends: the read stops at the cap and refuses it, at once,
    rather than waiting for an end that never comes (and holding all of it) until the deadline."""
    import os
    import threading

    monkeypatch.setattr(oauth, "MAX_JWKS_BYTES", 1000)
    monkeypatch.setattr(oauth, "FETCH_TIMEOUT", 30.0)
    os.mkfifo(tmp_path / "jwks.json")
    done = threading.Event()

    def write() -> None:
        with open(tmp_path / "jwks.json", "wb") as pipe:
            pipe.write(b" " * 1100)
            pipe.flush()
            done.wait()

    writer = threading.Thread(target=write)
    writer.start()
    v = Verifier(config_from(f'[oauth]\nissuer = "{ISS}"\naudience = "{AUD}"\njwks_file = "jwks.json"\n', tmp_path))
    try:
        with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
            assert anyio.run(v.keys.get, None) is None
    finally:
        done.set()
        writer.join()
    assert [r.getMessage() for r in caplog.records] == [
        "the OAuth issuer's keys could not be read: the file is larger than 1000 bytes"]


def test_a_jwks_file_past_the_cap_is_refused_and_one_at_it_is_read(tmp_path: Path, issuer: Issuer,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    document = json.dumps(issuer.jwks())
    padded = document[:-1] + " " * (oauth.MAX_JWKS_BYTES - len(document)) + "}"
    assert len(padded) == oauth.MAX_JWKS_BYTES
    v = verifier(tmp_path, {})
    (tmp_path / "jwks.json").write_text(padded)
    assert verify(v, sign(issuer)) is not None
    (tmp_path / "jwks.json").write_text(padded + " ")
    with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
        assert anyio.run(v.keys.get, issuer.keys[0][0]) is not None  # read again, refused, the known key kept
    assert [r.getMessage() for r in caplog.records] == [
        f"the OAuth issuer's keys could not be read: the file is larger than {oauth.MAX_JWKS_BYTES} bytes"]


def test_an_unchanged_jwks_file_is_not_read_again_and_one_that_went_keeps_its_keys(
        tmp_path: Path, issuer: Issuer, caplog: pytest.LogCaptureFixture) -> None:
    v = verifier(tmp_path, issuer.jwks())
    assert verify(v, sign(issuer)) is not None
    read_at = v.keys.fetched
    assert verify(v, sign(issuer, sub="another")) is not None
    assert v.keys.fetched == read_at  # same size and time: not read again
    (tmp_path / "jwks.json").unlink()
    with caplog.at_level(logging.INFO, logger="toolcrib.serve"):
        assert verify(v, sign(issuer, sub="a third")) is not None
    assert v.keys.fetched == read_at and caplog.records == []  # a file that went is not a change: nothing read


def test_keys_that_declare_no_usable_algorithm_or_none_at_all(tmp_path: Path, issuer: Issuer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    good = issuer.jwks()["keys"][0]
    undeclared = {k: v for k, v in good.items() if k != "alg"}
    v = verifier(tmp_path, {"keys": [undeclared]})
    assert verify(v, sign(issuer)) is not None
    assert v.keys.by_id[good["kid"]][1] is None
    with caplog.at_level(logging.WARNING, logger="toolcrib.serve"):
        for keys in ([{**good, "use": "enc"}], [{**good, "alg": 5}]):
            assert verify(verifier(tmp_path, {"keys": keys}), sign(issuer)) is None
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == messages[2] == "the OAuth issuer publishes no usable signing key"
    assert messages[1].startswith(f"the OAuth issuer's key '{good['kid']}' is not usable: Unable to find an "
                                  "algorithm for key: ")
    assert len(messages) == 3


def test_a_remembered_token_is_refused_once_it_expires_beyond_the_leeway(
        tmp_path: Path, issuer: Issuer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    v = verifier(tmp_path, issuer.jwks(), leeway=30)
    exp = int(time.time()) + 300
    token = sign(issuer, exp=exp)
    assert verify(v, token) is not None
    real = time.time
    monkeypatch.setattr(oauth.time, "time", lambda: exp + 30.0)  # at the leeway's end: still good
    assert verify(v, token) is not None
    monkeypatch.setattr(oauth.time, "time", lambda: exp + 30.5)
    with caplog.at_level(logging.INFO, logger="toolcrib.serve"):
        assert verify(v, token) is None
    monkeypatch.setattr(oauth.time, "time", real)
    assert [r.getMessage() for r in caplog.records] == ["access token refused: Signature has expired"]
    assert token not in v._verified


def test_a_fetched_jwks_past_the_cap_is_refused_and_one_at_it_is_read(tmp_path: Path, issuer: Issuer,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    document = json.dumps(issuer.jwks())
    issuer.jwks_text = document[:-1] + " " * (oauth.MAX_JWKS_BYTES - len(document)) + "}"
    config = config_from(f'[oauth]\nissuer = "{ISS}"\naudience = "{AUD}"\njwks_url = "{issuer.url}/jwks"\n', tmp_path)
    assert verify(Verifier(config), sign(issuer)) is not None
    issuer.jwks_text += " "
    with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
        assert verify(Verifier(config), sign(issuer)) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"the OAuth issuer's keys could not be fetched: the answer is larger than {oauth.MAX_JWKS_BYTES} bytes"]


def test_a_token_whose_key_id_is_not_a_string_is_not_read_as_one_naming_none(tmp_path: Path, issuer: Issuer) -> None:
    import base64

    v = verifier(tmp_path, issuer.jwks())  # one key: a token naming none would be checked against it
    good = sign(issuer)
    header = base64.urlsafe_b64encode(json.dumps({"alg": "RS256", "kid": 5}).encode()).rstrip(b"=").decode()
    assert verify(v, header + good[good.index("."):]) is None


def test_known_keys_serve_while_a_background_refresh_runs_and_each_stale_round_starts_one(issuer: Issuer) -> None:
    published = issuer.jwks()["keys"][0]
    from toolcrib.config import OAuthConfig

    config = OAuthConfig(issuer=ISS, audience=AUD, jwks_url=f"{issuer.url}/jwks", jwks_refresh=60)

    async def main() -> None:
        keys = oauth.Keys(config, by_id={published["kid"]: (jwt.PyJWK(published), "RS256")},
                          fetched=time.monotonic() - 120)
        first = await keys.get(published["kid"])
        running = keys._background
        assert first is not None and running is not None and not running.done()
        assert issuer.fetches == 0  # answered before any fetch: the refresh runs after
        again = await keys.get(published["kid"])  # the refresh under way serves for this one too: no wait
        assert again is not None and keys._background is running and not running.done()
        assert issuer.fetches == 0
        await running
        assert issuer.fetches == 1
        keys.fetched = time.monotonic() - 120  # due again: a new refresh, in the background as well
        assert await keys.get(published["kid"]) is not None
        assert keys._background is not running and keys._background is not None
        await keys._background
        assert issuer.fetches == 2

    anyio.run(main)


def test_on_trio_stale_keys_are_fetched_again_before_the_answer(issuer: Issuer) -> None:
    """No asyncio loop to run a background refresh on: the request waits for the fetch (trio)."""
    published = issuer.jwks()["keys"][0]
    from toolcrib.config import OAuthConfig

    config = OAuthConfig(issuer=ISS, audience=AUD, jwks_url=f"{issuer.url}/jwks", jwks_refresh=60)

    async def main() -> None:
        keys = oauth.Keys(config, by_id={published["kid"]: (jwt.PyJWK(published), "RS256")},
                          fetched=time.monotonic() - 120)
        assert await keys.get(published["kid"]) is not None
        assert keys._background is None and issuer.fetches == 1

    anyio.run(main, backend="trio")


def test_a_remembered_token_never_outlives_its_key(issuer: Issuer) -> None:
    """A remembered token is taken only while the very key that verified it is the one known under its id, whatever
    the keys' generation says; and once the issuer withdraws that key and the keys are fetched again, the token is
    refused, though it was verified (and remembered) before."""
    from collections import OrderedDict

    from toolcrib.config import OAuthConfig

    config = OAuthConfig(issuer=ISS, audience=AUD, jwks_url=f"{issuer.url}/jwks", jwks_refresh=60)
    v = Verifier.__new__(Verifier)  # (no config file: the keys are fetched from the issuer)
    v.oauth, v.keys, v._verified = config, oauth.Keys(config), OrderedDict()
    token = sign(issuer)

    async def main() -> list[bool]:
        said = [await v.claims(token) is not None]
        kid, known = issuer.keys[0][0], dict(v.keys.by_id)
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(
            rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()))
        v.keys.by_id = {kid: (jwt.PyJWK({**other, "kid": kid}), "RS256")}  # another key under the same id
        said.append(await v.claims(token) is not None)
        v.keys.by_id = known
        said.append(await v.claims(token) is not None)
        issuer.rotate()  # the token's key is withdrawn
        v.keys.fetched -= 120  # the keys are due: this request is served by the known key while they are fetched
        said.append(await v.claims(token) is not None)
        assert v.keys._background is not None
        await v.keys._background
        said.append(await v.claims(token) is not None)
        return said

    assert anyio.run(main) == [True, False, True, True, False]

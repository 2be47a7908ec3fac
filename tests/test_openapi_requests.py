"""How an OpenAPI call is made, part by part (``toolcrib.supply.openapi.requests``): which forms of the operator's
credentials are taken out of answers, which header values are refused, how an object parameter is written. The
end-to-end cases against a real API are in test_openapi.py and test_openapi_attacks.py; these pin each rule down
(each was a surviving mutant of ``benchmarks/mutation.sh``)."""

from __future__ import annotations

import base64
import json

import pytest

from toolcrib.credentials import Credentials
from toolcrib.errors import ToolError
from toolcrib.supply.openapi import document
from toolcrib.supply.openapi.document import DocumentError, Parameter, parse_document
from toolcrib.supply.openapi.requests import _header_value, _style


def test_no_credential_leaves_bytes_and_text_as_they_are() -> None:
    nothing = Credentials(headers={}, query={})
    assert (nothing.scrub_bytes(b"\x00tok"), nothing.scrub("tok")) == (b"\x00tok", "tok")


def test_a_header_s_credential_is_scrubbed_without_its_scheme_all_of_it() -> None:
    given = Credentials(headers={"X-Auth": "Token part-one part-two"}, query={})
    assert given.scrub("got part-one part-two!") == "got ***!"
    assert given.scrub("got Token part-one part-two") == "got ***"


def test_a_basic_credential_is_scrubbed_as_its_pair_and_its_password() -> None:
    pair = base64.b64encode(b"alice:s3:cret-pw").decode()
    given = Credentials(headers={"Authorization": f"Basic {pair}"}, query={})
    assert given.scrub("user alice:s3:cret-pw, password s3:cret-pw, header " + pair) == (
        "user ***, password ***, header ***")


def test_a_basic_credential_that_is_not_strict_base64_is_scrubbed_as_given_and_nothing_is_guessed() -> None:
    """A lenient decoder would read ``dXNlcjpwYXNz!`` as ``user:pass`` and take the word ``pass`` out of every
    answer; the API reads the header strictly too, so only what the operator wrote is a secret."""
    for odd in ("not-base64!", "dXNlcjpwYXNz!"):
        given = Credentials(headers={"Authorization": f"Basic {odd}"}, query={})
        assert given.scrub(f"user:pass, pass, {odd}, Basic {odd}") == "user:pass, pass, ***, ***"


def test_a_credential_escaped_in_json_text_is_scrubbed() -> None:
    value = 'k"é\\y-1234'
    given = Credentials(headers={"X-Key": value}, query={})
    escaped = json.dumps(value)[1:-1]
    assert escaped != value
    assert given.scrub(f'{{"echo": "{escaped}"}}') == '{"echo": "***"}'


def test_a_credential_in_url_safe_base64_is_scrubbed_wherever_it_starts() -> None:
    value = "~~~>>>???"
    for offset in range(3):
        plain = base64.b64encode(b"x" * offset + value.encode()).decode()
        assert "+" in plain or "/" in plain
        safe = base64.urlsafe_b64encode(b"x" * offset + value.encode()).decode()
        scrubbed = Credentials(headers={"X-Key": value}, query={}).scrub(safe)
        assert "***" in scrubbed and len(scrubbed) < len(safe), (offset, safe, scrubbed)


HEADER = Parameter(name="X-Note", where="header", argument="note")


@pytest.mark.parametrize("value", ["two words", "tab\there", "latin-1 top \xff", "~!#"])
def test_a_header_value_may_hold_spaces_tabs_and_any_latin_1_letter(value: str) -> None:
    assert _header_value(HEADER, value) is None


@pytest.mark.parametrize(("value", "error"), [
    ("a\x1fb", "argument 'note' cannot hold the character U+001F: it is a header"),
    ("a\x7fb", "argument 'note' cannot hold the character U+007F: it is a header"),
    ("a\u0100b", "argument 'note' cannot hold the character U+0100: it is a header"),
    ("a\nb", "argument 'note' cannot hold a line break: it is a header"),
])
def test_a_header_value_holds_no_control_character_and_nothing_past_latin_1(value: str, error: str) -> None:
    with pytest.raises(ToolError) as caught:
        _header_value(HEADER, value)
    assert str(caught.value) == error


def test_an_object_parameter_not_exploded_is_one_list_of_keys_and_values() -> None:
    form = Parameter(name="filter", where="query", argument="filter", style="form", explode=False)
    header = Parameter(name="X-Shape", where="header", argument="shape", style="simple", explode=True)
    assert _style(form, {"role": "admin", "first": "Alex"}) == [("filter", "role,admin,first,Alex")]
    assert _style(header, {"role": "admin", "first": "Alex"}) == [("X-Shape", "role=admin,first=Alex")]


def test_a_yaml_document_may_nest_exactly_as_deep_as_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    text = b"openapi: 3.0.3\nx: [[1]]\n"  # the mapping, two sequences and a scalar: 4 levels
    monkeypatch.setattr(document, "YAML_DEPTH", 4)
    assert parse_document(text, "doc.yaml")["x"] == [[1]]
    monkeypatch.setattr(document, "YAML_DEPTH", 3)
    with pytest.raises(DocumentError) as caught:
        parse_document(text, "doc.yaml")
    assert str(caught.value) == "doc.yaml nests deeper than 3 levels"


def test_a_yaml_document_may_expand_exactly_to_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    # 17 nodes written (the root, 3 keys, 3 sequences, 10 scalars: 10 times that is 170) expand to 1,237+2
    text = (b"openapi: '3.0.3'\na: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 0]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
            b"c: [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n")
    monkeypatch.setattr(document, "YAML_NODES", 1239)
    assert len(parse_document(text, "doc.yaml")["c"]) == 10
    monkeypatch.setattr(document, "YAML_NODES", 1238)
    with pytest.raises(DocumentError) as caught:
        parse_document(text, "doc.yaml")
    assert str(caught.value) == ("doc.yaml expands to more than 1,238 nodes through its aliases (an alias bomb?); it "
                                 "is not read")

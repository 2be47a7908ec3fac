"""What a 2026-07-28 client carries between the rounds of one call (``toolcrib.mcp.roundtrip``), unit by unit: the
seal refuses every state it did not make for exactly this call, the journal refuses a replay of another kind, and an
answer is taken only as the answer to its kind of question (what a mutation run of the module showed untested)."""

from __future__ import annotations

import json
import time

import mcp_types as types
import pytest
from mcp.server.request_state import AESGCMRequestStateCodec

from toolcrib.errors import ToolError
from toolcrib.mcp.roundtrip import Journal, StateSeal, Unverifiable, answer_to

KEY = b"0123456789abcdef0123456789abcdef"


def forged(envelope: object) -> str:
    """A state sealed with the right key around an envelope the seal itself would never make."""
    return AESGCMRequestStateCodec([KEY]).seal(json.dumps(envelope).encode())


def test_a_state_is_opened_for_the_same_arguments_in_any_order_and_for_no_other_call() -> None:
    seal = StateSeal([KEY])
    state = seal.seal("a", "t", {"x": 1, "y": [2]}, "p", {"asked": "elicit"})
    assert seal.open("a", "t", {"y": [2], "x": 1}, "p", state) == {"asked": "elicit"}
    assert seal.open("a", "t", {}, "p", None) is None
    for agent, tool, arguments, principal in (("b", "t", {"x": 1, "y": [2]}, "p"), ("a", "u", {"x": 1, "y": [2]}, "p"),
                                              ("a", "t", {"x": 2, "y": [2]}, "p"), ("a", "t", {"x": 1, "y": [2]}, "q")):
        with pytest.raises(Unverifiable):
            seal.open(agent, tool, arguments, principal, state)


@pytest.mark.parametrize("envelope", [
    [1], {"v": "another/1"}, {"v": "toolcrib/state/1", "exp": "later", "iat": 0},
    {"v": "toolcrib/state/1", "exp": 9e18, "iat": "then"}, {"v": "toolcrib/state/1", "exp": 1.0, "iat": 0},
    {"v": "toolcrib/state/1", "exp": 9e18, "iat": 9e18},
], ids=["not-an-object", "another-format", "exp-not-a-number", "iat-not-a-number", "expired", "issued-ahead"])
def test_a_state_sealed_with_the_key_but_not_by_the_seal_is_refused(envelope: object) -> None:
    with pytest.raises(Unverifiable):
        StateSeal([KEY]).open("a", "t", {}, None, forged(envelope))


def test_a_state_whose_binding_or_payload_is_wrong_is_refused() -> None:
    now = time.time()
    good = {"v": "toolcrib/state/1", "iat": now, "exp": now + 60, "principal": None}
    seal = StateSeal([KEY])
    bind = json.loads(seal._codec.unseal(seal.seal("a", "t", {}, None, {})))["bind"]  # (what binds this call)
    assert seal.open("a", "t", {}, None, forged({**good, "bind": bind, "payload": {"k": 1}})) == {"k": 1}
    for bad in ({**good, "bind": bind, "payload": [1]}, {**good, "bind": "x", "payload": {}}):
        with pytest.raises(Unverifiable):
            seal.open("a", "t", {}, None, forged(bad))


def test_a_replay_of_another_kind_says_the_config_changed() -> None:
    journal = Journal([{"sample": {"role": "assistant"}}])
    with pytest.raises(ToolError, match=r"^The run cannot be continued: the config changed between its rounds\. "
                                        r"Start it again\.$"):
        journal.replay("tool")
    assert journal.replay("sample") == {"role": "assistant"} and journal.replay("sample") is None


def test_an_answer_counts_only_as_the_answer_to_its_kind_of_question_in_its_wire_shape() -> None:
    turn = types.CreateMessageResult(role="assistant", content=types.TextContent(text="hi"), model="m",
                                     stop_reason="endTurn")
    assert answer_to("sampling/createMessage", turn) == {
        "role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "m", "stopReason": "endTurn"}
    assert answer_to("elicitation/create", types.ElicitResult(action="decline")) == {"action": "decline"}
    assert answer_to("roots/list", {"roots": [{"uri": "file:///w"}]}) == {"roots": [{"uri": "file:///w"}]}
    assert answer_to("elicitation/create", turn) is None
    assert answer_to("roots/list", {"action": "accept"}) is None
    assert answer_to("sampling/createMessage", None) is None

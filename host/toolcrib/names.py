"""Name rules: tool names, namespaces, agent names, full names. Exact, ASCII, case-sensitive."""

from __future__ import annotations

import re

SEPARATOR = "__"

TOOL_NAME_RULE = (
    "tool names are 1-64 characters: a letter first, then letters, digits and single underscores ('__' is reserved)"
)
NAMESPACE_RULE = (
    "namespaces are 1-32 characters: a lower-case letter first, then lower-case letters, digits and single "
    "underscores"
)
AGENT_NAME_RULE = (
    "agent names are 1-64 characters: a letter first, then letters, digits and single underscores"
)

# Control characters other than newline and tab, zero-width and direction-changing characters, and Unicode tag
# characters: ways to hide text in a description that the model reads and a person reviewing it does not.
HIDDEN_CHARACTERS = re.compile("[\x00-\x08\x0b-\x1f\x7f\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
                               "\U000e0000-\U000e007f]")

# Explicit ASCII classes: no \w, so no Unicode letter ever passes as a name character.
_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*_?")
_NAMESPACE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*_?")


def tool_name_problem(name: object) -> str | None:
    """Why ``name`` is not a valid tool name, or None when it is."""
    if not isinstance(name, str):
        return f"a tool name must be a string, not {type(name).__name__}"
    if not 1 <= len(name) <= 64 or _TOOL_NAME.fullmatch(name) is None:
        return TOOL_NAME_RULE
    return None


def namespace_problem(name: object) -> str | None:
    """Why ``name`` is not a valid namespace, or None when it is."""
    if not isinstance(name, str):
        return f"a namespace must be a string, not {type(name).__name__}"
    if not 1 <= len(name) <= 32 or _NAMESPACE.fullmatch(name) is None:
        return NAMESPACE_RULE
    return None


def agent_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid agent name, or None when it is (agent names follow the tool-name rule)."""
    if not 1 <= len(name) <= 64 or _TOOL_NAME.fullmatch(name) is None:
        return AGENT_NAME_RULE
    return None


def full_name(namespace: str, tool: str) -> str:
    """The one name a tool has everywhere: ``<namespace>__<tool>``."""
    return f"{namespace}{SEPARATOR}{tool}"

"""What a policy hook may answer about a call: ``Allow`` (optionally with replaced input), ``Ask`` (hold it for
approval, as an ``ask`` rule does) or ``Deny``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Allow:
    """No objection to the call; with ``updated_input`` the handler runs with these arguments instead
    (validated again against the tool's input model)."""

    updated_input: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Deny:
    """Refuse the call. ``message`` is what the model sees, so say what to do instead. With ``interrupt`` the agent's
    turn ends too, as the agent SDKs' ``canUseTool`` deny with ``interrupt: true``: a sub-agent's run stops there,
    and an MCP client gets the error result marked ``_meta["toolcrib/interrupt"] = true``."""

    message: str
    interrupt: bool = False  # also end the agent's turn: a sub-agent's whole run; over MCP, a marked error

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError("Deny needs a message for the model: say why, and what to do instead")


@dataclass(frozen=True, slots=True)
class Ask:
    """Hold the call for approval, as an ``ask`` rule would: approval hooks, then the client, decide (or the mode:
    ``dontAsk`` refuses, ``bypassPermissions`` approves, ``acceptEdits`` approves a tool that is not destructive).
    ``message`` says why; the person asked sees it. With ``updated_input`` the call is asked (and runs) with these
    arguments instead. A call already approved by an ``ask`` rule is not asked again."""

    message: str
    updated_input: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.message, str) or not self.message.strip():
            raise ValueError("Ask needs a message: say why the call needs approval")

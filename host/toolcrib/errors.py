"""toolcrib's exceptions: one base class, and errors that name the culprit and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


class ToolcribError(Exception):
    """Base class of the errors toolcrib raises for bad input. ``exit_code`` is what the CLI exits with."""

    exit_code = 1


class ToolDeclarationError(ToolcribError, TypeError):
    """A tool was declared wrongly (bad name, ``*args``, no description, ...). Raised at declaration."""


class UnknownAgentError(ToolcribError, LookupError):
    """The config has no agent of that name."""

    exit_code = 2

    def __init__(self, agent: str, known: Iterable[str]) -> None:
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"unknown agent {agent!r} (configured agents: {names})")
        self.agent = agent


class UnknownToolError(ToolcribError, LookupError):
    """The agent has no tool of that name. Hidden tools raise exactly this too, word for word."""

    exit_code = 2

    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown tool: {name}")
        self.name = name


class ToolError(Exception):
    """Raise in a tool handler for an expected failure: the caller gets an ``isError`` result with this text.

    >>> raise ToolError("Order not found: O-42")
    """


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the config or a pack, as ``toolcrib check`` lists it.

    ``where`` names the place (``toolcrib.toml: agents.reviewer.mode`` or ``pack 'orders'``);
    ``message`` says what was expected.
    """

    severity: str  # "error" | "warning"
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"


class ConfigError(ToolcribError):
    """The config cannot be used. Carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

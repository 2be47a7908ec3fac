"""toolcrib's exceptions: one base class, and errors that name the culprit and the fix."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


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


class Suspend(BaseException):
    """Raised by a front end's approver or channel when a call cannot go on until the client answers something (MCP
    2026-07-28's input-required round trip): the pipeline lets it through untouched, and the front end makes the
    call again with the answer. A ``BaseException``, so that a handler's ``except Exception`` cannot swallow it.
    One that ``ends`` the call instead (the client cannot give what the call needs) is audited as its error."""

    ends = False


class UnknownResourceError(ToolcribError, LookupError):
    """The agent may read no resource at that URI. Hidden resources raise exactly this too, word for word."""

    exit_code = 2

    def __init__(self, uri: str) -> None:
        super().__init__(f"Unknown resource: {uri}")
        self.uri = uri


class UnknownPromptError(ToolcribError, LookupError):
    """The agent has no prompt of that name. Hidden prompts raise exactly this too, word for word."""

    exit_code = 2

    def __init__(self, name: str) -> None:
        super().__init__(f"Unknown prompt: {name}")
        self.name = name


class InvalidArgumentsError(ToolcribError, ValueError):
    """A prompt's arguments, or a resource template's parameters, that do not validate: the message names each bad
    one and why."""


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
    line: int | None = None  # where in the config file, when the problem is the file's and the key was found

    def __str__(self) -> str:
        return f"{self.severity}: {self.where}: {self.message}"

    def located(self) -> str:
        """As ``str``, with the config file's line after its name: ``error: toolcrib.toml:4: agents.a.mdoe: ...``."""
        if self.line is None or ": " not in self.where:
            return str(self)
        source, _, path = self.where.partition(": ")
        return f"{self.severity}: {source}:{self.line}: {path}: {self.message}"


class ConfigError(ToolcribError):
    """The config cannot be used. Carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# -- containing what packs raise -------------------------------------------------------------------------------

_interrupted = False


def watch_interrupts() -> None:
    """Remember when the operator presses Ctrl-C (SIGINT), so that ``contained`` can tell the operator's
    ``KeyboardInterrupt`` from one a pack raises. Installed by the CLI; changes nothing else about Ctrl-C."""
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigint(signum: int, frame: Any) -> None:
        global _interrupted
        _interrupted = True
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, on_sigint)


def contained(exc: BaseException) -> bool:
    """Whether an exception that a pack's code raised (at import, in a hook, in a handler, in a check) is to be
    contained: reported and turned into that pack's or that call's failure, the host going on.

    Everything is contained (``SystemExit``, ``GeneratorExit``, ``KeyboardInterrupt`` and any other
    ``BaseException`` included) except the operator's own Ctrl-C and a real cancellation of the running task,
    which must stop what they stop.
    """
    if isinstance(exc, Suspend):
        return False
    if isinstance(exc, KeyboardInterrupt):
        return not _interrupted
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # not in an event loop: nobody cancelled anything here
            return True
        return task is None or task.cancelling() == 0
    return True

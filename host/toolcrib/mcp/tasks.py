"""Durable calls: MCP tasks (the ``io.modelcontextprotocol/tasks`` extension of 2026-07-28, SEP-2663).

A tool that may run as a task (``@toolcrib.tool(task="optional")``, or ``[tools.X] task``) called by a client that
declares the extension on its request answers at once with a task (``resultType: "task"``) while the same call
goes on through the whole pipeline (rules, hooks, limits, audit) in the serving process (with ``[cluster]``, its
record is on Redis for every replica: ``toolcrib.mcp.fleet.RedisTasks``). The client polls
``tasks/get`` (the result is inlined there once the call ends), answers the questions the call asks
(``inputRequests``: an approval, a form, a model turn) with ``tasks/update`` and stops it with ``tasks/cancel``.

A task belongs to who made it: the agent and the principal of its request (the OAuth subject or the static token's
variable; nobody over stdio). Anyone else asking of it gets what a task that does not exist gets. Ids are 192
random bits. Each agent keeps at most ``[host] max_tasks`` tasks, each for ``[host] task_ttl`` seconds from its
creation, then it is forgotten (a task still working then is cancelled).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import mcp_types as types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from toolcrib.mcp.roundtrip import ANSWERS

log = logging.getLogger("toolcrib.serve")

EXTENSION = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
POLL_MS = 500  # the interval a client is told to poll at
NOT_FOUND = "Failed to retrieve task: Task not found"  # a task that never was, is another's, or was forgotten
_STOPPED = "stopped: its time to live ran out"


class TasksUnavailable(Exception):
    """The store where tasks are kept cannot make one now (the shared store of ``[cluster]`` does not answer)."""


def needs_tasks(what: str) -> MCPError:
    """The error of a request only a client that declares the tasks extension may make (SEP-2575's missing
    required client capability): ``what`` says which ("tool x__y runs only as a task", "tasks/get")."""
    return MCPError(code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                    message=f"Missing required client capability: {what} needs the {EXTENSION} extension declared "
                            "on the request",
                    data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}})


def speaks_tasks(capabilities: types.ClientCapabilities | None) -> bool:
    """Whether a request's client declared the tasks extension (on 2026-07-28, in the request's own envelope)."""
    extensions = capabilities.extensions if capabilities is not None else None
    return bool(extensions) and EXTENSION in extensions  # type: ignore[operator]


def poll_seconds(ms: Any) -> float:
    """Seconds to wait before polling an upstream server's task again: its poll interval (ms), held between 0.05
    and 5 s; half a second when it gives none."""
    return min(5.0, max(0.05, ms / 1000)) if isinstance(ms, int | float) and not isinstance(ms, bool) else 0.5


class UpdateTaskParams(types.RequestParams):
    """``tasks/update``'s params: the task and the answers to questions it asked, by the keys it gave them."""

    task_id: str
    input_responses: dict[str, Any]


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(eq=False)
class Task:
    """One task: whose it is, where it stands, and what it ended with. ``changed`` hears every change (a store
    that keeps tasks elsewhere writes them there)."""

    id: str
    agent: str
    principal: str | None
    tool: str
    ttl: float  # seconds kept from creation
    created: float = field(default_factory=lambda: time.time())
    updated: float = 0.0
    status: str = "working"
    message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    asked: dict[str, dict[str, Any]] = field(default_factory=dict)  # open questions, by key: their requests
    answers: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    runner: asyncio.Task[None] | None = None  # its work, on the replica that runs it (None elsewhere)
    changed: Callable[[Task], None] | None = None
    _keys: int = 0

    def __post_init__(self) -> None:
        self.updated = self.updated or self.created

    def expired(self, now: float) -> bool:
        return now >= self.created + self.ttl

    def touch(self, status: str | None = None, message: str | None = None) -> None:
        if status is not None:
            self.status = status
        if message is not None:
            self.message = message
        self.updated = time.time()
        if self.changed is not None:
            self.changed(self)

    def wire(self) -> dict[str, Any]:
        """The task as ``tasks/get`` shows it (SEP-2663's DetailedTask, without ``resultType``)."""
        shown: dict[str, Any] = {
            "taskId": self.id, "status": self.status, "createdAt": _stamp(self.created),
            "lastUpdatedAt": _stamp(self.updated), "ttlMs": int(self.ttl * 1000), "pollIntervalMs": POLL_MS}
        if self.message is not None:
            shown["statusMessage"] = self.message
        if self.status == "input_required":
            shown["inputRequests"] = dict(self.asked)
        elif self.status == "completed":
            shown["result"] = self.result
        elif self.status == "failed":
            shown["error"] = self.error
        return shown

    def record(self) -> dict[str, Any]:
        """What a store keeps of it (its work and waiting answers stay where it runs)."""
        return {"id": self.id, "agent": self.agent, "principal": self.principal, "tool": self.tool, "ttl": self.ttl,
                "created": self.created, "updated": self.updated, "status": self.status, "message": self.message,
                "result": self.result, "error": self.error, "asked": self.asked}

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> Task:
        return cls(record["id"], record["agent"], record["principal"], record["tool"], record["ttl"],
                   record["created"], record["updated"], record["status"], record["message"], record["result"],
                   record["error"], dict(record["asked"]))

    async def ask(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Put a question to the client (``elicitation/create``, ``sampling/createMessage`` or ``roots/list``) and
        wait for its
        answer, which a ``tasks/update`` brings; meanwhile the task is ``input_required``. Each question's key is
        new for the task's whole life."""
        self._keys += 1
        key = f"{method.split('/')[0]}-{self._keys}"
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.asked[key] = {"method": method, "params": params}
        self.answers[key] = answer
        self.touch("input_required")
        try:
            return await answer
        finally:
            self.asked.pop(key, None)
            self.answers.pop(key, None)
            if self.status == "input_required" and not self.asked:
                self.touch("working")

    def checked(self, responses: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """Answers from a ``tasks/update``, each checked as an answer to the open question of its key. Answers to
        keys that are not open (never asked, answered already) are left out, as the spec says; an answer that is
        not one to its question is refused, naming its key (then none of them is taken)."""
        taken: dict[str, dict[str, Any]] = {}
        for key, response in responses.items():
            asked = self.asked.get(key)
            if asked is None:
                continue
            model = ANSWERS[asked["method"]][0]
            try:
                valid = model.model_validate(response, by_name=False)
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(part) for part in (key, *problem["loc"]))
                raise MCPError(code=types.INVALID_PARAMS, message=f"inputResponses.{where}: {problem['msg']} (the "
                                                                  f"answer to {asked['method']})") from None
            taken[key] = valid.model_dump(by_alias=True, mode="json", exclude_none=True)
        return taken

    def take(self, answers: Mapping[str, dict[str, Any]]) -> None:
        """Give checked answers to the questions waiting for them, here where the task runs."""
        for key, answer in answers.items():
            waiting = self.answers.get(key)
            if waiting is not None and not waiting.done():
                waiting.set_result(answer)


Work = Callable[[Task], Awaitable[dict[str, Any]]]  # a task's call: the tool's result (wire)


class Tasks:
    """The tasks of one serving process, of every agent it serves; with ``[cluster]``, ``toolcrib.mcp.fleet``'s
    ``RedisTasks`` keeps them where every replica finds them."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}  # oldest first
        self._counts: Counter[str] = Counter()  # per agent

    def count(self, agent: str) -> int:
        self._forget_expired()
        return self._counts[agent]

    async def start(self, agent: str, principal: str | None, tool: str, ttl: float, most: int,
                    work: Work) -> Task | None:
        """A new task, its work started on the running loop; None when the agent has ``most`` tasks kept
        (``TasksUnavailable`` when the store cannot make one now)."""
        if self.count(agent) >= most:
            return None
        return self._begin(Task(secrets.token_urlsafe(24), agent, principal, tool, ttl), work)

    def _begin(self, task: Task, work: Work) -> Task:
        self._tasks[task.id] = task
        self._counts[task.agent] += 1
        task.runner = asyncio.get_running_loop().create_task(self._run(task, work), name=f"toolcrib task {task.tool}")
        return task

    async def _run(self, task: Task, work: Work) -> None:
        try:
            result = await work(task)
        except asyncio.CancelledError:
            if task.status not in TERMINAL:  # (a task ended as failed is stopped too: it stays failed)
                task.asked.clear()
                task.touch("cancelled", task.message if task.message == _STOPPED else "cancelled by the client")
            return  # the end of a task that was stopped: nothing above it waits for it
        except MCPError as exc:
            task.asked.clear()
            task.error = exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)
            task.touch("failed", exc.error.message)
        except BaseException as exc:  # whatever a call raises, the task ends and says so; nothing else stops
            log.error("agent %r, tool %s: its task failed (%s: %s)", task.agent, task.tool, type(exc).__name__, exc,
                      exc_info=not isinstance(exc, Exception) or None)
            task.asked.clear()
            task.error = {"code": types.INTERNAL_ERROR, "message": f"Internal error: {type(exc).__name__}"}
            task.touch("failed", "the call failed inside toolcrib; the server's log says why")
            if not isinstance(exc, Exception):
                raise
        else:
            task.asked.clear()
            task.result = result
            task.touch("completed")
        finally:
            task.answers.clear()

    async def find(self, agent: str, principal: str | None, task_id: str) -> Task:
        """The task of that id if it is this agent's and this principal's and not expired; else the error a
        task that does not exist gets."""
        self._forget_expired()
        task = self._tasks.get(task_id)
        if task is not None and task.expired(time.time()):  # (one kept for less time than an older one)
            self._forget(task)
            task = None
        if task is None or task.agent != agent or task.principal != principal:
            raise MCPError(code=types.INVALID_PARAMS, message=NOT_FOUND)
        return task

    async def heard(self, task_id: str) -> None:
        """Another replica changed what a task here should do (``RedisTasks``; nothing in one process)."""

    async def close(self) -> None:
        """Stop what the store runs besides the tasks (``RedisTasks``' lease renewal)."""

    async def answer(self, task: Task, responses: Mapping[str, Any]) -> None:
        """Answer the task's open questions (``tasks/update``)."""
        task.take(task.checked(responses))

    async def cancel(self, task: Task) -> None:
        """Stop a task's work (nothing, if it has ended)."""
        self._stop(task)

    async def fail(self, task: Task, code: int, message: str, why: str) -> None:
        """End a task that cannot go on (its tool is gone from the agent's view): failed, with the error."""
        if task.status in TERMINAL:
            return
        runner, task.runner = task.runner, None
        if runner is not None:
            runner.cancel()
        task.error = {"code": code, "message": message}
        task.asked.clear()
        task.touch("failed", why)

    def _stop(self, task: Task, message: str | None = None) -> None:
        if task.status not in TERMINAL and task.runner is not None and not task.runner.done():
            if message is not None:
                task.message = message
            task.runner.cancel()

    def _forget_expired(self) -> None:
        """Forget the tasks whose time to live has run out, oldest first, up to the first that has not (a task
        kept for less time than an older one is forgotten when it is asked for)."""
        now = time.time()
        while self._tasks:
            oldest = next(iter(self._tasks.values()))
            if not oldest.expired(now):
                return
            self._forget(oldest)

    def _forget(self, task: Task) -> None:
        del self._tasks[task.id]
        self._counts[task.agent] -= 1
        self._stop(task, _STOPPED)


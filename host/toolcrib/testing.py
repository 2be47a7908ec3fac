"""Test helpers for tool-pack authors: a pytest plugin (registered under ``pytest11``, inert until a test asks for
its fixtures) and a conformance check.

    def test_lookup(toolcrib_pack):
        kit = toolcrib_pack(acme_orders, namespace="orders", settings={"region": "eu"})
        assert kit.names == ["orders__lookup_order"]
        assert kit.call("lookup_order", order_id="O-1001").structured_content["status"] == "shipped"
        assert kit.read("orders://O-1001")[0]["mimeType"] == "application/json"
        assert kit.problems() == []          # names, schemas, descriptions, availability, validation errors

Importing this module imports nothing heavy: pytest loads it in every project where toolcrib is installed.
"""

from __future__ import annotations

import functools
import time
import typing
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from toolcrib.content import ToolResult
    from toolcrib.host import Host
    from toolcrib.view import AgentView

AGENT = "tester"
T = typing.TypeVar("T")


class PackKit:
    """A host around one pack, with an agent (``tester``) that sees every tool the pack offers it. An isolated kit
    (``isolated=True``) runs the pack in its own confined process, as ``[packs.<ns>] isolate = true`` does, and
    must be closed (the fixture closes it)."""

    def __init__(self, host: Host, namespace: str, workspace: Path, portal: Any = None,
                 close: Callable[[], None] | None = None) -> None:
        self.host = host
        self.namespace = namespace
        self.workspace = workspace
        self._portal = portal  # an isolated kit's calls run on the event loop its pack's connection lives on
        self._close = close

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()`` (a coroutine) to its end: on the kit's own loop when isolated, else on a new one."""
        import anyio

        async def awaited() -> T:
            return await make()

        if self._portal is not None:
            return typing.cast(T, self._portal.call(awaited))
        return anyio.run(awaited)

    def close(self) -> None:
        if self._close is not None:
            self._close()
            self._close = None
        self.host.close()

    @property
    def view(self) -> AgentView:
        return self.host.view(AGENT)

    @property
    def names(self) -> list[str]:
        """The full names of the tools the agent sees."""
        return self.view.names

    def full_name(self, tool: str) -> str:
        return tool if "__" in tool else f"{self.namespace}__{tool}"

    def call(self, tool: str, /, **arguments: Any) -> ToolResult:
        """Call a tool (its own name or its full name) through the full pipeline."""
        return self.run(lambda: self.view.call(self.full_name(tool), arguments))

    def read(self, uri: str) -> list[dict[str, Any]]:
        """Read a resource (the contents, as MCP's resources/read gives them)."""
        return self.run(lambda: self.view.read(uri))

    def prompt(self, name: str, /, **arguments: Any) -> dict[str, Any]:
        """Get a prompt (its own name or its full name): ``{"description", "messages"}``."""
        return self.run(lambda: self.view.get_prompt(self.full_name(name), arguments))

    def complete(self, ref: str, argument: str, value: str = "") -> list[str]:
        """The completions of ``argument`` of a prompt (by name) or a resource template (by its URI template)."""
        kind = {"type": "ref/resource", "uri": ref} if ":" in ref else {"type": "ref/prompt",
                                                                          "name": self.full_name(ref)}
        return list(self.run(lambda: self.view.complete(kind, argument, value)))

    def problems(self) -> list[str]:
        """Everything the conformance check finds wrong with the pack; an empty list means it passes."""
        return check_pack(self.host, self.namespace, self.run)


def make_kit(
    pack: Any,
    *,
    namespace: str = "pack",
    settings: Mapping[str, Any] | None = None,
    model: str | None = None,
    capabilities: Iterable[str] = (),
    mode: str = "default",
    workspace: Path,
    isolated: bool = False,
) -> PackKit:
    """Build a ``PackKit``: ``pack`` is the pack's module or plugin object, ``settings`` its ``[packs.<ns>]``
    table, ``model``/``capabilities`` what the tester agent's model has (``capabilities=["vision"]``). With
    ``isolated``, the pack (then a module, or ``"module:attr"``) runs in a confined process of its own, served to
    the kit's host as ``[packs.<ns>] isolate = true`` serves it; close the kit when done."""
    from toolcrib.config import Config, LoadedConfig, check_config
    from toolcrib.errors import ConfigError
    from toolcrib.host import Host

    everything = {"allow": ["*"]}
    agent: dict[str, Any] = {"mode": mode, "permissions": {d: everything for d in
                                                            ("plugins", "mcps", "tools", "skills", "subagents",
                                                             "resources", "prompts")}}
    if mode == "bypassPermissions":
        agent["allow_dangerously_skip_permissions"] = True
    data: dict[str, Any] = {"host": {"workspace": str(workspace)}, "agents": {AGENT: agent},
                            "packs": {namespace: {**dict(settings or {}), **({"isolate": True} if isolated else {})}}}
    if model is not None or capabilities:
        model = model or "test-model"
        agent["model"] = model
        data["models"] = {model: {c: True for c in capabilities}}
    config = Config.model_validate(data)
    problems = check_config(config, "toolcrib.testing")
    if problems:
        raise ConfigError(problems)
    # isolated, the kit's (unwritten) config and lock must lie outside the workspace the pack's process may write
    loaded = LoadedConfig(config=config, source="toolcrib.testing", base_dir=workspace.parent if isolated else
                          workspace)
    if not isolated:
        return PackKit(Host(loaded, plugins={namespace: pack}, autoload=False, env={}), namespace, workspace)
    import contextlib

    from anyio.from_thread import start_blocking_portal

    from toolcrib.supply import supply
    from toolcrib.supply.mcp import isolated as isolation

    module = pack if isinstance(pack, str) else getattr(pack, "__name__", None)
    if not isinstance(module, str):
        raise TypeError("an isolated pack kit takes the pack's module (or 'module:attr'): its process imports it")
    isolation.MODULES[namespace] = module
    stack = contextlib.ExitStack()
    portal = stack.enter_context(start_blocking_portal())
    made = stack.enter_context(portal.wrap_async_context_manager(supply({})))
    host = Host(loaded, sources=portal.call(made.sync, loaded), autoload=False, env={})
    return PackKit(host, namespace, workspace, portal, stack.close)


@pytest.fixture
def toolcrib_pack(tmp_path: Path) -> Iterator[Callable[..., PackKit]]:
    """A factory: ``toolcrib_pack(module, namespace=..., settings=..., capabilities=..., mode=...)`` builds a
    ``PackKit`` around the pack, with a fresh temporary workspace."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()

    made: list[PackKit] = []

    def make(pack: Any, **options: Any) -> PackKit:
        options.setdefault("workspace", workspace)
        kit = make_kit(pack, **options)
        made.append(kit)
        return kit

    yield make
    for kit in made:
        kit.close()


def check_pack(host: Host, namespace: str, run: Callable[[Callable[[], Awaitable[Any]]], Any] | None = None
               ) -> list[str]:
    """The conformance check over one pack loaded in ``host`` (``run`` runs a coroutine function to its end: a new
    event loop by default)."""
    import anyio

    run = run or anyio.run

    from toolcrib.errors import ToolDeclarationError, UnknownToolError
    from toolcrib.names import HIDDEN_CHARACTERS

    found: list[str] = []
    record = host.catalog.record(namespace)
    if record is None or record.state != "loaded":
        return [f"the pack did not load: {record.error if record else 'no such pack'}"]
    found += [str(p) for p in host.catalog.problems if p.severity == "error"]
    entries = [e for e in host.catalog.entries.values() if e.namespace == namespace]
    items = [i for i in (*host.catalog.resources.values(), *host.catalog.prompts.values()) if i.namespace == namespace]
    if not (entries or items):
        found.append("the pack offers no tools, resources or prompts")
    for item in items:
        text = item.item.description
        if len(text) < 10:
            found.append(f"{item.name}: the description is too short to tell a model or a user what it is")
        hidden = HIDDEN_CHARACTERS.search(text + (item.item.title or ""))
        if hidden:
            found.append(f"{item.name}: the description holds a hidden or control character "
                         f"(U+{ord(hidden.group()):04X})")
    validator = _schema_checker()
    rules = host.rules.get(AGENT)
    for entry in entries:
        tool = entry.tool
        try:
            tool.prepare()
        except ToolDeclarationError as exc:
            found.append(f"{entry.name}: {exc}")
            continue
        if validator is not None:
            for which, schema in (("input", tool.input_schema), ("output", tool.output_schema)):
                if schema is None:
                    continue
                try:
                    validator(schema)
                except Exception as exc:
                    found.append(f"{entry.name}: the {which} schema is not valid JSON Schema: {exc}")
        if len(tool.description) < 10:
            found.append(f"{entry.name}: the description is too short to tell a model when to use the tool")
        hidden = HIDDEN_CHARACTERS.search(tool.description + "".join(str(v) for v in tool.annotations.values()))
        if hidden:
            found.append(f"{entry.name}: the description holds a hidden or control character "
                         f"(U+{ord(hidden.group()):04X})")
        if tool.is_available is not None and rules is not None:
            found += _check_availability(host, entry, rules)
    view = host.view(AGENT)
    for entry in entries:
        if entry.name not in view:
            continue
        try:
            result = run(functools.partial(view.call, entry.name, {"__toolcrib_conformance__": 1}))
        except UnknownToolError:
            found.append(f"{entry.name}: listed but not callable")
            continue
        if not (result.is_error and result.text.startswith(f"Invalid arguments for {entry.name}")):
            found.append(f"{entry.name}: an unknown argument was not refused as invalid ({result.text[:80]!r})")
    return found


def _check_availability(host: Host, entry: Any, rules: Any) -> list[str]:
    from toolcrib.context import AvailabilityContext

    ctx = AvailabilityContext(agent=AGENT, model=rules.config.model, capabilities=rules.capabilities,
                              settings=entry.settings, mode=rules.mode)
    answers = []
    for _ in range(3):
        started = time.perf_counter()
        try:
            answers.append(entry.tool.is_available(ctx))
        except Exception as exc:
            return [f"{entry.name}: is_available raised {type(exc).__name__}: {exc}"]
        if time.perf_counter() - started > 0.05:
            return [f"{entry.name}: is_available took more than 50 ms; it runs for every agent when views are "
                    "built, so keep it to a cheap look at ctx"]
    problems = []
    if any(not (a is True or a is False or isinstance(a, str)) for a in answers):
        problems.append(f"{entry.name}: is_available returned {answers[0]!r}; return True, False or a reason")
    if len({repr(a) for a in answers}) > 1:
        problems.append(f"{entry.name}: is_available answered differently for the same context ({answers!r}); it "
                        "must depend on the context only")
    return problems


def _schema_checker() -> Callable[[Any], None] | None:
    try:
        from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # no stubs; comes with mcp
    except ImportError:  # pragma: no cover
        return None
    check: Callable[[Any], None] = Draft202012Validator.check_schema
    return check

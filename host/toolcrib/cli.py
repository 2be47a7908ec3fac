"""The ``toolcrib`` command: thin click commands over the same objects the Python API uses."""

from __future__ import annotations

import atexit
import base64
import functools
import gc
import json
import logging
import os
import shutil
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from functools import wraps
from importlib import resources as package_data
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic_core import PydanticSerializationError, to_json

from toolcrib.clients import CLIENTS, add_server, client_file, portable_entry
from toolcrib.config import DEFAULT_FILE, find_config
from toolcrib.errors import ConfigError, ToolcribError, ToolError, watch_interrupts
from toolcrib.view import freeze_builds

F = TypeVar("F", bound=Callable[..., Any])


class _NotFound(ToolcribError):
    exit_code = 2


class State:
    def __init__(self) -> None:
        self.config: str | None = None
        self.debug = False
        self.url: str | None = None  # the operator endpoint's (toolcrib approvals --url)


def _debug_only(fn: F) -> F:
    """``--debug`` alone, for a command that reads no config (``new``)."""

    def set_debug(ctx: click.Context, _: Any, value: bool) -> None:
        if value:
            ctx.ensure_object(State).debug = True

    return click.option("--debug", "_debug", is_flag=True, expose_value=False, callback=set_debug,
                        help="Show tracebacks and debug logs.")(fn)


def _common(fn: F) -> F:
    """``--config`` and ``--debug`` on every command, so they work before or after the command name."""

    def set_config(ctx: click.Context, _: Any, value: str | None) -> None:
        if value is not None:
            ctx.ensure_object(State).config = value

    def set_debug(ctx: click.Context, _: Any, value: bool) -> None:
        if value:
            ctx.ensure_object(State).debug = True

    fn = click.option("--config", "_config", metavar="PATH", expose_value=False, callback=set_config,
                      help="Config file (default: $TOOLCRIB_CONFIG, ./toolcrib.toml, or the built-in default).")(fn)
    fn = click.option("--debug", "_debug", is_flag=True, expose_value=False, callback=set_debug,
                      help="Show tracebacks and debug logs.")(fn)
    return fn


def _guard(fn: F) -> F:
    """One clear message instead of a traceback for toolcrib's own errors (``--debug`` shows tracebacks)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = click.get_current_context().ensure_object(State)
        logging.basicConfig(level=logging.DEBUG if state.debug else logging.WARNING, stream=sys.stderr,
                            format="%(levelname)s %(name)s: %(message)s")
        try:
            return fn(*args, **kwargs)
        except (ToolcribError, BaseExceptionGroup) as raised:
            exc = _own_error(raised)
            if exc is None:
                raise
            if state.debug:
                traceback.print_exc()
            if isinstance(exc, ConfigError):
                for problem in exc.problems:
                    click.echo(problem.located(), err=True)
            else:
                click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)

    return wrapper  # type: ignore[return-value]


def _own_error(exc: BaseException) -> ToolcribError | None:
    """The toolcrib error behind ``exc``, also when a task group wrapped it in an exception group."""
    if isinstance(exc, ToolcribError):
        return exc
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return _own_error(exc.exceptions[0])
    return None


@contextmanager
def _session(agent: str | None = None, *names: str) -> Iterator[tuple[Any, Any]]:
    """The host (and, when upstream MCP servers are connected, the portal their connections live on). With an
    ``agent``, only the upstream servers it may reach are connected (and those the ``names`` name): a command
    about one agent does not wait for every server."""
    from toolcrib.mcp.connect import needed_by, open_host

    servers = needed_by(agent, *(n.split("__", 1)[0] for n in names)) if agent is not None else None
    with open_host(click.get_current_context().ensure_object(State).config, servers=servers) as (host, portal):
        yield host, portal


@contextmanager
def _quieted(name: str) -> Iterator[None]:
    """The logger's warnings left out while the block runs (the command prints the same thing itself)."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _pick_agent(given: str | None) -> str:
    """The agent a command is about: the one given, or the config's only agent."""
    if given is not None:
        return given
    from toolcrib.config import load_config

    agents = sorted(load_config(click.get_current_context().ensure_object(State).config).config.agents)
    if len(agents) == 1:
        return agents[0]
    raise click.UsageError(f"pass --agent NAME: the config has {len(agents)} agents ({', '.join(agents)}); "
                           "`toolcrib agents` describes them")


def _echo_json(value: Any) -> None:
    """``value`` as indented JSON, non-ASCII as it is. pydantic-core writes it: ``json.dumps`` writes an indent only
    with Python's pure encoder, a tenth of the speed (0.4 ms of each pack's 2 in ``toolcrib tools --json``). The
    text is the same but for how a few floats are spelt (``1e-7`` for ``1e-07``, ``0.00001`` for ``1e-05``)."""
    try:
        text = to_json(value, indent=2).decode()
    except PydanticSerializationError:  # a lone surrogate (a JSON "\ud800" read in): escaped, it round-trips
        text = json.dumps(value, indent=2)
    click.echo(text)


class _Toolcrib(click.Group):
    """The ``toolcrib`` group: click's own errors (a bad option, a missing argument) with the one prefix every
    toolcrib error has, ``error:`` (click writes ``Error:``)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with the whole first sentence of its help, wrapped (click cuts it at the width, with
        "...")."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is None or command.hidden:
                continue
            text = " ".join((command.short_help or command.help or "").split("\n\n", 1)[0].split())
            end = text.find(". ")
            rows.append((name, text[:end + 1] if end >= 0 else text))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            result = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            ctx = exc.ctx if isinstance(exc, click.UsageError) else None
            if ctx is not None:
                names = ctx.command.get_help_option_names(ctx)
                hint = f"Try '{ctx.command_path} {max(names, key=len)}' for help.\n" if names else ""
                click.echo(f"{ctx.get_usage()}\n{hint}", err=True, color=ctx.color)
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(result if isinstance(result, int) else 0)


@click.group(cls=_Toolcrib, context_settings={"help_option_names": ["-h", "--help"]})
@_common
@click.version_option(package_name="toolcrib")
def main() -> None:
    """toolcrib: serve tool packs to AI agents, each agent seeing only the tools its config allows."""
    watch_interrupts()  # the operator's Ctrl-C stops toolcrib; a KeyboardInterrupt a pack raises does not
    # When the command is over, what is left is frozen out of the collector: the interpreter's last collections
    # would only walk a heap that is about to go (a third of a second with 1,000 packs). Once per process.
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


@main.command()
@_common
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def plugins(as_json: bool) -> None:
    """List every source of tools: packs, built-ins and upstream servers, with their state.

    \b
    Example: toolcrib plugins --json
    """
    with _quieted("toolcrib.plugins"), _session() as (host, _):  # a failed pack is listed below, once
        records = [r.to_json() for r in host.records]
    if as_json:
        _echo_json(records)
        return
    if not records:
        click.echo("no plugins")
        return
    rows = [(r["name"], r["kind"], r["state"], str(r["tool_count"]),
             " ".join(filter(None, [r["distribution"], r["version"]])) or "-") for r in records]
    header = ("NAME", "KIND", "STATE", "TOOLS", "DISTRIBUTION")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for row, record in zip(rows, records, strict=True):
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if record["error"]:  # why it failed; for one that serves (or is not served), what it said of itself
            click.echo(f"    {'error' if record['state'] == 'failed' else 'note'}: {record['error']}")


@main.command()
@_common
@click.option("--strict", is_flag=True, help="Exit non-zero on warnings too.")
@click.option("--json", "as_json", is_flag=True, help="Print the problems and counts as JSON.")
@_guard
def check(strict: bool, as_json: bool) -> None:
    """Validate the config and the packs; list every problem and exit non-zero on errors. Where an agent searches
    its tools, also say how searches are ranked (BM25, or BM25 and toolcrib-vectors' word vectors).

    \b
    Example: toolcrib check --strict
    """
    try:
        with _quieted("toolcrib.plugins"), _session() as (host, _):  # a failed pack is listed below, once
            problems = host.problems()
            if host.loaded.config.cluster is not None:  # is its Redis there? (only then is redis imported)
                from toolcrib.cluster import probe

                problems += probe(host.loaded)
            operator = host.loaded.config.operator
            if operator is not None and operator.console:  # can it render? (only then is the console imported)
                from toolcrib.mcp import console

                problems += console.probe(host.loaded)
    except ConfigError as exc:
        if not as_json:
            raise
        from toolcrib.config import BUILTIN_NAME, find_config

        found = find_config(click.get_current_context().ensure_object(State).config)
        _echo_json({"config": str(found) if found is not None else BUILTIN_NAME, "loaded": False,
                    "errors": len(exc.problems), "warnings": 0,
                    "problems": [{"severity": p.severity, "where": p.where, "message": p.message,
                                  "line": p.line} for p in exc.problems]})
        sys.exit(exc.exit_code)
    errors = sum(1 for p in problems if p.severity == "error")
    warnings = len(problems) - errors
    tools = len(host.catalog.entries)
    searching = [name for name, agent in host.loaded.config.agents.items() if agent.tool_search is not None]
    ranking = None
    if searching:
        from toolcrib.search import ranking as search_ranking

        ranking = search_ranking()
    # what each upstream server may send the agents' clients during a call ([mcps.x] forward)
    from toolcrib.supply.mcp.settings import FORWARDABLE

    forwarding = {name: list(server.forward) for name, server in sorted(host.loaded.config.mcps.items())
                  if server.enabled}
    sampling = host.sampling_subagents()
    # which sources are called as each caller ([mcps.x] / [openapi.x] exchange)
    config = host.loaded.config
    acting = {f"{what} {name!r}": source.exchange.model_dump() if source.exchange is not None else
              {"consent": source.consent.authorization_endpoint, "scopes": source.consent.scopes,
               "fallback": source.consent.fallback}
              for what, table in (("upstream server", config.mcps), ("OpenAPI source", config.openapi))
              for name, source in sorted(table.items())
              if source.enabled and (source.exchange is not None or source.consent is not None)}
    if as_json:
        _echo_json({"config": host.loaded.source, "loaded": True, "agents": len(host.agents), "tools": tools,
                    **({"tool_search_ranking": ranking} if ranking is not None else {}),
                    **({"forwarding": forwarding} if forwarding else {}),
                    **({"sampling_subagents": sampling} if sampling else {}),
                    **({"called_as_the_caller": acting} if acting else {}), "errors": errors,
                    "warnings": warnings, "problems": [{"severity": p.severity, "where": p.where,
                                                        "message": p.message} for p in problems]})
    else:
        for problem in problems:
            click.echo(str(problem), err=True)
        click.echo(f"{host.loaded.source}: {len(host.agents)} agent(s), {tools} tool(s), {errors} error(s), "
                   f"{warnings} warning(s)")
        if ranking is not None:
            click.echo(f"tool search ({', '.join(searching)}): ranked by {ranking}")
        for name, forwarded in forwarding.items():
            left = [what for what in FORWARDABLE if what not in forwarded]
            click.echo(f"upstream server {name!r} forwards to the agents' clients: {', '.join(forwarded) or 'nothing'}"
                       + (f" (not {', '.join(left)})" if left else ""))
        for source, how in acting.items():
            scopes = f", scopes {' '.join(how['scopes'])}" if how["scopes"] else ""
            otherwise = "its own credential" if how["fallback"] else "an error"
            if "consent" in how:
                click.echo(f"{source} is called with each person's own grant, given at {how['consent']}{scopes}; "
                           f"a call by no signed-in person gets {otherwise}")
            else:
                click.echo(f"{source} is called as each caller: a token exchanged for audience {how['audience']!r}"
                           f"{scopes}; a call with none to exchange gets {otherwise}")
        if sampling:
            click.echo("sub-agents on the calling client's model (MCP sampling, deprecated as of 2026-07-28: a client "
                       "may not offer it; one whose model llm runs, with its key, runs on its own): "
                       + ", ".join(f"{name} (of {', '.join(by)})" for name, by in sampling.items()))
    if errors or (strict and warnings):
        sys.exit(1)


@main.command()
@_common
@click.option("--json", "as_json", is_flag=True, help="Print what was locked as JSON.")
@_guard
def lock(as_json: bool) -> None:
    """Record what every tool the config serves looks like, in toolcrib.lock beside the config: a tool whose
    definition changes afterwards (a pack upgrade, an upstream server redefining it) is held back until you lock
    again.

    \b
    Example: toolcrib lock
    """
    from toolcrib import lock as definitions

    with _session() as (host, portal):
        entries = dict(host.catalog.entries)
        for name in host.lazy_servers:  # connected now: their tools are locked as every other source's
            source = host.sources.get(name)
            try:
                loading = functools.partial(source.pool.load, name, held=True)
                entries.update({e.name: e for e in portal.call(loading)})
            except Exception as exc:
                click.echo(f"warning: the tools of lazy server {name!r} are not locked: {exc}", err=True)
        held = sorted(name for name, entry in entries.items() if entry.held is not None)
        path, count = definitions.write(host.loaded, entries)
    if as_json:
        _echo_json({"path": str(path), "tools": count, "accepted": held})
        return
    for name in held:
        click.echo(f"accepted the new definition of {name}")
    click.echo(f"locked {count} tools in {path}")


@main.command()
@_common
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the path written as JSON.")
@_guard
def init(force: bool, as_json: bool, path: Path | None) -> None:
    """Write a commented starter config (default ./toolcrib.toml, or --config PATH).

    \b
    Example: toolcrib init && toolcrib check
    """
    target = path or Path(click.get_current_context().ensure_object(State).config or DEFAULT_FILE)
    if target.exists() and not force:
        raise click.ClickException(f"{target} exists; pass --force to overwrite it")
    text = package_data.files("toolcrib").joinpath("templates/toolcrib.toml").read_text(encoding="utf-8")
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        hint = " (create the folder first)" if not target.parent.is_dir() else ""
        raise click.ClickException(f"cannot write {target}: {exc.strerror}{hint}") from None
    if as_json:
        _echo_json({"path": str(target)})
        return
    click.echo(f"wrote {target}; check it with: toolcrib --config {target} check")


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--json", "as_json", is_flag=True, help="Print the list exactly as MCP tools/list gives it.")
@click.option("--all", "show_all", is_flag=True, help="Also list hidden tools, each with why it is hidden.")
@_guard
def tools(agent: str | None, as_json: bool, show_all: bool) -> None:
    """List the tools an agent sees, in the order MCP lists them.

    \b
    Example: toolcrib tools --agent reader --all
    """
    agent = _pick_agent(agent)
    with _session(None if show_all else agent) as (host, _):
        _tools(host, agent, as_json, show_all)


def _tools(host: Any, agent: str, as_json: bool, show_all: bool) -> None:
    view = host.view(agent)
    if not show_all:
        if as_json:
            _echo_json(view.listed_tools)  # what tools/list gives: where the agent searches, before any search
            return
        listed = {wire["name"] for wire in view.listed_tools}
        deferred = [wire for wire in view.mcp_tools if wire["name"] not in listed]
        _signatures([wire for wire in view.mcp_tools if wire["name"] in listed])
        if deferred:
            click.echo(f"\nfound by searching ({len(deferred)}: not in tools/list until toolcrib__search_tools finds "
                       "them; a call by name works):")
            _signatures(deferred)
        if not view.tools:
            click.echo(f"agent {agent!r} sees no tools (toolcrib tools --agent {agent} --all says why)", err=True)
        return
    if as_json:
        _echo_json(host.listing(agent, hidden=True))
        return
    for decision in host.decisions(agent):
        if decision.visible:
            click.echo(f"visible  {decision.name}")
        else:
            click.echo(f"hidden   {decision.name}  ({decision.reason})")


def _signatures(wires: list[dict[str, Any]]) -> None:
    """Each tool as its signature and its description's first paragraph, in two columns where the terminal leaves
    the description 40 characters or more (a long signature's description on the next line), else each
    description on the line under its signature."""
    columns = shutil.get_terminal_size().columns  # $COLUMNS first, else the terminal's, else 80
    signatures = [signature(wire) for wire in wires]
    width = max((len(left) for left in signatures if len(left) <= 48), default=0)  # longer: own line
    if columns - width - 2 < 40:
        width = 0  # too narrow for two columns
    for left, wire in zip(signatures, wires, strict=True):
        if len(left) > width:  # a long signature: its description on the next line
            click.echo(f"{left}\n    {_first_line(wire.get('description') or '', max(20, columns - 4))}")
        else:
            click.echo(f"{left:<{width}}  {_first_line(wire.get('description') or '', max(20, columns - width - 2))}")


_PY = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict",
       "null": "None"}


def signature(tool: Mapping[str, Any]) -> str:
    """A tool as a plain signature, from its (served, self-contained) input schema: ``fs__read_file(path: str,
    start_line: int = 1)``, ``orders__ship(color: Color('red' | 'green') = 'red', address: Address, notes:
    dict[str, str] | None = None)``: one quoting style (Python's), enums with their members, models by title."""
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parts = []
    for name, prop in properties.items():
        text = f"{name}: {_type_of(prop)}"
        if name not in required:
            default = prop.get("default") if isinstance(prop, dict) else None
            text += f" = {default!r}"
        parts.append(text)
    return f"{tool['name']}({', '.join(parts)})"


def _type_of(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "Any"
    kinds = schema.get("type")
    nullable = isinstance(kinds, list) and "null" in kinds
    if isinstance(kinds, list):
        rest = [k for k in kinds if k != "null"]
        kinds = rest[0] if len(rest) == 1 else rest
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        members = " | ".join(repr(v) for v in values if v is not None)
        text = f"{schema['title']}({members})" if isinstance(schema.get("title"), str) else members
        return f"{text} | None" if nullable or None in values else text
    if isinstance(kinds, list):
        text = " | ".join(_PY.get(k, str(k)) for k in kinds)
    elif kinds == "array" and isinstance(schema.get("items"), dict):
        text = f"list[{_type_of(schema['items'])}]"
    elif kinds == "object" and isinstance(schema.get("title"), str) and "properties" in schema:
        text = schema["title"]  # a model
    elif kinds == "object" and isinstance(schema.get("additionalProperties"), dict):
        text = f"dict[str, {_type_of(schema['additionalProperties'])}]"
    elif kinds in _PY:
        text = _PY[kinds]
    elif options := schema.get("anyOf") or schema.get("oneOf"):
        text = " | ".join(_type_of(o) for o in options)
    else:
        text = "Any"
    return f"{text} | None" if nullable else text


def _first_line(text: str, width: int = 100) -> str:
    """The description's first paragraph on one line, cut to ``width``."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    return paragraph if len(paragraph) <= width else paragraph[: width - 3].rstrip() + "..."


@main.command()
@_common
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_guard
def agents(as_json: bool) -> None:
    """List the config's agents: mode, model, how many tools each sees, and what it does.

    \b
    Example: toolcrib agents
    """
    with _session() as (host, _):
        rows = []
        for name in host.agents:
            config = host.loaded.config.agents[name]
            rows.append({"name": name, "mode": config.mode, "model": config.model, "tools": len(host.view(name)),
                         "description": config.description})
    if as_json:
        _echo_json(rows)
        return
    headers = ("NAME", "MODE", "MODEL", "TOOLS", "DESCRIPTION")
    table = [headers, *((r["name"], r["mode"], r["model"] or "-", str(r["tools"]), _first_line(
        r["description"] or "", 60)) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers) - 1)]
    for row in table:
        click.echo(("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  "
                    + row[-1]).rstrip())


@main.command()
@_debug_only
@click.option("--namespace", help="The pack's namespace (default: from NAME, without a 'toolcrib-' prefix).")
@click.option("--directory", type=click.Path(file_okay=False, path_type=Path), help="Where (default: ./NAME).")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print what was made as JSON.")
@_guard
def new(namespace: str | None, directory: Path | None, as_json: bool, name: str) -> None:
    """Scaffold a tool pack NAME (a distribution name, like acme-orders) that installs and passes its own tests.

    \b
    Example: toolcrib new acme-orders
    """
    from toolcrib.scaffold import ScaffoldError, new_pack

    try:
        made = new_pack(name, namespace, directory)
    except ScaffoldError as exc:
        if exc.argument == "directory":
            raise click.ClickException(str(exc)) from None
        raise click.BadParameter(str(exc), param_hint="NAME" if exc.argument == "name" else "--namespace") from None
    if as_json:
        _echo_json({"directory": str(made.directory), "namespace": made.namespace})
        return
    click.echo(f"created {made.directory}/ (namespace {made.namespace!r}); next:\n  cd {made.directory} && pip "
               "install -e '.[test]' && pytest\n  toolcrib plugins")


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--format", "fmt", type=click.Choice(["mcp", "openai", "openai-responses", "anthropic", "mcp-all"]),
              default="mcp", show_default=True,
              help="mcp: tools/list objects; openai: function tools for Chat Completions; openai-responses: for the "
              "Responses API (with its tool search, by namespace, when the agent searches); anthropic: tool "
              "definitions; mcp-all: tools, resources, resource templates and prompts, as MCP lists them.")
@click.option("--strict", is_flag=True, help="openai, openai-responses: strict function tools (OpenAI's strict mode) "
              "where a tool's schema can be; each tool that cannot is named on stderr, with the argument and why.")
@_guard
def schema(agent: str | None, fmt: str, strict: bool) -> None:
    """Export the tools an agent sees, as JSON for a framework that does not speak MCP (or, with mcp-all, all it is
    served).

    \b
    Example: toolcrib schema --agent reader --format openai --strict
    """
    agent = _pick_agent(agent)
    if strict and fmt not in ("openai", "openai-responses"):
        raise click.UsageError("--strict is OpenAI's: use it with --format openai or openai-responses")
    with _session(agent) as (host, _):
        view = host.view(agent)
        _echo_json(view.surface() if fmt == "mcp-all" else view.export(fmt, strict=strict))
        for name, why in (view.not_strict() if strict else {}).items():
            click.echo(f"toolcrib: {name} is not strict: {why}", err=True)


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("tool")
@_guard
def explain(agent: str | None, as_json: bool, tool: str) -> None:
    """Say why TOOL is or is not visible to an agent: each check and the rule or reason that decided it. TOOL may
    also be a prompt, or a resource (by name or URI).

    \b
    Example: toolcrib explain --agent reader fs__write_file
    """
    agent = _pick_agent(agent)
    with _session(agent, tool) as (host, _):
        visible = _explain(host, agent, as_json, tool)
    if not visible:
        sys.exit(1)


def _explain(host: Any, agent: str, as_json: bool, tool: str) -> bool:
    decision = host.explain(agent, tool)
    if decision is None:
        close = host.similar(tool)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise _NotFound(f"no installed source offers a tool, prompt or resource named {tool!r}{hint} (toolcrib "
                        "plugins lists the sources)")
    vt = host.view(agent).lookup(tool)
    entry = host.catalog.entries.get(tool)
    source_name = entry.tool.source_name if entry is not None else None
    curation = entry.curation if entry is not None else None
    who = _who(host, agent, tool)
    if as_json:
        out = decision.to_json()
        if who:
            out["identity"] = who
        if source_name is not None:
            out["source_name"] = source_name
        if curation is not None:
            out["curation"] = {"original": curation.original, "changes": list(curation.changes)}
        if vt is not None and vt.call_rules is not None:
            out["call_rules"] = vt.call_rules.to_json()
        listing = _listing(host, agent, vt)
        if listing is not None:
            out["listed"] = listing == "listed up front"
        _echo_json(out)
        return bool(decision.visible)
    verdict = "visible to" if decision.visible else "hidden from"
    click.echo(f"{tool} is {verdict} agent {agent!r} (mode {host.rules[agent].mode!r}).")
    if source_name is not None:
        click.echo(f"  (its source calls it {source_name!r})")
    for change in curation.changes if curation is not None else ():
        click.echo(f"  curated: {change}")
    for check in decision.checks:
        click.echo(f"  {check.name:<11} {'ok  ' if check.passed else 'FAIL'}  {check.detail}")
    listing = _listing(host, agent, vt)
    if listing is not None:
        click.echo(f"  tool search {listing}")
    if vt is not None and vt.call_rules is not None:
        rules = vt.call_rules.to_json()
        click.echo("  calls:")
        for key in ("deny", "allow", "ask", "approve"):
            for text in rules[key]:
                click.echo(f"    {key:<5} {text}")
        if rules["subjects"]:
            click.echo(f"    (specifiers match the argument{'s' if len(rules['subjects']) > 1 else ''} "
                       f"{', '.join(map(repr, rules['subjects']))})")
    if who:
        click.echo("  over HTTP, as this agent:")
        if who.get("tokens"):
            click.echo(f"    static tokens  {', '.join('$' + v for v in who['tokens'])}")
        if "claims" in who:
            claims = "; ".join(f"{k} {' | '.join(v)}" for k, v in who["claims"].items())
            scopes = f" (scopes {', '.join(who['scopes'])})" if who["scopes"] else ""
            click.echo(f"    OAuth tokens   {claims}{scopes}")
        if who.get("needs_scope"):
            click.echo(f"    an OAuth token sees {tool} only with the scope {' or '.join(who['needs_scope'])}")
    return bool(decision.visible)


def _listing(host: Any, agent: str, vt: Any) -> str | None:
    """With ``tool_search`` on, whether a visible tool is listed up front or found by search; None otherwise."""
    view = host.view(agent)
    if vt is None or not view.deferring:
        return None
    if any(tool["name"] == vt.served for tool in view.listed_tools):
        return "listed up front"
    return "deferred: not listed up front, found by toolcrib__search_tools (callable by name)"


def _who(host: Any, agent: str, name: str) -> dict[str, Any]:
    """Which credentials act as the agent over HTTP (variable names and claim globs, never a token), and the scopes
    of ``identity.needs_scope`` that guard ``name``."""
    config = host.loaded.config
    agent_config = config.agents[agent]
    variables = agent_config.token_env
    found: dict[str, Any] = {}
    if variables:
        found["tokens"] = [variables] if isinstance(variables, str) else list(variables)
    identity = agent_config.identity
    if identity is not None and config.oauth is not None:
        found["claims"] = {claim: [globs] if isinstance(globs, str) else list(globs)
                           for claim, globs in identity.claims.items()}
        found["scopes"] = list(identity.scopes)
        hidden = []  # the scopes without which the one decision hides it (for a name it shows)
        for scope in sorted(identity.needs_scope):
            decision = host.explain(agent, name, frozenset({scope}))
            if decision is not None and not decision.visible and any(c.name == "scope" for c in decision.checks
                                                                     if not c.passed):
                hidden.append(scope)
        if hidden:
            found["needs_scope"] = hidden
    return found


@main.command()
@_common
@click.option("--agent", help="Serve this agent over stdio.")
@click.option("--http", "http", is_flag=True, help="Serve every agent over streamable HTTP at /agents/<name>/mcp.")
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="Address to bind (--http).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(0, 65535), help="Port (--http).")
@click.option("--allow-remote", is_flag=True, help="Allow binding a non-loopback address (--http).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="HOST[:PORT]",
              help="Also accept this Host header (behind a proxy); repeatable.")
@click.option("--allowed-origin", "allowed_origins", multiple=True, metavar="ORIGIN",
              help="Also accept this Origin header (browser clients); repeatable.")
@click.option("--stateless", is_flag=True, help="No per-client sessions (--http), for replicas behind a balancer; "
              "give every replica the same $TOOLCRIB_STATE_SECRET (32+ characters).")
@click.option("--no-reload", is_flag=True, help="Do not reload when the config file changes.")
@click.option("--metrics", is_flag=True, help="Serve Prometheus metrics at /metrics (--http; also [host] metrics).")
@click.option("--openapi", is_flag=True, help="Also serve each agent's tools as an OpenAPI tool server (--http): "
              "/agents/NAME/openapi.json, and a POST /agents/NAME/tools/TOOL per tool, behind the same tokens.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Logs on stderr as text, or one JSON object per line.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="The least a log line must be to be written.")
@click.option("--log-requests", is_flag=True, help="Also log one line per request (at info; debug logs them too).")
@_guard
def serve(agent: str | None, http: bool, bind: str, port: int, allow_remote: bool, allowed_hosts: tuple[str, ...],
          allowed_origins: tuple[str, ...], stateless: bool, no_reload: bool, metrics: bool, openapi: bool,
          log_format: str, log_level: str, log_requests: bool) -> None:
    """Serve over MCP: one agent on stdio (--agent NAME), or every agent over HTTP (--http).

    \b
    Example: toolcrib serve --http --port 8000
    """
    from toolcrib.config import find_config, load_config
    from toolcrib.mcp.statekeys import state_keys, stateless_warning
    from toolcrib.mcp.wire import claim_stdio
    from toolcrib.observe import Metrics, configure_logging

    if http == (agent is not None):
        raise click.UsageError("give --agent NAME (stdio) or --http (every agent), not both or neither")
    if openapi and not http:
        raise click.UsageError("--openapi serves over HTTP: give --http")
    from toolcrib.sandbox import keep_private

    keep_private()  # no program a tool runs reads the tokens and secrets in this process's environment
    state_keys()  # a bad $TOOLCRIB_STATE_SECRET fails here, before anything is served
    warning = stateless_warning(stateless)
    if warning is not None:
        click.echo(f"warning: {warning}", err=True)
    if http:  # (imported only here: a stdio server starts without uvicorn, Starlette and the rest of HTTP)
        from toolcrib.mcp.http import HttpOptions, check_bind

        options = HttpOptions(host=bind, port=port, allow_remote=allow_remote, allowed_hosts=list(allowed_hosts),
                              allowed_origins=list(allowed_origins), stateless=stateless, openapi=openapi)
        check_bind(options)
        _check_port(bind, port)
    path = find_config(click.get_current_context().ensure_object(State).config)
    watch = None if no_reload or path is None else path
    debug = click.get_current_context().ensure_object(State).debug
    configure_logging("debug" if debug else log_level, log_format, log_requests)
    keeping = http and (metrics or load_config(path).config.host.metrics)
    kept = Metrics() if keeping else None
    # stdio: the wire is claimed before any pack is imported, so that nothing a pack prints reaches it
    stdin, stdout, restore = claim_stdio() if agent is not None else (None, None, None)
    from toolcrib.mcp.serving import serve as serving

    try:
        serving(path, agent, options if http else None, watch, kept,
                (stdin, stdout) if stdin is not None and stdout is not None else None)
    finally:
        if restore is not None:
            restore()


@main.command()
@_common
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=8001, show_default=True, type=click.IntRange(0, 65535), help="Port.")
@click.option("--allow-remote", is_flag=True, help="Allow binding a non-loopback address.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="HOST[:PORT]",
              help="Also accept this Host header (behind a proxy); repeatable.")
@click.option("--allowed-origin", "allowed_origins", multiple=True, metavar="ORIGIN",
              help="Also accept this Origin header; repeatable.")
@_guard
def console(bind: str, port: int, allow_remote: bool, allowed_hosts: tuple[str, ...],
            allowed_origins: tuple[str, ...]) -> None:
    """Serve the operator's console for the config, without serving its agents: who sees what and why, the sources,
    the config check's warnings; with [cluster], the whole fleet's pending approvals, to answer. Signs in with the
    operator token ([operator] token_env).

    \b
    Example: toolcrib console --port 8001
    """
    import anyio

    from toolcrib.config import find_config, load_config
    from toolcrib.mcp.http import HttpOptions, check_bind, serve_http
    from toolcrib.mcp.state import serving_state

    path = find_config(click.get_current_context().ensure_object(State).config)
    operator = load_config(path).config.operator
    if operator is None:
        raise _NotFound("the console needs an [operator] table: its token_env names the token that opens it")
    if not os.environ.get(operator.token_env):
        raise _NotFound(f"${operator.token_env} is not set: the console opens with the operator token")
    options = HttpOptions(host=bind, port=port, allow_remote=allow_remote, allowed_hosts=list(allowed_hosts),
                          allowed_origins=list(allowed_origins), agents=False, console=True)
    check_bind(options)
    _check_port(bind, port)

    async def run() -> None:
        async with serving_state(path, serves=()) as state:  # (it serves no agent: their lists wait to be asked)
            await serve_http(state, options, path)

    with suppress(KeyboardInterrupt):  # uvicorn stops on SIGINT and SIGTERM by itself
        anyio.run(run)


def _check_port(bind: str, port: int) -> None:
    """A clear message for a port that is taken, before anything starts (uvicorn would exit from inside)."""
    import socket

    if port == 0:
        return
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError as exc:
            raise click.ClickException(f"cannot listen on {bind}:{port}: {exc.strerror} (another server is there; "
                                       "pick another --port)") from None


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--args", "args_json", default="{}", metavar="JSON", help="Arguments as a JSON object.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as MCP's CallToolResult JSON.")
@click.option("--yes", "-y", "approve_all", is_flag=True, help="Approve every call that needs approval (for "
              "scripts; on a terminal you are asked otherwise).")
@click.option("--save", "save_dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Save images, audio and binary resources of the result in DIR (printed as their paths).")
@click.argument("tool")
@click.argument("pairs", nargs=-1, metavar="[KEY=VALUE]...")
@_guard
def call(agent: str | None, args_json: str, as_json: bool, approve_all: bool, save_dir: Path | None, tool: str,
         pairs: tuple[str, ...]) -> None:
    """Call TOOL once through the full pipeline, as the agent would; exit 1 on an error result.

    Arguments as KEY=VALUE pairs (a value is read as JSON when the argument is not a string: n=3, flag=true,
    tags='["a","b"]'), or all at once with --args JSON.

    \b
    Example: toolcrib call fs__read_file path=README.md start_line=3
    """
    from toolcrib.sandbox import keep_private

    keep_private()  # as serve: what the tool runs reads nothing of this process's environment
    agent = _pick_agent(agent)
    arguments = _json_object(args_json, "--args")
    with _session(agent) as (host, portal):
        arguments.update(_pairs(host, agent, tool, pairs))
        approver = _yes if approve_all else _terminal_approver() if sys.stdin.isatty() else _no_terminal
        result = _run(portal, lambda: host.call(agent, tool, arguments, approver=approver, channel=_Terminal()))
    if as_json:
        _echo_json(result.to_wire())
    else:
        for n, block in enumerate(result.content):
            click.echo(_shown(block, save_dir, f"{tool}-{n}"))
    if result.is_error:
        sys.exit(1)


class _Terminal:
    """The CLI as a call's client: progress and log messages go to stderr."""

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        done = f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"
        click.echo(f"progress {done}" + (f": {message}" if message else ""), err=True)

    async def log(self, level: str, message: str, logger: str | None) -> None:
        click.echo(f"{level}{f' {logger}' if logger else ''}: {message}", err=True)


_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp",
               "audio/wav": ".wav", "audio/mpeg": ".mp3", "audio/ogg": ".ogg", "application/pdf": ".pdf"}


def _shown(block: Mapping[str, Any], save_dir: Path | None, stem: str) -> str:
    """A content block as the terminal shows it: text as it is, a resource's text with its URI, anything binary as
    what it is (saved to ``save_dir`` when given)."""
    kind = block.get("type")
    if kind == "text":
        return str(block["text"])
    if kind == "resource_link":
        return f"[resource link {block.get('uri')}" + (f" ({block['mimeType']})" if block.get("mimeType") else "") + "]"
    resource = block.get("resource") if kind == "resource" else None
    if isinstance(resource, Mapping) and "text" in resource:
        return f"[resource {resource.get('uri')}]\n{resource['text']}"
    data = block.get("data") if kind in ("image", "audio") else resource.get("blob") if resource else None
    mime = str(block.get("mimeType") or (resource or {}).get("mimeType") or "application/octet-stream")
    size = len(base64.b64decode(data)) if isinstance(data, str) else 0
    what = f"{kind} {mime}, {size} bytes" + (f", {resource.get('uri')}" if resource else "")
    if save_dir is None or not isinstance(data, str):
        return f"[{what}; --save DIR writes it to a file]"
    save_dir.mkdir(parents=True, exist_ok=True)
    path = save_dir / f"{stem}{_EXTENSIONS.get(mime, '.bin')}"
    path.write_bytes(base64.b64decode(data))
    return f"[{what}, saved to {path}]"


def _run(portal: Any, fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``fn()`` on the portal upstream connections live on, or on an event loop of its own."""
    if portal is not None:
        return portal.call(fn)
    import anyio

    return anyio.run(fn)


async def _yes(agent: str, tool: str, args: Mapping[str, Any], message: str) -> bool:
    click.echo(f"approved (--yes): {message}", err=True)
    return True


async def _no_terminal(agent: str, tool: str, args: Mapping[str, Any], message: str) -> Any:
    """Outside a terminal nobody can be asked: the refusal says how to approve."""
    from toolcrib.answers import Deny

    return Deny("stdin is not a terminal, so nobody could be asked; toolcrib call --yes approves it")


def _pairs(host: Any, agent: str, tool: str, pairs: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE arguments: as written for a string argument, read as JSON for any other (a value that is not JSON
    stays a string, and validation says what was expected)."""
    found: dict[str, Any] = {}
    if not pairs:
        return found
    vt = host.view(agent).lookup(tool)
    properties = (vt.tool.input_schema.get("properties") or {}) if vt is not None else {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="arguments")
        if _is_string(properties.get(key)):
            found[key] = value
            continue
        try:
            found[key] = json.loads(value)
        except ValueError:
            found[key] = value
    return found


def _is_string(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return False
    if schema.get("type") == "string":
        return True
    options = schema.get("anyOf") or schema.get("oneOf") or []
    kinds = {o.get("type") for o in options if isinstance(o, dict)}
    return "string" in kinds and kinds <= {"string", "null"}


def _json_object(text: str, option: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=option) from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object, such as '{\"path\": \"README.md\"}'", param_hint=option)
    return value


# -- resources and prompts -----------------------------------------------------------------------------------------


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--json", "as_json", is_flag=True, help="Print both lists as MCP's resources/list and "
              "resources/templates/list give them.")
@_guard
def resources(agent: str | None, as_json: bool) -> None:
    """List the resources and resource templates an agent may read.

    \b
    Example: toolcrib resources --agent reader
    """
    agent = _pick_agent(agent)
    with _session(agent) as (host, _):
        view = host.view(agent)
        if as_json:
            _echo_json({"resources": view.mcp_resources, "resourceTemplates": view.mcp_templates})
            return
        rows = [(entry.uri, entry.name, _first_line(entry.item.description))
                for entry in (*view.resources, *view.templates)]
        uri_width = max((len(uri) for uri, _, _ in rows), default=0)
        name_width = max((len(name) for _, name, _ in rows), default=0)
        for uri, name, description in rows:
            click.echo(f"{uri:<{uri_width}}  {name:<{name_width}}  {description}".rstrip())
        if not (view.resources or view.templates):
            click.echo(f"agent {agent!r} may read no resources", err=True)


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--json", "as_json", is_flag=True, help="Print MCP's resources/read result.")
@click.argument("uri")
@_guard
def read(agent: str | None, as_json: bool, uri: str) -> None:
    """Read the resource at URI as the agent would; exit 1 when it fails, 2 when the agent may not read it.

    \b
    Example: toolcrib read --agent reader orders://O-1001
    """
    agent = _pick_agent(agent)
    with _session(agent) as (host, portal):
        try:
            contents = _run(portal, lambda: host.view(agent).read(uri))
        except ToolError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
    if as_json:
        _echo_json({"contents": contents})
        return
    for item in contents:
        if "text" in item:
            click.echo(item["text"])
        else:
            size = len(base64.b64decode(item.get("blob", "")))
            click.echo(f"[binary content of {item['uri']}, {size} bytes, {item.get('mimeType', 'no type')}]")


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--json", "as_json", is_flag=True, help="Print the list as MCP's prompts/list gives it.")
@_guard
def prompts(agent: str | None, as_json: bool) -> None:
    """List the prompts an agent may get.

    \b
    Example: toolcrib prompts --agent reader
    """
    agent = _pick_agent(agent)
    with _session(agent) as (host, _):
        view = host.view(agent)
        if as_json:
            _echo_json(view.mcp_prompts)
            return
        for listed in view.mcp_prompts:
            arguments = " ".join(a["name"] if a.get("required") else f"[{a['name']}]" for a in listed["arguments"])
            click.echo(f"{listed['name']}{' ' + arguments if arguments else ''}  {_first_line(listed['description'])}")
        if not view.prompts:
            click.echo(f"agent {agent!r} may get no prompts", err=True)


@main.command()
@_common
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--args", "args_json", default="{}", metavar="JSON", help="Arguments as a JSON object of strings.")
@click.option("--json", "as_json", is_flag=True, help="Print MCP's prompts/get result.")
@click.argument("name")
@_guard
def prompt(agent: str | None, args_json: str, as_json: bool, name: str) -> None:
    """Get prompt NAME as the agent would: its messages; exit 1 when it fails, 2 when the agent may not get it.

    \b
    Example: toolcrib prompt --agent reader orders__refund --args '{"order_id": "O-1001"}'
    """
    agent = _pick_agent(agent)
    arguments = _json_object(args_json, "--args")
    with _session(agent) as (host, portal):
        try:
            answer = _run(portal, lambda: host.view(agent).get_prompt(name, arguments))
        except ToolError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
    if as_json:
        _echo_json(answer)
        return
    for message in answer["messages"]:
        content = message["content"]
        text = content["text"] if content.get("type") == "text" else f"[{content.get('type')} content]"
        click.echo(f"{message['role']}: {text}")


# -- approvals out of band ---------------------------------------------------------------------------------------


def _operator_request(url: str | None, method: str, path: str, body: Any = None) -> Any:
    from toolcrib.config import load_config
    from toolcrib.operator_client import operator_request

    return operator_request(load_config(click.get_current_context().ensure_object(State).config), url, method, path,
                            body)


@main.group(invoke_without_command=True)
@_common
@click.option("--url", help="Where the server is reached (default: [operator] url).")
@click.option("--json", "as_json", is_flag=True, help="The pending approvals as JSON.")
@click.pass_context
@_guard
def approvals(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """The calls waiting for an operator's approval on the running server (agents with approvals = "operator" or
    "client-then-operator"); approve or deny one by its id. Uses the operator token ([operator] token_env).

    \b
    Example: toolcrib approvals
             toolcrib approvals approve kq3Jx0aZ1bQe4pLm
    """
    ctx.ensure_object(State).url = url
    if ctx.invoked_subcommand is not None:
        return
    pending = _operator_request(url, "GET", "/operator/approvals")["approvals"]
    if as_json:
        _echo_json(pending)
        return
    if not pending:
        click.echo("no call is waiting for an approval")
    from toolcrib.approvals import who
    from toolcrib.names import shown

    for item in pending:  # what a caller chose is shown marked, never as terminal escapes or invisible characters
        by = f" ({who(item['principal'])})" if item["principal"] else ""
        click.echo(shown(f"{item['id']}  agent {item['agent']}{by} calls {item['tool']} ({item['rule']}), "
                         f"expires {item['expires']}"))
        click.echo(shown(f"  arguments: {json.dumps(item['arguments'], ensure_ascii=False)}"))
        click.echo(shown(f"  call {item['call_id']}, digest {item['digest'][:16]}"))


def _answer(approval_id: str, decision: str) -> None:
    url = click.get_current_context().ensure_object(State).url
    pending = _operator_request(url, "GET", "/operator/approvals")["approvals"]
    item = next((p for p in pending if p["id"] == approval_id), None)
    if item is None:
        from toolcrib.operator_client import OperatorError

        raise OperatorError(f"no call waits for approval {approval_id!r} (`toolcrib approvals` lists them)")
    _operator_request(url, "POST", f"/operator/approvals/{approval_id}",
                      {"decision": decision, "digest": item["digest"]})
    from toolcrib.names import shown

    done = "approved" if decision == "approve" else "denied"
    click.echo(shown(f"{done}: {item['tool']} for agent {item['agent']} "
                     f"{json.dumps(item['arguments'], ensure_ascii=False)}"))


@approvals.command("approve")
@_common
@click.argument("approval_id", metavar="ID")
@_guard
def approve_call(approval_id: str) -> None:
    """Let the call waiting for approval ID run (once).

    \b
    Example: toolcrib approvals approve kq3Jx0aZ1bQe4pLm
    """
    _answer(approval_id, "approve")


@approvals.command("deny")
@_common
@click.argument("approval_id", metavar="ID")
@_guard
def deny_call(approval_id: str) -> None:
    """Refuse the call waiting for approval ID.

    \b
    Example: toolcrib approvals deny kq3Jx0aZ1bQe4pLm
    """
    _answer(approval_id, "deny")


# -- people's grants to sources ---------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@_common
@click.option("--url", help="Where the server is reached (default: [operator] url).")
@click.option("--json", "as_json", is_flag=True, help="The grants as JSON.")
@click.pass_context
@_guard
def credentials(ctx: click.Context, url: str | None, as_json: bool) -> None:
    """The grants people gave sources on the running server (sources with consent): whose, for which source, until
    when; never a token. Revoke them with `credentials revoke`. Uses the operator token ([operator] token_env).

    \b
    Example: toolcrib credentials
             toolcrib credentials revoke --subject alice --source mcps.github
    """
    ctx.ensure_object(State).url = url
    if ctx.invoked_subcommand is not None:
        return
    grants = _operator_request(url, "GET", "/operator/credentials")["grants"]
    if as_json:
        _echo_json(grants)
        return
    if not grants:
        click.echo("no grant is kept")
    from toolcrib.names import shown

    for grant in grants:
        expires = "no expiry" if grant["expires"] is None else \
            "expires " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(grant["expires"]))
        click.echo(shown(f"{grant['subject']} (of {grant['issuer']}) at {grant['source']}, {expires}"))


@credentials.command("revoke")
@_common
@click.option("--subject", help="Whose grants (default: everyone's).")
@click.option("--source", help="At which source, as the config names it: mcps.<ns> or openapi.<ns> (default: all).")
@_guard
def revoke_credentials(subject: str | None, source: str | None) -> None:
    """Revoke grants: the person is asked again at their next call of the source.

    \b
    Example: toolcrib credentials revoke --subject alice --source mcps.github
    """
    if subject is None and source is None and not click.confirm("Revoke every grant of everyone?"):
        return
    url = click.get_current_context().ensure_object(State).url
    revoked = _operator_request(url, "POST", "/operator/credentials/revoke", {"subject": subject, "source": source})
    from toolcrib.names import shown

    for grant in revoked["revoked"]:
        click.echo(shown(f"revoked: {grant['subject']} (of {grant['issuer']}) at {grant['source']}"))
    if not revoked["revoked"]:
        click.echo("no grant matched")


# -- policies ---------------------------------------------------------------------------------------------------


@main.group()
def policy() -> None:
    """Policies as code: the Cedar schema toolcrib publishes, and the config's rules written as Cedar.

    \b
    Example: toolcrib policy export --cedar > policies.cedar
    """


@policy.command("schema")
def policy_schema() -> None:
    """Print the Cedar schema that [policy] cedar policies are checked and evaluated against.

    \b
    Example: toolcrib policy schema > toolcrib.cedarschema
    """
    from toolcrib.cedar import SCHEMA

    click.echo(SCHEMA, nl=False)


@policy.command("export")
@_common
@click.option("--cedar", "as_cedar", is_flag=True, required=True, help="Write the rules as Cedar policies.")
@_guard
def policy_export(as_cedar: bool) -> None:
    """Print the config's permission rules as Cedar policies that decide what they decide (a start for [policy]
    cedar: with it, give the agents allow ["*"] in the file and let Cedar decide).

    \b
    Example: toolcrib policy export --cedar > policies.cedar
    """
    from toolcrib.cedar import export
    from toolcrib.config import load_config
    from toolcrib.permissions import compile_rules

    loaded = load_config(click.get_current_context().ensure_object(State).config)
    click.echo(export(compile_rules(loaded)), nl=False)


# -- upstream servers ---------------------------------------------------------------------------------------------


@main.group()
def mcps() -> None:
    """Upstream MCP servers: bring in the servers another MCP client's config names.

    \b
    Example: toolcrib mcps import ~/.cursor/mcp.json >> toolcrib.toml
    """


@mcps.command("import")
@click.argument("file", type=click.File("r", encoding="utf-8"))
def import_servers(file: Any) -> None:
    """Print [mcps.*] tables for the servers of an mcpServers JSON FILE (as Claude Desktop, Cursor, Claude Code and
    the Claude SDK write it; - reads stdin): append them to your config with >> toolcrib.toml.

    \b
    Example: toolcrib mcps import claude_desktop_config.json >> toolcrib.toml
    """
    from toolcrib.mcp.importing import McpImportError, import_servers

    try:
        text, notes = import_servers(file.read())
    except McpImportError as exc:
        raise click.ClickException(f"{file.name}: {exc}") from None
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(text, nl=False)


@main.command()
@_common
@click.argument("client", type=click.Choice(CLIENTS))
@click.option("--agent", help="Agent name (default: the config's only agent).")
@click.option("--name", help="The server's name in the client (default: toolcrib-AGENT).")
@click.option("--file", "target", type=click.Path(dir_okay=False, path_type=Path),
              help="The client's config file (default: where the client keeps it; claude-code: ./.mcp.json).")
@click.option("--env", "env_pairs", multiple=True, metavar="KEY=VALUE", help="An environment variable the server "
              "gets (repeatable).")
@_guard
def install(client: str, agent: str | None, name: str | None, target: Path | None,
            env_pairs: tuple[str, ...]) -> None:
    """Add the agent to an MCP client's config as a stdio server (other servers there are kept); mcp-json prints
    the entry instead.

    \b
    Example: toolcrib install claude-desktop --agent reader
    """
    agent = _pick_agent(agent)
    path = find_config(click.get_current_context().ensure_object(State).config)
    with _session(agent) as (host, _):
        host.view(agent)  # an unknown agent fails here, before any file is written
    args = ["-m", "toolcrib.cli", "serve", "--agent", agent]
    if path is not None:
        args += ["--config", str(path.resolve())]
    entry: dict[str, Any] = {"command": sys.executable, "args": args}
    env: dict[str, str] = {}
    for pair in env_pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--env")
        env[key] = value
    if env:
        entry["env"] = env
    server = name or f"toolcrib-{agent}"
    if client == "mcp-json":
        _echo_json({"mcpServers": {server: entry}})
        return
    file = target or client_file(client)
    if client == "claude-code":  # a project's file, shared: no path of this machine's Python in it, where it can be
        portable = portable_entry(agent, path, file)
        if portable is not None:
            entry = {**portable, **({"env": env} if env else {})}
    try:
        existed = add_server(file, server, entry)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{'updated' if existed else 'added'} MCP server {server!r} (agent {agent!r}) in {file}; restart "
               f"the client to load it")


def _terminal_approver() -> Any:
    """On a terminal, calls that need approval ask the person at it."""
    import anyio.to_thread

    async def approver(agent: str, tool: str, args: Mapping[str, Any], message: str) -> bool:
        prompt = f"{message}\n  arguments: {json.dumps(dict(args), ensure_ascii=False)}\nAllow?"
        return bool(await anyio.to_thread.run_sync(lambda: click.confirm(prompt, default=False, err=True)))

    return approver


def run() -> None:
    """The ``toolcrib`` command as a process of its own (the console script, ``python -m toolcrib``): what it builds
    lives until the process exits or reloads, so it is frozen out of the garbage collector's scans
    (``toolcrib.view.freeze_builds``). In-process callers (click's test runner) call ``main``, which leaves the
    collector as it is."""
    freeze_builds()
    main()


if __name__ == "__main__":
    run()

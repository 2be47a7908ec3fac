"""Discovery against real distributions: dist-info folders with entry_points.txt on a path entry."""

from __future__ import annotations

import gc
import json
import sys
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolcrib
from conftest import config_from, make_host, ours
from packs import FILES, Pack
from toolcrib.host import Host
from toolcrib.plugins import get_plugin_manager, load_plugins

GOOD = '''
from typing import Annotated
from pydantic import Field
import toolcrib

@toolcrib.tool(annotations={"readOnlyHint": True})
async def lookup_order(order_id: Annotated[str, Field(description="Order ID, such as O-1001")]) -> dict:
    """Look up an order by its ID and return it as JSON."""
    if order_id != "O-1001":
        raise toolcrib.ToolError(f"Order not found: {order_id}")
    return {"id": order_id, "status": "shipped"}

@toolcrib.hookimpl
def toolcrib_tools():
    return [lookup_order]
'''

BROKEN = {
    "import_error": "import no_such_module_anywhere\n",
    "syntax_error": "def broken(:\n",
    "runtime_error": "raise RuntimeError('pack exploded at import')\n",
    "exits": "import sys\nsys.exit(3)\n",
}


def _host(text: str = "", env: dict[str, str] | None = None) -> Host:
    return Host(config_from(text or "[agents.a]\n"), env=env or {})


def test_a_good_pack_loads_with_provenance(dist_path: Callable[..., Path]) -> None:
    dist_path("acme-toolcrib-orders", "1.2.3", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    host = _host()
    record = ours(host.records, {"orders"})["orders"]
    assert (record.kind, record.state, record.distribution, record.version, record.tool_count) == (
        "pack", "loaded", "acme-toolcrib-orders", "1.2.3", 1)
    entry = host.catalog.entries["orders__lookup_order"]
    assert (entry.namespace, entry.distribution, entry.version) == ("orders", "acme-toolcrib-orders", "1.2.3")


@pytest.mark.parametrize("order", [0, 1])
def test_broken_packs_fail_alone_whatever_the_order(dist_path: Callable[..., Path], order: int) -> None:
    names = sorted(BROKEN) if order == 0 else sorted(BROKEN, reverse=True)
    for name in names:
        dist_path(f"pack-{name}", "0.1", {name: f"pack_{name}"}, {f"pack_{name}": BROKEN[name]})
    dist_path("acme-toolcrib-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    host = _host()
    records = ours(host.records, {*BROKEN, "orders"})
    assert records["orders"].state == "loaded"
    assert "orders__lookup_order" in host.catalog.entries
    errors = {name: records[name].error for name in BROKEN}
    assert all(records[name].state == "failed" for name in BROKEN)
    assert errors["import_error"] == "import failed: ModuleNotFoundError: No module named 'no_such_module_anywhere'"
    assert errors["syntax_error"] is not None and errors["syntax_error"].startswith(
        "import failed: SyntaxError: invalid syntax")
    assert errors["runtime_error"] == "import failed: RuntimeError: pack exploded at import"
    assert errors["exits"] == "import failed: the pack called sys.exit(3) while being imported"
    assert records["runtime_error"].traceback is not None
    assert "pack exploded at import" in records["runtime_error"].traceback
    problems = [str(p) for p in host.catalog.problems]
    assert ("error: pack 'runtime_error' (pack-runtime_error 0.1): import failed: RuntimeError: pack exploded at "
            "import") in problems


def test_a_bad_tool_name_fails_the_pack_naming_pack_tool_and_rule(dist_path: Callable[..., Path]) -> None:
    source = GOOD + '''
@toolcrib.tool(name="my-tool")
def bad() -> str:
    """Bad."""
    return ""
'''
    dist_path("pack-badname", "0.1", {"badname": "pack_badname"}, {"pack_badname": source})
    dist_path("acme-toolcrib-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    host = _host()
    record = ours(host.records, {"badname"})["badname"]
    assert record.state == "failed"
    assert record.error == ("import failed: ToolDeclarationError: tool 'my-tool': invalid name: tool names are 1-64 "
                            "characters: a letter first, then letters, digits and single underscores ('__' is "
                            "reserved)")
    assert "error: pack 'badname' (pack-badname 0.1): import failed: ToolDeclarationError: tool 'my-tool'" in "\n".join(
        str(p) for p in host.catalog.problems)
    assert "orders__lookup_order" in host.catalog.entries


def test_two_distributions_with_one_namespace_conflict(dist_path: Callable[..., Path], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    dist_path("acme-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    other = tmp_path / "other-site"
    other.mkdir()
    monkeypatch.syspath_prepend(str(other))
    dist_path("rival-orders", "2.0", {"orders": "rival_orders"}, {"rival_orders": GOOD}, where=other)
    host = _host()
    record = ours(host.records, {"orders"})["orders"]
    assert record.state == "failed"
    assert record.error == ("namespace 'orders' is offered by more than one source (acme-orders 1.0; rival-orders "
                            "2.0); neither is loaded: uninstall one, or disable the namespace in config")
    assert "acme_orders" not in sys.modules and "rival_orders" not in sys.modules
    assert not any(name.startswith("orders__") for name in host.catalog.entries)


def test_disabled_pack_is_never_imported(dist_path: Callable[..., Path]) -> None:
    dist_path("pack-bomb", "0.1", {"bomb": "pack_bomb"}, {"pack_bomb": "raise RuntimeError('imported!')\n"})
    host = _host("[packs.bomb]\nenabled = false\n[agents.a]\n")
    record = ours(host.records, {"bomb"})["bomb"]
    assert (record.state, record.error, record.distribution) == ("disabled", None, "pack-bomb")
    assert "pack_bomb" not in sys.modules


def test_autoload_off_loads_only_named_packs(dist_path: Callable[..., Path]) -> None:
    dist_path("acme-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    dist_path("pack-bomb", "0.1", {"bomb": "pack_bomb"}, {"pack_bomb": "raise RuntimeError('imported!')\n"})
    host = _host(env={"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert ours(host.records, {"orders", "bomb"}) == {}
    assert "pack_bomb" not in sys.modules and "acme_orders" not in sys.modules
    host = _host(env={"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "orders"})
    assert list(ours(host.records, {"orders", "bomb"})) == ["orders"]
    assert [r.name for r in host.records if r.kind == "pack"] == ["orders"]
    assert "pack_bomb" not in sys.modules


def test_named_pack_that_is_not_installed_is_reported() -> None:
    host = _host(env={"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "ghost"})
    record = ours(host.records, {"ghost"})["ghost"]
    assert record.error == "no installed distribution offers a 'toolcrib' entry point named 'ghost'"


def test_invalid_namespace_is_refused_before_import(dist_path: Callable[..., Path]) -> None:
    dist_path("pack-upper", "0.1", {"Orders": "pack_upper"}, {"pack_upper": "raise RuntimeError('imported!')"})
    host = _host()
    record = ours(host.records, {"Orders"})["Orders"]
    assert record.error == ("invalid namespace 'Orders': namespaces are 1-32 characters: a lower-case letter first, "
                            "then lower-case letters, digits and single underscores")
    assert "pack_upper" not in sys.modules


def test_hook_that_raises_fails_its_pack_and_loads_no_half_tools(dist_path: Callable[..., Path]) -> None:
    source = GOOD.replace("    return [lookup_order]", "    tools = [lookup_order]\n    raise ValueError('half way')")
    dist_path("pack-half", "0.1", {"half": "pack_half"}, {"pack_half": source})
    dist_path("acme-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    host = _host()
    record = ours(host.records, {"half"})["half"]
    assert (record.state, record.error, record.tool_count) == (
        "failed", "toolcrib_tools raised ValueError: half way", 0)
    assert "half__lookup_order" not in host.catalog.entries
    assert "orders__lookup_order" in host.catalog.entries


def test_unknown_hook_and_marker_free_hooks(dist_path: Callable[..., Path]) -> None:
    typo = "import toolcrib\n@toolcrib.hookimpl\ndef toolcrib_toolz():\n    return []\n"
    unmarked = GOOD.replace("@toolcrib.hookimpl\n", "")
    dist_path("pack-typo", "0.1", {"typo": "pack_typo"}, {"pack_typo": typo})
    dist_path("pack-unmarked", "0.1", {"unmarked": "pack_unmarked"}, {"pack_unmarked": unmarked})
    host = _host()
    records = ours(host.records, {"typo", "unmarked"})
    assert records["typo"].error == (
        "unknown hook(s) toolcrib_toolz; toolcrib's hooks are toolcrib_approve, toolcrib_audit, "
        "toolcrib_policy, toolcrib_post_tool_use, toolcrib_pre_tool_use, toolcrib_prompts, toolcrib_resources, "
        "toolcrib_settings_model, toolcrib_skills, toolcrib_tools")
    assert records["unmarked"].state == "loaded"
    assert "unmarked__lookup_order" in host.catalog.entries


def test_a_module_pack_hooks_are_found_as_pluggy_finds_them(dist_path: Callable[..., Path]) -> None:
    """Only functions carrying the marker (under any name, with ``specname``) or named ``toolcrib_*`` implement
    hooks; any other name in the module, a callable object with the marker's attribute included, is not one."""
    source = GOOD.replace("@toolcrib.hookimpl\ndef toolcrib_tools():", "@toolcrib.hookimpl(specname='toolcrib_tools')\n"
                          "def everything_we_offer():") + (
        "\nclass Impostor:\n    toolcrib_impl = {}\n    def __call__(self):\n        return []\n\n"
        "toolcrib_settings_model = None\nhelper = Impostor()\n"
        "@toolcrib.hookimpl(specname='toolcrib_resources')\ndef not_a_function_any_more():\n    return []\n"
        "not_a_function_any_more = staticmethod(not_a_function_any_more)\n")
    dist_path("acme-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": source})
    host = _host()
    record = ours(host.records, {"orders"})["orders"]
    assert (record.state, record.error, record.tool_count) == ("loaded", None, 1)
    impls = {hook: [i.function.__name__ for i in host.pm.hook.__dict__[hook].get_hookimpls()
                    if i.plugin_name == "orders"] for hook in ("toolcrib_tools", "toolcrib_resources")}
    assert impls == {"toolcrib_tools": ["everything_we_offer"], "toolcrib_resources": ["not_a_function_any_more"]}


def test_items_that_are_not_tools_and_duplicate_names_are_rejected_alone(dist_path: Callable[..., Path]) -> None:
    listing = '''    return [lookup_order, plain, dup_a, dup_b, "nope"]'''
    source = GOOD.replace("    return [lookup_order]", listing) + '''
def plain():
    return 1

@toolcrib.tool(name="dup")
def dup_a() -> str:
    """A."""
    return "a"

@toolcrib.tool(name="dup")
def dup_b() -> str:
    """B."""
    return "b"
'''
    dist_path("pack-mixed", "0.1", {"mixed": "pack_mixed"}, {"pack_mixed": source})
    host = _host()
    record = ours(host.records, {"mixed"})["mixed"]
    assert (record.state, record.tool_count) == ("loaded", 1)
    assert [n for n in host.catalog.entries if n.startswith("mixed__")] == ["mixed__lookup_order"]
    problems = [str(p) for p in host.catalog.problems if "mixed" in p.where]
    assert problems[0].startswith("error: pack 'mixed' (pack-mixed 0.1): toolcrib_tools item 1 (<function plain at ")
    assert problems[0].endswith(">) is not a tool: decorate it with @toolcrib.tool")
    assert problems[1] == ("error: pack 'mixed' (pack-mixed 0.1): toolcrib_tools item 4 ('nope') is not a tool: "
                           "decorate it with @toolcrib.tool")
    assert problems[2] == ("error: pack 'mixed' (pack-mixed 0.1): tool name 'dup' is declared 2 times; none of them "
                           "is served: rename all but one")


def test_a_hand_built_tool_with_a_bad_name_is_rejected_alone(dist_path: Callable[..., Path]) -> None:
    source = GOOD.replace("    return [lookup_order]", """    import dataclasses
    from toolcrib.tool import get_tool
    return [lookup_order, dataclasses.replace(get_tool(lookup_order), name="my-tool")]""")
    dist_path("pack-handmade", "0.1", {"handmade": "pack_handmade"}, {"pack_handmade": source})
    host = _host()
    record = ours(host.records, {"handmade"})["handmade"]
    assert (record.state, record.tool_count) == ("loaded", 1)
    assert [n for n in host.catalog.entries if n.startswith("handmade__")] == ["handmade__lookup_order"]
    assert ("error: pack 'handmade' (pack-handmade 0.1): tool 'my-tool' is not served: tool names are 1-64 "
            "characters: a letter first, then letters, digits and single underscores ('__' is reserved)") in [
        str(p) for p in host.catalog.problems]


def test_pack_namespace_colliding_with_an_upstream_server(dist_path: Callable[..., Path]) -> None:
    dist_path("acme-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": GOOD})
    host = _host('[mcps.orders]\ncommand = "python"\n[agents.a]\n')
    record = ours(host.records, {"orders"})["orders"]
    assert record.state == "failed"
    assert record.error == ("namespace 'orders' is also an upstream MCP server ([mcps.orders]); neither is served: "
                            "rename that source or disable one of them")


def test_nothing_is_discovered_at_import() -> None:
    import subprocess

    code = ("import sys, toolcrib; import importlib.metadata as m; "
            "print(sorted(k for k in sys.modules if k.startswith(('toolcrib_', 'acme'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_fresh_plugin_manager_has_only_specs() -> None:
    pm = get_plugin_manager()
    assert pm.get_plugins() == set()
    records = load_plugins(pm, autoload=False)
    assert records == []


class Wrapping:
    """A plugin with a wrapper implementation: toolcrib calls each pack's implementation on its own, so it cannot
    take one that wraps the others."""

    @toolcrib.hookimpl(wrapper=True)
    def toolcrib_pre_tool_use(self):  # type: ignore[no-untyped-def]
        return (yield)


class OldWrapping:
    @toolcrib.hookimpl(hookwrapper=True)
    def toolcrib_audit(self, record):  # type: ignore[no-untyped-def]
        yield


def test_wrapper_implementations_are_refused_at_registration() -> None:
    host = make_host("[agents.a]\n[agents.a.permissions]\nplugins = { allow = ['*'] }\ntools = { allow = ['*'] }\n",
                     {"files": FILES, "wrap": Wrapping(), "oldwrap": OldWrapping()})
    records = {r.name: r for r in host.records}
    for name, hook in (("wrap", "toolcrib_pre_tool_use"), ("oldwrap", "toolcrib_audit")):
        assert (records[name].state, records[name].error) == ("failed", (
            f"hook {hook}: wrapper implementations (wrapper=True, hookwrapper=True) are not supported: toolcrib "
            "calls each pack's implementation on its own; return an answer instead"))
    result = anyio.run(lambda: host.call("a", "files__read", {"path": "x"}))  # the others work
    assert result.text == "contents of x"


class FirstApprover:
    def __init__(self, answer: object, seen: list[str], name: str) -> None:
        self.answer, self.seen, self.name = answer, seen, name

    @toolcrib.hookimpl
    async def toolcrib_approve(self, tool: str) -> object:
        self.seen.append(self.name)
        return self.answer


def test_approvals_stop_at_the_first_answer_across_plugins() -> None:
    """toolcrib_approve is firstresult: the first implementation (in pluggy's order) that answers decides, async ones
    included, and the ones after it are not asked."""
    seen: list[str] = []
    plugins = {"files": FILES, "a_none": FirstApprover(None, seen, "none"), "b_yes": FirstApprover(True, seen, "yes"),
               "c_no": FirstApprover(False, seen, "no")}
    host = make_host("[agents.a]\n[agents.a.permissions]\nplugins = { allow = ['files'] }\ntools = { allow = ['*'] }"
                     "\nask = ['files__write']\n", plugins)
    result = anyio.run(lambda: host.call("a", "files__write", {"path": "x", "text": "y"}))
    # pluggy calls the last registered first: c_no, then b_yes, then a_none (plugins are registered by name)
    assert seen == ["no"]
    assert result.text == ("Permission denied: files__write needs approval (ask rule 'files__write'), and it was "
                           "refused.")


def test_tracing_uses_pluggys_monitoring(capsys: pytest.CaptureFixture[str]) -> None:
    Host(config_from("[agents.a]\n"), plugins={"files": FILES}, autoload=False, env={"TOOLCRIB_TRACE_HOOKS": "1"})
    err = capsys.readouterr().err.splitlines()
    assert err[err.index("  toolcrib_tools [hook]") + 1] == "      settings: None"
    assert any(line.startswith("  finish toolcrib_tools --> [[<function read at") for line in err), err


def test_one_module_under_two_names_loads_once(dist_path: Callable[..., Path]) -> None:
    dist_path("acme-orders", "1.0", {"orders": "acme_orders", "again": "acme_orders"}, {"acme_orders": GOOD})
    records = ours(_host().records, {"orders", "again"})
    assert (records["orders"].state, records["orders"].error) == (  # entry points load in name order
        "failed", "the same object is already registered as 'again'; give each pack its own module")
    assert (records["again"].state, records["again"].tool_count) == ("loaded", 1)


def test_loading_leaves_the_garbage_collector_as_it_found_it(dist_path: Callable[..., Path]) -> None:
    seen: list[bool] = []
    source = GOOD.replace("    return [lookup_order]", "    import gc\n    seen.append(gc.isenabled())\n"
                                                         "    return [lookup_order]") + "\nseen = []\n"
    dist_path("acme-orders", "1.0", {"orders": "acme_orders"}, {"acme_orders": source})
    assert gc.isenabled()
    host = _host()
    assert gc.isenabled()
    seen = sys.modules["acme_orders"].seen
    assert seen == [False]  # paused while the packs load
    gc.disable()
    try:
        _host()
        assert not gc.isenabled()  # an application that turned it off keeps it off
    finally:
        gc.enable()
    assert "orders__lookup_order" in host.catalog.entries


def test_building_a_view_and_its_wire_list_leave_the_collector_as_they_found_it() -> None:
    seen: list[bool] = []

    def check(ctx: object) -> bool:
        seen.append(gc.isenabled())
        return True

    @toolcrib.tool(is_available=check)
    def ping() -> str:
        """Answer pong."""
        return "pong"

    host = make_host("[agents.a]\n[agents.a.permissions]\nplugins = { allow = ['p'] }\ntools = { allow = ['*'] }\n",
                     {"p": Pack(ping)})
    view = host.view("a")
    assert [t["name"] for t in view.mcp_tools] == ["p__ping"]
    assert seen == [False]  # paused while the view was built
    assert gc.isenabled()


_PING_CONFIG = "[agents.a]\n[agents.a.permissions]\nplugins = { allow = ['p'] }\ntools = { allow = ['*'] }\n"


def _ping_host() -> Host:
    @toolcrib.tool
    def ping() -> str:
        """Answer pong."""
        return "pong"

    return make_host(_PING_CONFIG, {"p": Pack(ping)})


@pytest.fixture
def freezing() -> Iterator[None]:
    """This process freezes its builds, as the ``toolcrib`` command does (and thaws everything afterwards)."""
    from toolcrib import view

    view.freeze_builds()
    try:
        yield
    finally:
        view.freeze_builds(False)
        gc.unfreeze()


def _scanned(obj: object) -> bool:
    """Whether the cyclic collector still scans ``obj``: ``gc.get_objects`` lists no frozen object."""
    return any(found is obj for found in gc.get_objects())


def test_a_process_that_freezes_its_builds_never_scans_its_host_or_views_again(freezing: None) -> None:
    host = _ping_host()
    view = host.view("a")
    wires = view.mcp_tools
    assert [w["name"] for w in wires] == ["p__ping"]
    assert (_scanned(host.catalog.entries), _scanned(view), _scanned(wires)) == (False, False, False)
    assert gc.isenabled()
    assert anyio.run(view.call, "p__ping", {}).text == "pong"


def test_builds_are_not_frozen_unless_the_process_says_so() -> None:
    host = _ping_host()
    view = host.view("a")
    assert (_scanned(host.catalog.entries), _scanned(view), _scanned(view.mcp_tools)) == (True, True, True)


def test_a_reload_gives_the_collector_back_the_replaced_host_where_builds_were_frozen(freezing: None) -> None:
    """A frozen host that a reload replaced would never be collected (a host and its views hold each other), and
    each reload would keep one more: the reload thaws the heap, and the collector takes the old host in its own
    time (nothing is collected at the reload itself)."""
    from toolcrib import view
    from toolcrib.mcp.state import ServingState

    first = _ping_host()
    state = ServingState(first, make_host=_ping_host)
    assert [w["name"] for w in state.view("a").mcp_tools] == ["p__ping"]
    replaced = weakref.ref(first)
    del first
    gc.collect()
    assert replaced() is not None  # frozen: a full collection does not reach it
    assert anyio.run(state.reload) is True
    assert replaced() is not None  # (no collection was forced)
    gc.collect()
    assert replaced() is None
    assert (view._freezing, _scanned(state.host.catalog.entries)) == (False, True)
    assert [w["name"] for w in state.view("a").mcp_tools] == ["p__ping"]


def test_the_toolcrib_command_freezes_its_builds_and_in_process_callers_do_not(
        monkeypatch: pytest.MonkeyPatch, freezing: None) -> None:
    from importlib.metadata import entry_points

    from click.testing import CliRunner

    from toolcrib import cli, view

    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "toolcrib"]
    assert script.value == "toolcrib.cli:run"
    view.freeze_builds(False)
    assert CliRunner().invoke(cli.main, ["--version"]).exit_code == 0
    assert view._freezing is False
    monkeypatch.setattr(sys, "argv", ["toolcrib", "--version"])
    with pytest.raises(SystemExit) as exited:
        cli.run()
    assert (exited.value.code, view._freezing) == (0, True)


def test_every_supplier_of_tools_is_a_source(tmp_path: Path) -> None:
    """A pack given by name, a tool folder and the host's own pack are sources (``toolcrib.sources.Source``) of
    the ``plugins`` dimension, offering exactly the entries the catalog holds of them; a failing pack is none."""
    from toolcrib.catalog import PackSource
    from toolcrib.sources import Source

    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "hello.py").write_text('import toolcrib\n\n@toolcrib.tool\ndef hi() -> str:\n'
                                                 '    """Say hi."""\n    return "hi"\n')

    class Broken:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[object]:
            raise RuntimeError("no")

    host = make_host('[host]\ntool_dirs = ["tools"]\n[agents.a.permissions]\nplugins = { allow = ["*"] }\n'
                     'tools = { allow = ["*"] }\n', {"files": FILES, "broken": Broken()}, base_dir=tmp_path)
    assert sorted(host.sources) == ["files", "toolcrib", "tools"]
    for name, source in host.sources.items():
        assert isinstance(source, PackSource) and isinstance(source, Source)
        assert (source.dimension, source.lazy, source.offer().record.name) == ("plugins", False, name)
        assert sorted(e.name for e in anyio.run(source.fetch)) == sorted(
            e.name for e in host.catalog.entries.values() if e.namespace == name)
    assert [e.name for e in anyio.run(host.sources["files"].fetch, "files__read")] == ["files__read"]


def test_a_source_offers_entries_of_every_kind_under_one_set_of_collision_rules() -> None:
    """Tools, resources and prompts are one entry type: a source offers them in one list, and the catalog places
    each by its kind. A tool and a prompt may share a name; two sources offering one prompt name serve neither,
    and a pack that declares two prompts (or resources) of one name serves none of them, as for tools."""
    from toolcrib.entries import PACK, Entry, Provenance
    from toolcrib.plugins import PluginRecord
    from toolcrib.sources import Offer
    from toolcrib.tool import get_tool

    @toolcrib.tool
    def x() -> str:
        """Do x."""
        return "x"

    @toolcrib.prompt(name="x")
    def x_prompt() -> str:
        """Say x."""
        return "x"

    @toolcrib.resource("doc://a", name="doc")
    def doc_a() -> str:
        return "a"

    @toolcrib.resource("doc://b", name="doc")
    def doc_b() -> str:
        return "b"

    class Offering:
        dimension, lazy = "plugins", False

        def __init__(self, name: str, *definitions: Any) -> None:
            self.name = name
            entries = [Entry(name="extra__x", provenance=Provenance("extra", PACK, source=name), definition=d)
                       for d in definitions]
            self._offer = Offer(PluginRecord(name=name, kind="source", state="loaded"), entries)

        def offer(self) -> Offer:
            return self._offer

    class Twice:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [doc_a, doc_b]

        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [x_prompt, x_prompt]

    tool, prompt = get_tool(x), toolcrib.declarations.get_prompt(x_prompt)
    host = Host(config_from("[agents.a]\n"), plugins={"twice": Twice()}, autoload=False, env={},
                sources=[Offering("extra", tool, prompt), Offering("again", prompt)])  # type: ignore[list-item]
    assert (list(host.catalog.entries), list(host.catalog.prompts)) == (["extra__x"], [])
    assert sorted(n for n in host.catalog.resources if n.startswith("twice__")) == []
    assert [str(p) for p in host.catalog.problems if "offered by both" in p.message or "declared" in p.message] == [
        "error: pack 'twice': resource name 'doc' is declared 2 times; none of them is served: rename all but one",
        "error: pack 'twice': prompt name 'x' is declared 2 times; none of them is served: rename all but one",
        "error: prompt 'extra__x': offered by both pack 'extra' and pack 'again'; neither is served",
    ]


TWICE = '''
import toolcrib
from pydantic import BaseModel

@toolcrib.tool
def first() -> str:
    """The first."""
    return "1"

@toolcrib.tool
def second() -> str:
    """The second."""
    return "2"

@toolcrib.hookimpl
def toolcrib_tools():
    return [first]

@toolcrib.hookimpl(specname="toolcrib_tools")
def more_tools():
    return [second]
'''

TWO_SETTINGS = TWICE + '''
class A(BaseModel):
    a: int = 1

@toolcrib.hookimpl
def toolcrib_settings_model():
    return A

@toolcrib.hookimpl(specname="toolcrib_settings_model")
def other_settings():
    return A
'''


def test_every_implementation_of_a_hook_in_one_pack_counts(dist_path: Callable[..., Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import cli

    dist_path("acme-twice", "1.0", {"twice": "acme_twice", "settled": "acme_settled"},
              {"acme_twice": TWICE, "acme_settled": TWO_SETTINGS.replace("first", "third")})
    config = tmp_path / "toolcrib.toml"
    config.write_text('[agents.a.permissions]\nplugins = { allow = ["twice"] }\ntools = { allow = ["*"] }\n')
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "twice,settled")
    monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
    code, out, _ = cli("tools", "--config", str(config), "--agent", "a", "--json")
    assert (code, [t["name"] for t in json.loads(out)]) == (0, ["twice__first", "twice__second"])
    code, out, _ = cli("plugins", "--config", str(config), "--json")
    records = {r["name"]: r for r in json.loads(out)}
    assert (records["twice"]["state"], records["twice"]["tool_count"]) == ("loaded", 2)
    # two settings models cannot both be the pack's: a load error that names the hook, and check shows it
    assert records["settled"]["state"] == "failed"
    assert records["settled"]["error"].endswith(
        "2 of its implementations of toolcrib_settings_model answer, and only one answer can be taken: keep one")


_METADATA = {
    "plain": "Metadata-Version: 2.1\nName: a-b\nVersion: 1.0\n\nName: not-this\nVersion: 9\n",
    "crlf": "Metadata-Version: 2.1\r\nName: crlf\r\nVersion: 2.0\r\n\r\nbody\r\n",
    "a folded license first": "Metadata-Version: 2.1\nLicense: MIT\n        and more\nName: x\nVersion: 2\n\nx\n",
    "a folded name": "Metadata-Version: 2.1\nName: x\n  y\nVersion: 1\n",
    "lowercase keys": "metadata-version: 2.1\nname: low\nversion: 3\n",
    "the first of two": "Name: first\nName: second\nVersion: 1\nVersion: 2\n",
    "no blank line, no newline": "Name: x\nVersion: 1",
    "no version": "Metadata-Version: 2.1\nName: x\n\n",
    "a description with no blank line": "Name: x\nVersion: 1\nThe description: starts here\nName: y\n",
    "spaces and tabs": "Name:\t  spaced  \nVersion:1.0\n",
    "a space before the colon": "Version: 1\nName : x\nName: y\n",
    "a carriage return alone": "Name: x\rVersion: 1\n",
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(_METADATA))
def test_a_packs_name_and_version_are_read_as_its_metadata_gives_them(case: str, tmp_path: Path) -> None:
    """Discovery reads a distribution's Name and Version from its metadata's header lines, not the whole file (a
    package's README makes that 0.5-2 ms): always what ``dist.metadata`` says, whatever the file holds."""
    import importlib.metadata
    import warnings

    from toolcrib.dists import name_and_version

    (tmp_path / "METADATA").write_bytes(_METADATA[case].encode())
    dist = importlib.metadata.PathDistribution(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a missing key is None, with a warning, in 3.11-3.13
        assert name_and_version(dist) == (dist.metadata["Name"], dist.metadata["Version"])
    if case == "plain":
        assert name_and_version(dist) == ("a-b", "1.0")


def test_every_installed_distribution_is_named_as_its_metadata_names_it() -> None:
    import importlib.metadata

    from toolcrib.dists import name_and_version

    dists = list(importlib.metadata.distributions())
    assert len(dists) > 50
    assert [name_and_version(d) for d in dists] == [(d.metadata["Name"], d.metadata["Version"]) for d in dists]


def test_what_a_pack_logs_as_a_warning_while_collected_is_a_check_warning() -> None:
    """A pack says something is off in its settings by logging a warning on ``toolcrib.pack.<namespace>``:
    ``toolcrib check`` (the catalog's problems) shows it as a warning about the pack; info lines are not."""
    import logging

    class Warny(Pack):
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            logging.getLogger("toolcrib.pack.warny").info("collecting")
            logging.getLogger("toolcrib.pack.warny").warning("no API key set: %s is offline", "search")
            return list(self.tools)

    host = make_host('[agents.a.permissions]\nplugins = { allow = ["*"] }\n', {"warny": Warny(FILES.tools[0])})
    assert [str(p) for p in host.catalog.problems] == [
        "warning: pack 'warny': no API key set: search is offline"]

"""The house's shape, as the import graph shows it: a layered DAG among the host's modules (an import inside a
function counts; one under ``if TYPE_CHECKING:`` is an annotation and does not), the decision kept apart from plugin
loading, the pipeline from the built-in plugins, and the core from the MCP front end."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "host" / "toolcrib"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The host modules ``name`` imports, wherever the import stands, but for annotations only."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    annotations = {id(node) for branch in ast.walk(tree) if isinstance(branch, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(branch.test) for node in ast.walk(branch)}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(tree):
        if id(node) in annotations:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                yield target if target in known else base


@functools.cache  # (read once: every test asks the same question of the same files)
def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: {t for t in imports(name, path, known) if t in known and t != name} for name, path in found.items()}


def closure(edges: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_modules_form_no_circle() -> None:
    edges = graph()
    circles = sorted(name for name in edges if name in closure(edges, name))
    assert circles == []


def test_the_decision_does_not_import_plugin_loading_or_the_catalogs_construction() -> None:
    reached = closure(graph(), "toolcrib.permissions")
    assert reached.isdisjoint({"toolcrib.plugins", "toolcrib.catalog", "toolcrib.folders", "toolcrib.host"})
    assert not any(name.startswith(("toolcrib.mcp", "toolcrib.default_plugins")) for name in reached)


def test_the_pipeline_imports_no_built_in_plugin_and_the_core_no_front_end() -> None:
    edges = graph()
    assert not any(name.startswith("toolcrib.default_plugins") for name in closure(edges, "toolcrib.calls"))
    # the front ends: the CLI, and the pack kit, which drives a host as a client does (an isolated kit starts its
    # pack's process through the MCP front end's pool, as toolcrib serve does)
    # and the supply, where every kind of source lives
    front_ends = {"toolcrib.cli", "toolcrib.testing"}
    core = [name for name in edges if not name.startswith(("toolcrib.mcp", "toolcrib.supply"))
            and name not in front_ends]
    assert {name: sorted(t for t in edges[name] if t.startswith("toolcrib.mcp")) for name in core
            if any(t.startswith("toolcrib.mcp") for t in edges[name])} == {}


def test_sources_reach_the_core_only_through_the_source_contract() -> None:
    """The upstream client makes sources and knows no Host; the catalog, the decision and the pipeline know no
    kind of source (``toolcrib.mcp`` is out of their reach, tested above), only ``toolcrib.sources``."""
    edges = graph()
    assert "toolcrib.host" not in closure(edges, "toolcrib.supply.mcp.connections")
    assert "toolcrib.sources" in edges["toolcrib.supply.mcp.source"]
    assert "toolcrib.runner" in edges["toolcrib.supply.mcp.runners"]
    assert closure(edges, "toolcrib.sources") <= {"toolcrib.entries", "toolcrib.declarations", "toolcrib.tool"} | \
        closure(edges, "toolcrib.tool")


def test_the_catalog_the_decision_the_pipeline_and_the_views_reach_no_supply() -> None:
    """Every kind of source is made in ``toolcrib.supply``; the core takes what it is handed (only the host's
    ``from_config``, an entrance, asks the supply for sources). What the core reaches there is each kind's config
    table (``settings``, which the config is read into) and nothing else."""
    edges = graph()
    for core in ("toolcrib.catalog", "toolcrib.permissions", "toolcrib.calls", "toolcrib.view", "toolcrib.lock",
                 "toolcrib.curation"):
        reached = {name for name in closure(edges, core) if name.startswith("toolcrib.supply")}
        assert reached <= {"toolcrib.supply.mcp.settings", "toolcrib.supply.openapi.settings"}, core
    for kind in ("mcp", "openapi"):
        assert closure(edges, f"toolcrib.supply.{kind}.settings") == {"toolcrib.governing", "toolcrib.strict",
                                                                       "toolcrib.delegation_settings"} | \
            closure(edges, "toolcrib.governing")
    assert "toolcrib.supply" in edges["toolcrib.host"]


def test_plugin_loading_knows_no_tool_folder() -> None:
    """A tool folder is a ``Deferred`` pack like any other: plugin loading reaches no folder code."""
    edges = graph()
    assert "toolcrib.folders" not in closure(edges, "toolcrib.plugins")
    assert "toolcrib.plugins" in edges["toolcrib.folders"]


def test_the_graph_is_read_as_python_reads_imports() -> None:
    """The reader of the graph itself: a function-local import counts, an annotation-only one does not."""
    edges = graph()
    assert "toolcrib.fastschema" in edges["toolcrib.context"]  # a top-level import
    assert "toolcrib.view" not in edges["toolcrib.context"]  # under TYPE_CHECKING only
    assert "toolcrib.default_plugins.hooks" in edges["toolcrib.default_plugins"]  # inside create()


# What names a kind of source: its config table (``config.mcps``, ``config.openapi``, ``isolated_packs()``), or its
# label set against what carries a kind (a record's ``kind``, an entry's ``supplier``, an ``entry_point``): compared
# with one, given as one, or a key of a table of them. Every kind lives in toolcrib.supply (its ``Kind`` in
# toolcrib.supply.kinds says what the core may know of it); the core asks that table and names none.
KIND_ATTRIBUTES = frozenset({"mcps", "openapi", "isolated_packs"})
KIND_LABELS = frozenset({"mcp", "openapi", "(isolated)"})  # (packs and the host's own are the core's: PACK, BUILTIN)
CARRIERS = frozenset({"kind", "supplier", "entry_point"})


def _labels(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and n.value in KIND_LABELS for n in ast.walk(node))


def kind_named(path: Path) -> list[str]:
    """Where the module names a kind (``line: what``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in KIND_ATTRIBUTES:
            found.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Compare) and any(
                isinstance(n, ast.Attribute) and n.attr in CARRIERS for n in (node.left, *node.comparators)) \
                and _labels(node):
            found.append(f"{node.lineno}: a comparison with a kind")
        elif isinstance(node, ast.keyword) and node.arg in CARRIERS and _labels(node.value):
            found.append(f"{node.value.lineno}: {node.arg}= a kind")
        elif isinstance(node, ast.Dict) and any(k is not None and _labels(k) for k in node.keys):
            found.append(f"{node.lineno}: a table by kind")
    return sorted(found, key=lambda line: int(line.split(":")[0]))


def test_no_core_module_names_a_kind_of_source() -> None:
    """Catalog, host, view, decision, lock and pipeline: none names a kind; the front ends (``toolcrib.mcp``, the
    CLI) and the config's schema (whose per-kind checks move into their kinds next) are not held to it yet."""
    outside = {"toolcrib.cli", "toolcrib.config", "toolcrib.plugins"}  # (plugins: packs are loaded there)
    core = {name: path for name, path in modules().items()
            if not name.startswith(("toolcrib.supply", "toolcrib.mcp")) and name not in outside}
    assert {name: kind_named(path) for name, path in core.items() if kind_named(path)} == {}
    assert {"toolcrib.catalog", "toolcrib.host", "toolcrib.view", "toolcrib.permissions", "toolcrib.lock",
            "toolcrib.calls"} <= set(core)


def test_the_core_names_no_built_in_plugin() -> None:
    """The audit log and the hook programs are plugins like any other: the pipeline hears them through what any
    plugin may be (an ``AuditSink``, ``sees_calls``), never by name."""
    builtins = set()
    tree = ast.parse((PACKAGE / "default_plugins" / "__init__.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and node.elts and isinstance(node.elts[0], ast.Constant) \
                and str(node.elts[0].value).startswith("toolcrib."):
            builtins.add(node.elts[0].value)
    assert builtins == {"toolcrib.audit", "toolcrib.hooks"}
    named = {}
    for name, path in modules().items():
        if name.startswith(("toolcrib.default_plugins", "toolcrib.mcp", "toolcrib.cli")):
            continue
        found = [n.lineno for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.Constant) and n.value in builtins]
        if found:
            named[name] = found
    assert named == {}


def test_the_kind_check_sees_each_way_of_naming_a_kind(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('if record.kind == "mcp": pass\nRecord(kind="openapi")\nLABELS = {"mcp": 1}\n'
                      'x = config.mcps\nformat = "mcp"\nif entry.supplier in ("openapi", "builtin"): pass\n')
    assert kind_named(module) == ["1: a comparison with a kind", "2: kind= a kind", "3: a table by kind", "4: .mcps",
                                  "6: a comparison with a kind"]


def test_only_the_upstream_connections_import_the_sdks_client() -> None:
    """The SDK's client (``mcp.Client``, its transports, ``StdioServerParameters``) is reached from one module."""
    client = {"mcp.Client", "mcp.StdioServerParameters"}
    found = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module is not None and not node.level and (
                    node.module.startswith("mcp.client")
                    or any(f"{node.module}.{a.name}" in client for a in node.names)):
                found.add(name)
    assert found == {"toolcrib.supply.mcp.connections"}


def _imported_modules(path: Path) -> set[str]:
    """The top-level modules a file imports, function-local imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_test_module_is_another_ones_fixture_library() -> None:
    """What tests share lives in conftest.py or a helper module (tests/serving.py, tests/approving.py, ...): a test
    module imported by another runs its module-level code twice and ties two subsystems' tests together."""
    tests = Path(__file__).parent
    importers = {path.name: sorted(m for m in _imported_modules(path) if m.startswith("test_"))
                 for path in sorted(tests.glob("*.py"))}
    assert {name: found for name, found in importers.items() if found} == {}


def test_the_fixture_library_check_sees_every_way_of_importing(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import test_x\nfrom test_y.z import w\ndef f():\n    from test_z import q\n"
                                   "from . import test_local\nimport serving\n")
    assert _imported_modules(tmp_path / "a.py") == {"test_x", "test_y", "test_z", "serving"}

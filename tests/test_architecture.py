"""The house's shape, as the import graph shows it: a layered DAG among the host's modules (an import inside a
function counts; one under ``if TYPE_CHECKING:`` is an annotation and does not), the decision kept apart from plugin
loading, the pipeline from the built-in plugins, and the core from the MCP front end."""

from __future__ import annotations

import ast
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
    ``from_config``, an entrance, asks the supply for sources)."""
    edges = graph()
    for core in ("toolcrib.catalog", "toolcrib.permissions", "toolcrib.calls", "toolcrib.view", "toolcrib.lock",
                 "toolcrib.curation"):
        assert not any(name.startswith("toolcrib.supply") for name in closure(edges, core)), core
    assert "toolcrib.supply" in edges["toolcrib.host"]


def test_the_graph_is_read_as_python_reads_imports() -> None:
    """The reader of the graph itself: a function-local import counts, an annotation-only one does not."""
    edges = graph()
    assert "toolcrib.fastschema" in edges["toolcrib.context"]  # a top-level import
    assert "toolcrib.view" not in edges["toolcrib.context"]  # under TYPE_CHECKING only
    assert "toolcrib.default_plugins.hooks" in edges["toolcrib.default_plugins"]  # inside create()


# What names a kind of source: its config table (``config.mcps``, ``config.openapi``, ``isolated_packs()``) or its
# label as a literal. Issue 64 moves every kind into toolcrib.supply; until the core's last mention has moved, the
# modules that still name one are these, and no other may start to (the lock did, and reads each source's record now).
KIND_ATTRIBUTES = frozenset({"mcps", "openapi", "isolated_packs"})
KIND_LABELS = frozenset({"mcp", "openapi", "(isolated)"})
STILL_NAMING_KINDS = {"toolcrib.catalog", "toolcrib.entries", "toolcrib.host", "toolcrib.view"}


def names_a_kind(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in KIND_ATTRIBUTES:
            return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in KIND_LABELS:
            return True
    return False


def test_no_core_module_names_a_kind_of_source_but_those_still_moving() -> None:
    outside = {"toolcrib.cli", "toolcrib.config"}  # the front end, and the config's schema (its checks move later)
    core = {name: path for name, path in modules().items()
            if not name.startswith(("toolcrib.supply", "toolcrib.mcp")) and name not in outside}
    assert {name for name, path in core.items() if names_a_kind(path)} == STILL_NAMING_KINDS
    assert not names_a_kind(core["toolcrib.lock"])


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

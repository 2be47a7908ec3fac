"""The docs cannot drift: hooks, config keys and example code are checked against the code, and the console
sessions in the docs are run."""

from __future__ import annotations

import inspect
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import toolcrib
from conftest import ROOT
from toolcrib import config, hookspecs
from toolcrib.delegation_settings import ConsentConfig, ExchangeConfig
from toolcrib.supply.mcp import settings as mcp_settings
from toolcrib.supply.openapi import settings as openapi_settings

DOCS = ROOT / "docs"


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


# -- hooks -------------------------------------------------------------------------------------------------------


def _signature(fn: Any) -> str:
    sig = inspect.signature(fn)
    params = ", ".join(f"{p.name}: {p.annotation}" for p in sig.parameters.values())
    return f"def {fn.__name__}({params}) -> {sig.return_annotation}: ..."


def test_every_hook_is_documented_with_its_signature() -> None:
    sections = _sections((DOCS / "hooks.md").read_text())
    specs = {name: getattr(hookspecs, name) for name in dir(hookspecs) if name.startswith("toolcrib_")}
    assert sorted(sections) == sorted(specs)
    for name, fn in specs.items():
        assert f"```python\n{_signature(fn)}\n```" in sections[name], name
        first = fn.toolcrib_spec.get("firstresult") if hasattr(fn, "toolcrib_spec") else False
        assert ("Stops at the first non-None answer" in sections[name]) == bool(first), name


# -- config ------------------------------------------------------------------------------------------------------

TABLES = {
    "[host]": [config.HostConfig],
    "[packs.&lt;namespace&gt;]": [config.PackConfig],
    "[mcps.&lt;namespace&gt;]": [mcp_settings.McpConfig, ExchangeConfig, ConsentConfig],
    "[credentials]": [config.CredentialsConfig],
    "[openapi.&lt;namespace&gt;]": [openapi_settings.OpenAPIConfig, openapi_settings.ApiKeyConfig],
    "[skills.&lt;name&gt;]": [config.SkillConfig],
    "[agents.&lt;name&gt;]": [config.AgentConfig],
    "[agents.&lt;name&gt;.identity]": [config.IdentityConfig],
    "[agents.&lt;name&gt;.limits]": [config.LimitsConfig],
    "[agents.&lt;name&gt;.tool_search]": [config.ToolSearchConfig],
    "[agents.&lt;name&gt;.permissions]": [config.Permissions, config.Rule],
    "[oauth]": [config.OAuthConfig, config.OAuthClientConfig],
    "[cluster]": [config.ClusterConfig],
    "[policy]": [config.PolicyConfig],
    "[[hooks.pre_tool_use]]": [config.CommandHook],
    '[tools."&lt;namespace&gt;__&lt;tool&gt;"]': [config.ToolCuration, config.ArgumentCuration],
}


def _rows(section: str) -> list[list[tuple[str, str]]]:
    """Each table of a section as (key, default) pairs."""
    tables: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] | None = None
    for line in section.splitlines():
        if line.startswith("| key |"):
            current = []
            tables.append(current)
        elif current is not None and line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            current.append((cells[0].strip("`"), cells[2]))
        elif not line.startswith("|"):
            current = None
    return tables


def _default(cell: str) -> Any:
    if cell in ("—", "required"):
        return cell
    return tomllib.loads(f"x = {cell.strip('`')}")["x"]


def test_config_reference_matches_the_models() -> None:
    sections = _sections((DOCS / "config.md").read_text())
    for heading, models in TABLES.items():
        tables = _rows(sections[heading])
        assert len(tables) == len(models), heading
        for model, rows in zip(models, tables, strict=True):
            documented = dict(rows)
            fields = {field.alias or key: field for key, field in model.model_fields.items()}  # as a file says it
            assert list(documented) == list(fields), f"{heading}: keys differ from {model.__name__}"
            for key, field in fields.items():
                cell = _default(documented[key])
                if field.is_required():
                    assert cell == "required", f"{heading} {key}"
                    continue
                value = field.get_default(call_default_factory=True)
                if value is None or isinstance(value, BaseModel):
                    assert cell == "—", f"{heading} {key}: the default is not documented as none"
                else:
                    assert cell == value, f"{heading} {key}: documented {cell!r}, the model says {value!r}"


def test_every_config_example_in_the_docs_loads() -> None:
    from toolcrib.config import parse_config

    checked = 0
    for doc in [ROOT / "README.md", *DOCS.glob("*.md"), *ROOT.glob("plugins/*/README.md")]:
        for i, block in enumerate(re.findall(r"```toml\n(.*?)```", doc.read_text(), flags=re.S)):
            if "[project]" in block or "[build-system]" in block:
                continue  # a pyproject.toml, not a toolcrib config
            parse_config(block, f"{doc.name} example {i}", ROOT)  # a ConfigError names the doc and what is wrong
            checked += 1
    assert checked >= 15


def test_starter_config_and_builtin_default_are_documented_files() -> None:
    assert (ROOT / "host/toolcrib/templates/toolcrib.toml").read_text().startswith("# toolcrib config")


# -- included files ------------------------------------------------------------------------------------------------


def test_code_shown_in_the_docs_is_the_tested_code() -> None:
    found = 0
    for doc in DOCS.glob("*.md"):
        for path, block in re.findall(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", doc.read_text(), flags=re.S):
            assert block == (ROOT / path).read_text(), f"{doc.name}: the block for {path} differs from the file"
            found += 1
    assert found == 5


def test_python_in_the_docs_is_valid_and_the_json_schema_example_declares_what_it_says() -> None:
    for doc in [*DOCS.glob("*.md"), *ROOT.glob("plugins/*/README.md")]:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(), flags=re.S):
            compile(block, str(doc), "exec")  # a SyntaxError names the doc
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / "writing-packs.md").read_text(), flags=re.S)
    example = next(b for b in blocks if b.startswith("schema = "))
    scope: dict[str, Any] = {"toolcrib": __import__("toolcrib")}
    exec(example, scope)
    spec = scope["search_tool"]
    assert spec.input_schema == scope["schema"]
    assert spec.handler({"q": "refunds"}) == "refunds"
    assert spec.input_model.model_validate({"q": "refunds"}).__pydantic_extra__ == {"q": "refunds"}


@pytest.mark.slow
def test_the_embedding_example_runs() -> None:
    pytest.importorskip("toolcrib_fs", reason="the example uses the fs pack")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    proc = subprocess.run([sys.executable, "embed.py"], cwd=DOCS / "examples", capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "fs__cwd - Return the workspace root: the directory every path of the fs tools is relative to."
    assert lines[-4:] == ["fs__cwd", "['fs__read_file', 'fs__find_text']",
                          "False # The config docs/examples/embed.py runs with.", "Unknown tool: fs__write_file"]


def test_links_between_documents_resolve() -> None:
    for doc in [ROOT / "README.md", *DOCS.glob("*.md"), *ROOT.glob("plugins/*/README.md")]:
        for target in re.findall(r"\]\(([^)#]+?)(?:#[^)]*)?\)", doc.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            assert (doc.parent / target).exists(), f"{doc.relative_to(ROOT)}: broken link {target}"


# -- console sessions -----------------------------------------------------------------------------------------------


def _sessions(doc: Path) -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for every `$ ` line of every console block."""
    steps: list[tuple[str, list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", doc.read_text(), flags=re.S):
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:], []))
            else:
                steps[-1][1].append(line)
    return steps


def _matches(expected: list[str], actual: list[str]) -> bool:
    """Line by line, where a line '...' stands for any number of lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(_matches(expected[1:], actual[i:]) for i in range(len(actual) + 1))
    return bool(actual) and actual[0] == expected[0] and _matches(expected[1:], actual[1:])


@pytest.mark.slow
@pytest.mark.parametrize("doc", ["quickstart.md", "operators.md"])
def test_console_sessions_in_the_docs_run_as_shown(doc: str, tmp_path: Path) -> None:
    pytest.importorskip("toolcrib_fs", reason="the docs' sessions use the first-party packs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    # exactly the packs the quickstart installs, whatever else the test environment has
    env.update({"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "fs,media,shell,web",
                "COLUMNS": "120"})  # `toolcrib tools` fits its lines to the terminal: as wide as shown
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    for command, expected in _sessions(DOCS / doc):
        if not command.startswith(("toolcrib ", "echo ")):
            raise AssertionError(f"{doc}: the console sessions only run toolcrib and echo, not {command!r}")
        words = shlex.split(command)
        if words[0] == "toolcrib":
            words = [sys.executable, "-m", "toolcrib.cli", *words[1:]]
            proc = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        else:
            proc = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True,
                                  timeout=120)
        actual = (proc.stdout + proc.stderr).splitlines()
        assert _matches(expected, actual), f"{doc}: `{command}` printed:\n" + "\n".join(actual)


def test_the_can_use_tool_example_answers_as_the_sdk_callback_would() -> None:
    """docs/coming-from-agent-sdks.md: each canUseTool answer, through a real host and its pipeline."""
    import anyio

    from conftest import make_host
    from packs import Pack

    sys.path.insert(0, str(DOCS / "examples"))
    try:
        from can_use_tool import OrdersOnly
    finally:
        sys.path.remove(str(DOCS / "examples"))

    @toolcrib.tool(annotations={"readOnlyHint": True})
    def lookup_order(order_id: str) -> str:
        """Look an order up."""
        return f"{order_id}: shipped"

    @toolcrib.tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        return "refunded"

    host = make_host('[agents.a]\n[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n',
                     {"shop": Pack(lookup_order), "payments": Pack(refund), "orders_only": OrdersOnly()})

    def call(tool: str, order_id: str) -> toolcrib.ToolResult:
        return anyio.run(lambda: host.call("a", tool, {"order_id": order_id}))

    assert call("shop__lookup_order", "O-1001").text == "O-1001: shipped"
    assert call("shop__lookup_order", " o-1001 ").text == "O-1001: shipped"
    stopped = call("payments__refund", "O-1001")
    assert (stopped.text, stopped.interrupt) == ("Payments are handled by people; stop and tell the user.", True)
    assert call("shop__lookup_order", "O-9001").text == (
        "Permission denied: shop__lookup_order needs approval (hook orders_only: orders from the 9000 range are "
        "archived), and no approver could answer (the client does not support elicitation and no approval hook "
        "decided).")


def test_the_audit_hook_example_reads_every_kind_of_record() -> None:
    """The toolcrib_audit example, run as a plugin: a denied call alerts with the tool's name; the records of a
    resource read and of a call carry their name under the key of their kind, as the reference says."""
    import anyio

    from conftest import make_host
    from docs_pack import Docs
    from packs import FILES

    block = next(b for b in re.findall(r"```python\n(.*?)```", _sections((DOCS / "hooks.md").read_text())[
        "toolcrib_audit"], flags=re.S) if "@toolcrib.hookimpl" in b)
    sent: list[str] = []
    scope: dict[str, Any] = {"toolcrib": toolcrib, "alerts": type("Alerts", (), {"send": staticmethod(sent.append)})}
    exec(block, scope)
    records: list[dict[str, Any]] = []

    class Watcher:
        @toolcrib.hookimpl
        def toolcrib_audit(self, record: Any) -> None:
            records.append(dict(record))
            scope["toolcrib_audit"](record)

    host = make_host('[agents.a]\nmode = "dontAsk"\n[agents.a.permissions]\nplugins = { allow = ["*"] }\n'
                     'tools = { allow = ["*"] }\nresources = { allow = ["*"] }\nask = ["files__write"]\n',
                     {"files": FILES, "docs": Docs(), "watcher": Watcher()})

    async def main() -> None:
        await host.call("a", "files__write", {"path": "x", "text": "y"})
        await host.view("a").read("docs://readme")

    anyio.run(main)
    assert sent == ["a was denied files__write: Permission denied: files__write needs approval (ask rule "
                    "'files__write'), and agent mode 'dontAsk' denies calls that need approval."]
    assert [(r["kind"], r[r["kind"]], r["decision"]) for r in records] == [
        ("tool", "files__write", "denied"), ("resource", "docs://readme", "allowed")]
    assert set(records[0]) == {"time", "agent", "kind", "tool", "decision", "by", "duration_ms", "is_error",
                               "call_id"}


def test_the_tiny_source_in_the_architecture_doc_serves_its_tool(tmp_path: Path) -> None:
    """docs/architecture.md's worked example of a new kind of source, run as written: a Source with a runner of its
    own, handed to a Host, listed for and called by an agent its rules allow."""
    section = _sections((DOCS / "architecture.md").read_text())["Sources and runners: where a new kind of source goes"]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1
    (tmp_path / "example.py").write_text(blocks[0])
    done = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert (done.returncode, done.stderr) == (0, "")
    namespace: dict[str, Any] = {}
    exec(compile(blocks[0], "architecture.md", "exec"), namespace)  # and in this process, to look at what it made
    host = namespace["host"]
    assert [r.name for r in host.records if r.kind == "source"] == ["shout"]
    decision = host.explain("reader", "shout__it")
    assert [(c.name, c.passed) for c in decision.checks] == [
        ("source", True), ("tools", True), ("mode", True), ("available", True)]


def test_each_framework_snippet_is_what_the_framework_matrix_runs() -> None:
    """docs/frameworks.md: every line of each framework's snippet is in its script (tests/frameworks/run_*.py),
    imports among its imports and the rest between its ``# snippet`` markers: the matrix runs what the page shows."""
    import re

    page = (DOCS / "frameworks.md").read_text()
    scripts = {"openai-agents": "openai_agents", "pydantic-ai": "pydantic_ai", "LangChain": "langchain",
               "FastMCP": "fastmcp", "LlamaIndex": "llama_index", "smolagents": "smolagents"}
    sections = dict(re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S))
    for heading, script in scripts.items():
        snippet = re.search(r"```python\n(.*?)```", sections[heading], flags=re.S)
        assert snippet is not None, heading
        source = (Path(__file__).parent / "frameworks" / f"run_{script}.py").read_text()
        marked = source.split("    # snippet\n", 1)[1].split("    # end of snippet", 1)[0]
        body = [line.strip() for line in marked.splitlines() if line.strip()]  # (as the page indents it, or not)
        imported = {(module, name.strip()) for module, names in re.findall(r"^from (\S+) import (.+)$", source, re.M)
                    for name in names.split(",")}
        for line in (line.strip() for line in snippet.group(1).splitlines() if line.strip()):
            if line.startswith("from "):
                module, names = re.fullmatch(r"from (\S+) import (.+)", line).groups()  # type: ignore[union-attr]
                assert {(module, n.strip()) for n in names.split(",")} <= imported, (heading, line)
            else:
                assert line in body, (heading, line)


def test_each_frameworks_install_line_is_what_the_matrix_installs() -> None:
    import shlex

    from framework_pack import FRAMEWORKS

    page = (DOCS / "frameworks.md").read_text()
    table = page.split("| framework | install |\n|---|---|\n", 1)[1].split("\n\n", 1)[0]
    lines = [re.search(r"`pip install ([^`]+)`", row).group(1) for row in table.splitlines()]  # type: ignore[union-attr]
    assert [shlex.split(line) for line in lines] == list(FRAMEWORKS.values())

"""The benchmark harness still runs (quick mode, in-memory sections). No times are asserted: the numbers live in
docs/benchmarks.md, measured by benchmarks/run.sh."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_the_harness_runs_in_quick_mode(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bench.md"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--no-wire", "--out",
                           str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = out.read_text()
    for row in ("| call, in-memory (2026-07-28) |", "| tools/list, 1000 tools, in-memory |",
                "| resources/list, 100 resources, in-memory |", "| prompts/get, in-memory |",
                "| call with metrics |", "| call with spans (an OpenTelemetry SDK, no exporter) |",
                "| view.call vs a bare pydantic-validated call", "| 100 concurrent 100 ms calls, async |",
                "| view build, ", "| toolcrib tools, 20 packs of 10 tools |", "| toolcrib plugins",
                "| one view of 1,000 tools under a 20-policy Cedar file vs 20 TOML patterns "
                "(`benchmarks/bench_policy.py`) |",
                "| a Python API call decided by that Cedar file vs by the TOML rules, p50 |",
                "| view build, 1,000 tools, a 20-policy Cedar file vs the TOML rules | <= 2.00x | ",
                "| a call's decision by that Cedar file over the TOML rules, p50 | <= 50 us | ",
                "| call, in-memory (2026-07-28): the server's part only |",
                "| 1000 tools, 2026-07-28: process start to the first tools/call answered (the same processes) |",
                "| 1000 tools, 2025-11-25: the server process's peak memory, after that list and call | ",
                "| 1000 tools: building the server, then its first tools/list (one process) |",
                "| call with an audit log |", "| call with a command hook that matches no call |",
                "| call as an MCP task: the tools/call that makes it, then tasks/get until it is completed "
                "(`benchmarks/bench_tasks.py`) |",
                "| toolcrib tools --json, 20 packs of 10 tools |",
                "| 100 concurrent 100 ms calls, sync (default: 128 worker threads) |",
                "| MCP call in memory, 2025-11-25, vs the low-level server | <= 0.90x | ",
                "| process start to the first tools/call answered, 1,000 tools, 2025-11-25, vs the low-level server "
                "| <= 1.00x | ",
                "| 1,000 tools: toolcrib (BM25 and word vectors) | ", "| 1,000 tools: bm25 | ",
                "| 1,000 tools: toolcrib without the vectors (BM25) | ", "| 1,000 tools: fts5 | ",
                "| tool search recall@5, held-out queries, 10,000 tools | >= 0.90 | ",
                "| tool search recall@5 vs plain BM25, held-out queries, 10,000 tools | >= 1.00x | ",
                "| the argument rules of a call on a tool with 250 specifiers (125 prefixes, 125 other globs) |",
                "| call with a matching long-lived command hook (a Python script) |",
                "| call with a matching long-lived hook answering at once (`cat`: a compiled program; the call it "
                "echoes back decides nothing) |",
                "| MCP call with a matching long-lived hook whose process answers at once (`cat`) vs without: the "
                "least a hook process costs here | - | ",
                "| Python API call with a matching long-lived hook whose process answers at once (toolcrib's own part "
                "of a hook) |",
                "| toolcrib's own part of a matching long-lived hook (its process answering at once), Python API "
                "| - | ",
                "| 250 argument specifiers on one tool, the check of a call | <= 10 us |",
                "## What was removed, and what it cost\n\nIssue 65 took out of the host",
                "\n- **`toolcrib.mcp.early`** answered a 2026-07-28 client's"):
        assert row in report, row


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"## Test it"' in ci or "## Test it" in ci  # .ci/run extracts the command from README.md
    readme = (ROOT / "README.md").read_text()
    assert "## Test it\n\n```sh\npython3 -m venv .venv && " in readme


@pytest.fixture
def run() -> Any:
    """benchmarks/run.py, imported."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import run as harness
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return harness


def test_a_quick_run_never_writes_the_published_page(run: Any, tmp_path: Path) -> None:
    published = ROOT / "docs" / "benchmarks.md"
    elsewhere = tmp_path / "bench.md"
    assert [run.written_to(published, True), run.written_to(ROOT / "docs" / ".." / "docs" / "benchmarks.md", True),
            run.written_to(published, False), run.written_to(elsewhere, True), run.written_to(None, False)] == [
        None, None, published, elsewhere, None]


def test_a_goal_is_never_met_by_a_negative_delta_or_a_noisy_zero(run: Any) -> None:
    assert [run.verdict(-0.0002, 0.001, "s"), run.verdict(0.0, 1.0, "x"), run.verdict(0.0005, 0.001, "s"),
            run.verdict(0.002, 0.001, "s"), run.verdict(1.6, 1.5, "minx"), run.verdict(1.4, 1.5, "minx")] == [
        "**no** (noise: at or below zero)", "**no** (noise: at or below zero)", "yes", "**no**", "yes", "**no**"]


def test_the_low_level_peer_is_configured_as_the_sdks_docs_recommend(run: Any) -> None:
    """It answers the 2026-07-28 HTTP entry's schema lookups itself, as MCPServer and FastMCP do (without it the SDK
    lists every tool on each call to find one schema, and the peer looks slower than it is)."""
    import peers

    server = peers.lowlevel_server(3)
    assert server.get_tool_input_schema("add") == peers.IN_SCHEMA
    assert server.get_tool_input_schema("no_such_tool") is None

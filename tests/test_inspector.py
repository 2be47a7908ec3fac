"""The official MCP Inspector CLI (@modelcontextprotocol/inspector, from the npm registry) as an independent
client of ``toolcrib serve``, over stdio and over HTTP with a bearer token."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from serving import CONFIG, TESTS, TOKENS, start_http, subprocess_env

VERSION = "2.12.0"
CACHE = TESTS / ".inspector"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def inspector() -> Path:
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: the Inspector CLI needs Node.js")
    binary = CACHE / "node_modules" / ".bin" / "mcp-inspector"
    failed = ""
    for _attempt in range(2):  # one retry: the registry is a network away
        if binary.exists():
            break
        CACHE.mkdir(exist_ok=True)
        proc = subprocess.run(["npm", "install", "--prefix", str(CACHE), f"@modelcontextprotocol/inspector@{VERSION}",
                               "--no-audit", "--no-fund", "--loglevel=error"], capture_output=True, text=True,
                              timeout=600)
        failed = proc.stderr.strip()[-500:]
    if not binary.exists():
        pytest.skip(f"npm could not install the MCP Inspector CLI (is the npm registry reachable?): {failed}")
    return binary


def run(inspector: Path, *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    proc = subprocess.run([str(inspector), "--cli", *args, "--format", "json", "-q"], capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout or proc.stderr)


def test_inspector_over_stdio(inspector: Path, tmp_path: Path) -> None:
    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG)
    env = subprocess_env(TOOLCRIB_CONFIG=str(config))
    flags = []
    for key in ("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "TOOLCRIB_PLUGINS", "PYTHONPATH", "TOOLCRIB_CONFIG"):
        flags += ["-e", f"{key}={env[key]}"]
    server = [sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "reader"]
    code, listed = run(inspector, *flags, *server, "--method", "tools/list")
    assert code == 0
    assert [t["name"] for t in listed["result"]["tools"]] == ["files__read", "misc__add", "talk__chatty",
                                                                 "talk__noisy"]
    code, called = run(inspector, *flags, *server, "--method", "tools/call", "--tool-name", "misc__add",
                       "--tool-arg", "a=2", "b=40")
    assert (code, called) == (0, {"result": {"content": [{"type": "text", "text": "42"}], "isError": False}})
    # The Inspector answers a tool missing from its list itself, without asking the server: a hidden tool and one
    # that never existed get the same answer from it.
    answers = []
    for name in ("files__write", "zz__nope"):
        code, answer = run(inspector, *flags, *server, "--method", "tools/call", "--tool-name", name,
                           "--tool-arg", "path=x", "text=y")
        assert code != 0
        answers.append(answer["error"]["message"].replace(name, "<tool>"))
    assert answers == ["Tool '<tool>' not found on server."] * 2
    # toolcrib's own answer to the same server command, asked directly: the same for both, word for word.
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    lines += [{"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": {}}}
              for i, name in ((2, "files__write"), (3, "zz__nope"))]
    proc = subprocess.run(server, input="".join(json.dumps(line) + "\n" for line in lines), capture_output=True,
                          text=True, env=env, timeout=120)
    errors = {a["id"]: a["error"] for a in map(json.loads, proc.stdout.splitlines()) if "error" in a}
    assert errors == {2: {"code": -32602, "message": "Unknown tool: files__write"},
                      3: {"code": -32602, "message": "Unknown tool: zz__nope"}}


def test_inspector_over_http_with_a_token(inspector: Path, tmp_path: Path) -> None:
    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG)
    proc, base, _ = start_http(config)
    try:
        for era in ("legacy", "modern"):
            code, listed = run(inspector, f"{base}/agents/writer/mcp", "--header",
                               f"Authorization: Bearer {TOKENS['TOK_WRITER']}", "--protocol-era", era,
                               "--method", "tools/list")
            assert code == 0, listed
            assert [t["name"] for t in listed["result"]["tools"]] == [
                "files__read", "files__touch", "files__write", "talk__chatty", "talk__noisy"]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_the_docs_pin_the_inspector_these_tests_run() -> None:
    """npx runs whatever Inspector it has cached unless told which: the docs name the one tested here."""
    import re

    docs = Path(__file__).parent.parent / "docs"
    named = [(path.name, found) for path in sorted(docs.glob("*.md"))
             for found in re.findall(r"npx @modelcontextprotocol/inspector\S*", path.read_text())]
    assert named and {found for _, found in named} == {f"npx @modelcontextprotocol/inspector@{VERSION}"}, named

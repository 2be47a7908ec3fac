"""A newcomer's first steps, as README.md gives them, from a fresh clone of this repository into a fresh virtual
environment, with nothing else installed: "Run it" whole (the server it starts answers an MCP client on stdin,
then ends with its input), and "Test it" up to the test run (its environment made, and pytest collecting every
test: the run itself is this suite)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.slow  # clones the repository and installs into fresh environments from PyPI

README = (ROOT / "README.md").read_text()


def command_of(section: str) -> str:
    """The one ``sh`` command of a README section."""
    text = README.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```sh\n(.+?)\n```", text, re.S)
    assert len(found) == 1, section
    return str(found[0])


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("needs a git clone of this repository and git")
    target = tmp_path_factory.mktemp("newcomer") / "toolcrib"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(target)], check=True, timeout=300)
    return target


def fresh_env() -> dict[str, str]:
    """The environment of a shell a newcomer opens: none of this test run's Python or toolcrib settings."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("TOOLCRIB_", "PYTHON", "VIRTUAL_ENV", "PIP_REQUIRE", "PYTEST"))}


def test_run_it_lists_the_default_agents_tools_and_serves_it(clone: Path) -> None:
    command = command_of("Run it")
    assert command.endswith(" && .venv/bin/toolcrib serve --agent default")
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "newcomer", "version": "1"}}}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    talk = "\n".join(json.dumps(m) for m in (initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                                             listing)) + "\n"
    ran = subprocess.run(["bash", "-c", command], cwd=clone, env=fresh_env(), input=talk, capture_output=True,
                         text=True, timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    lines = ran.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("NAME ")))
    sources = {line.split()[0]: line.split()[2] for line in lines[header + 1:] if line and not line.startswith(" ")
               and not line.startswith(("fs__", "{"))}
    assert (sources["fs"], sources["toolcrib"]) == ("loaded", "loaded")
    tools = [line.split("(", 1)[0] for line in lines if line.startswith("fs__")]
    assert tools == ["fs__cwd", "fs__exist", "fs__find_text", "fs__glob", "fs__ls", "fs__read_file"]  # read-only
    answers = [json.loads(line) for line in lines if line.startswith("{")]
    assert [a["id"] for a in answers] == [1, 2]
    assert sorted(t["name"] for t in answers[1]["result"]["tools"]) == tools
    assert "serving agent 'default' over stdio" in ran.stderr


def test_test_it_makes_its_environment_and_collects_every_test(clone: Path) -> None:
    command = command_of("Test it")
    setup, run = command.rsplit(" && ", 1)
    assert run == ".venv/bin/python -m pytest"
    made = subprocess.run(["bash", "-c", setup], cwd=clone, env=fresh_env(), capture_output=True, text=True,
                          timeout=1800)
    assert made.returncode == 0, made.stderr[-3000:]
    collected = subprocess.run([".venv/bin/python", "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
                               cwd=clone, env=fresh_env(), capture_output=True, text=True, timeout=600)
    assert collected.returncode == 0, collected.stdout[-3000:] + collected.stderr[-3000:]
    assert re.search(r"^(\d+) tests collected", collected.stdout, re.M), collected.stdout[-500:]

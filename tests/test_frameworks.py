"""The framework matrix: toolcrib connected, over stdio and streamable HTTP with a token, to the agent frameworks
people use, each in an environment of its own with its pinned version (tests/.frameworks/<name>, made once from
PyPI), by a script of its own (tests/frameworks/run_<name>.py) that turns toolcrib's tools into the framework's
tool objects and reports, as JSON, what the framework sees: the tools (the hidden one absent), their parameters as
the framework reads them, a call, an error result, a resource and a prompt where the framework reads them. No model
runs: a framework's tool object is called directly (pydantic-ai's own TestModel stands in for a model there)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import framework_pack
from conftest import make_host
from framework_pack import FRAMEWORKS
from packs import ORDER
from serving import start_http
from toolcrib.schemas import strict

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
VENVS = TESTS / ".frameworks"
TOKEN = "framework-token-" + "f" * 32
CONFIG = """
[host]
workspace = "ws"

[agents.a]
token_env = "FRAMEWORK_TOKEN"
[agents.a.permissions]
plugins = { allow = ["kit"] }
tools = { allow = ["kit__order", "kit__plain", "kit__fail"] }
resources = { allow = ["*"] }
prompts = { allow = ["*"] }
"""
TOOLS = ["kit__fail", "kit__order", "kit__plain"]  # kit__secret is the pack's too, hidden from the agent


def framework_python(name: str) -> Path:
    """The Python of ``name``'s own environment, with it installed (once; skipped, saying why, without PyPI)."""
    folder = VENVS / name
    python = folder / "bin" / "python"
    marker = folder / "installed.txt"
    wanted = "\n".join(FRAMEWORKS[name])
    if marker.exists() and marker.read_text() == wanted and python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True, timeout=300)
    proc = subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           *FRAMEWORKS[name]], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"could not install {', '.join(FRAMEWORKS[name])} (is PyPI reachable?): {proc.stderr[-500:]}")
    marker.write_text(wanted)
    return python


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """toolcrib serving the framework pack: over HTTP (a server running), and over stdio (how to start one)."""
    folder = tmp_path_factory.mktemp("frameworks")
    (folder / "ws").mkdir()
    config = folder / "toolcrib.toml"
    config.write_text(CONFIG)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update({"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "kit=framework_pack:PACK",
                "PYTHONPATH": str(TESTS), "FRAMEWORK_TOKEN": TOKEN})
    proc, base, _ = start_http(config, "--log-level", "warning", env=env, said=None)
    try:
        yield {"command": sys.executable, "args": ["-m", "toolcrib", "serve", "--agent", "a", "--config", str(config),
                                                   "--log-level", "warning"],
               "env": {k: env[k] for k in ("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "TOOLCRIB_PLUGINS", "PYTHONPATH",
                                            "PATH")},
               "url": f"{base}/agents/a/mcp", "token": TOKEN}
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def seen_by(name: str, served: dict[str, Any]) -> dict[str, Any]:
    """What framework ``name`` saw over each transport (its script's JSON); both transports must agree."""
    proc = subprocess.run([str(framework_python(name)), str(TESTS / "frameworks" / f"run_{name}.py"),
                           json.dumps(served)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["stdio"] == seen["http"]
    return dict(seen["http"])


def test_openai_agents_makes_strict_function_tools_where_a_schema_can_be(served: dict[str, Any]) -> None:
    seen = seen_by("openai_agents", served)
    assert seen["tools"] == TOOLS
    # a mapping argument cannot be strict (notes: dict[str, str]); the rest are, with no $ref to give up on
    assert seen["strict"] == {"kit__fail": True, "kit__order": False, "kit__plain": True}
    # toolcrib's own verdict (schema --strict) agrees, tool for tool
    host = make_host(CONFIG, {"kit": framework_pack.PACK})
    assert host.view("a").not_strict() == {"kit__order": "notes: a mapping of free-form keys (a dict), which strict "
                                                         "mode cannot describe"}
    assert seen["order"] == ORDER
    assert seen["plain"] == strict({  # as `schema --strict` makes it
        "additionalProperties": False, "properties": {"text": {"type": "string"}, "count": {
            "default": 1, "type": "integer"}}, "required": ["text"], "type": "object"})
    assert (seen["call"], seen["nested"]) == ({"type": "text", "text": "hi hi"},
                                              {"type": "text", "text": "green any size to Main St"})
    assert seen["error"] == {"type": "text", "text": "refused: no"}  # its own bug: the model is not told it failed
    assert (seen["resource"], seen["prompt"]) == ("buy milk", "Say hello to Ada.")


def test_pydantic_ai_gives_its_model_the_served_schemas_and_retries_on_an_error(served: dict[str, Any]) -> None:
    seen = seen_by("pydantic_ai", served)
    assert (seen["tools"], seen["order"]) == (TOOLS, ORDER)
    assert seen["run"] == '{"kit__plain":"a"}'  # TestModel called it with arguments made from its schema
    assert (seen["call"], seen["nested"]) == ("hi hi", "green any size to Main St")
    assert seen["error"] == "ModelRetry: refused: no"
    assert (seen["resource"], seen["prompt"]) == ("buy milk", "Say hello to Ada.")


def test_langchain_tools_take_the_served_schemas_and_report_an_error_as_an_error(served: dict[str, Any]) -> None:
    seen = seen_by("langchain", served)
    assert (seen["tools"], seen["order"]) == (TOOLS, ORDER)
    assert (seen["call"], seen["nested"]) == (["hi hi"], ["green any size to Main St"])
    assert seen["error"] == ["error", ["refused: no"]]  # a ToolMessage with status "error"
    assert (seen["resource"], seen["prompt"]) == ("buy milk", "Say hello to Ada.")


def test_fastmcp_s_client_and_a_mounted_proxy_list_call_and_raise_on_an_error(served: dict[str, Any]) -> None:
    seen = seen_by("fastmcp", served)
    assert (seen["tools"], seen["order"]) == (TOOLS, ORDER)
    # proxied by a FastMCP server and mounted in another under "tc": the agent's tools, and no more
    assert seen["mounted"] == {"tools": [f"tc_{name}" for name in TOOLS], "call": "hi hi"}
    assert (seen["call"], seen["nested"]) == ("hi hi", "green any size to Main St")
    assert seen["error"] == "ToolError: refused: no"
    assert (seen["resource"], seen["prompt"]) == ("buy milk", "Say hello to Ada.")


def test_fastmcp_s_client_polls_toolcrib_s_tasks_to_their_end_and_answers_their_questions(tmp_path: Path) -> None:
    config = tmp_path / "toolcrib.toml"
    config.write_text('[agents.a]\ntoken_env = "FRAMEWORK_TOKEN"\n[agents.a.permissions]\nplugins = { allow = '
                      '["jobs"] }\ntools = { allow = ["*"] }\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update({"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "jobs=packs:JOBS",
                "PYTHONPATH": str(TESTS), "FRAMEWORK_TOKEN": TOKEN})
    proc, base, _ = start_http(config, "--log-level", "warning", env=env, said=None)
    try:
        script = TESTS / "frameworks" / "run_fastmcp_tasks.py"
        run = subprocess.run([str(framework_python("fastmcp_tasks")), str(script),
                              json.dumps({"url": f"{base}/agents/a/mcp", "token": TOKEN})],
                             capture_output=True, text=True, timeout=600)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert run.returncode == 0, run.stderr[-3000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {
        "protocol": "2026-07-28", "only": "only 3", "asked": "Ada of Rome (accept)",
        "questions": ["Your name?", "Your town?"]}


def test_llama_index_calls_through_its_tools_and_keeps_the_error_flag_only_in_the_raw_result(
        served: dict[str, Any]) -> None:
    seen = seen_by("llama_index", served)
    assert seen["tools"] == TOOLS
    order = seen["order"]
    # llama-index builds its own model from the schema: the Enum stays an enum, the nested model a bare object
    assert order["properties"]["color"] == {"description": "", "enum": ["red", "green"], "title": "Color",
                                            "type": "string"}
    assert order["properties"]["address"] == {"additionalProperties": True, "description": "", "title": "Address",
                                              "type": "object"}
    assert order["required"] == ["color", "address"]
    assert (seen["call"], seen["nested"]) == ([False, False, "hi hi"], [False, False, "green any size to Main St"])
    assert seen["error"] == [False, True, "refused: no"]  # its own bug: ToolOutput.is_error stays False
    assert (seen["resource"], seen["prompt"]) == ("buy milk", "Say hello to Ada.")


def test_smolagents_calls_through_mcpadapt_and_passes_an_error_on_as_text(served: dict[str, Any]) -> None:
    seen = seen_by("smolagents", served)
    assert seen["tools"] == TOOLS
    # the served nullables (type lists) reach it as they are: no anyOf for mcpadapt to type as a string
    # (and no "nullable": its own bug, smolagents holds the defaulted argument required)
    assert seen["order"]["size"] == {"enum": ["s", "m", None], "type": ["string", "null"], "default": None,
                                     "description": "see tool description"}
    assert seen["order"]["address"]["properties"] == ORDER["properties"]["address"]["properties"]
    assert (seen["call"], seen["nested"]) == ("hi hi", "green any size to Main St")
    assert seen["error"] == "refused: no"  # its own bug: isError is ignored, the text passed on as a result

"""What an OpenAPI document becomes, toolcrib beside FastMCP's OpenAPI provider, on the same public documents
(ReadMe's @readme/oas-examples, from npm, as the tests install it). Run with the benchmarks' environment, which has
FastMCP (``benchmarks/run.sh --setup`` makes it):

    benchmarks/run.sh --setup && benchmarks/.venv/bin/python benchmarks/openapi_conformance.py [-v]

For each document: its operations; how many each serves as tools; how many of those have an output schema; of
those served for GET, HEAD and OPTIONS, how many say readOnlyHint (so plan mode shows them with no curation); and
how many input schemas are whole (valid JSON Schema 2020-12, every ``$ref`` resolving inside the schema itself, as
a client that sees only the tool must resolve it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "tests" / ".npm" / "node_modules" / "@readme" / "oas-examples"
DOCUMENTS = [
    "3.0/json/petstore.json", "3.1/yaml/train-travel.yaml", "3.1/yaml/petstore.yaml", "3.0/json/polymorphism.json",
    "3.0/json/discriminators.json", "3.0/json/schema-circular.json", "3.0/json/circular.json",
    "3.0/json/complex-nesting.json", "3.0/json/parameters-common.json", "3.0/json/parameters-style.json",
    "3.0/json/parameters-cookies.json", "3.0/json/file-uploads.json", "3.0/json/form-data.json",
    "3.0/json/request-examples.json", "3.0/json/response-schemas.json", "3.0/json/response-multiple-mediatypes.json",
    "3.0/json/schema-types.json", "3.1/json/schema-types.json", "3.0/json/schema-visibility.json",
    "3.0/json/schema-enums.json", "3.0/json/schema-additional-properties.json", "3.0/json/readme-legacy.json",
    "3.1/json/readme.json", "3.0/json/star-trek.json",
]
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
SAFE = ("GET", "HEAD", "OPTIONS")


def operations(document: dict[str, Any]) -> dict[str, str]:
    """Each operation's name (operationId, else method and path) -> its method."""
    found = {}
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            if isinstance(item, dict) and isinstance(item.get(method), dict):
                found[item[method].get("operationId") or f"{method} {path}"] = method.upper()
    return found


def whole(schema: dict[str, Any]) -> bool:
    """Valid 2020-12, and every $ref resolves inside the schema."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError:
        return False
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    for ref in refs:
        if not ref.startswith("#"):
            return False
        target: Any = schema
        for token in [t for t in ref[1:].split("/") if t]:
            token = token.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, dict) or token not in target:
                return False
            target = target[token]
    return True


def toolcrib_tools(path: Path) -> tuple[list[dict[str, Any]], dict[str, str]]:
    from toolcrib.config import parse_config
    from toolcrib.host import Host
    from toolcrib.supply import opened

    config = (f'[openapi.doc]\ndocument = "{path}"\nbase_url = "http://127.0.0.1:9"\nfollow_changes = true\n'
              '[agents.a.permissions]\nplugins = { allow = ["doc"] }\ntools = { allow = ["*"] }\n')
    loaded = parse_config(config, "toolcrib.toml", Path(tempfile.gettempdir()))
    host = Host(loaded, sources=opened(loaded, {}), plugins={}, autoload=False, env={})
    tools = host.view("a").export("mcp")
    problems = next(r for r in host.records if r.name == "doc").error
    if problems and "-v" in sys.argv:
        print(f"{path.name}: {problems}", file=sys.stderr)
    methods = {}
    for tool in tools:
        runner = host.catalog.entries[tool["name"]].tool.runner
        methods[tool["name"]] = runner.operation.method.upper()
    return tools, methods


async def fastmcp_tools(document: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, str]]:
    import httpx2
    from fastmcp import FastMCP
    from fastmcp.server.providers.openapi import MCPType, RouteMap

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = FastMCP.from_openapi(document, client=httpx2.AsyncClient(base_url="http://127.0.0.1:9"),
                                      route_maps=[RouteMap(mcp_type=MCPType.TOOL)])
        tools = await server.list_tools()
    listed = [t.to_mcp_tool().model_dump(by_alias=True, exclude_none=True, mode="json") for t in tools]
    methods = {}
    for tool in tools:
        route = getattr(tool, "_route", None)
        methods[tool.name] = str(getattr(route, "method", "")).upper()
    return listed, methods


def measure(tools: list[dict[str, Any]], methods: dict[str, str]) -> dict[str, Any]:
    safe = [t for t in tools if methods.get(t["name"]) in SAFE]
    return {
        "served": len(tools),
        "output": sum(1 for t in tools if t.get("outputSchema")),
        "safe": len(safe),
        "read_only": sum(1 for t in safe if (t.get("annotations") or {}).get("readOnlyHint") is True),
        "whole": sum(1 for t in tools if whole(t["inputSchema"])),
    }


def _cells(ours: dict[str, Any], theirs: dict[str, Any] | str) -> str:
    """One row's cells after the document's: toolcrib / FastMCP for each measure."""
    if not isinstance(theirs, dict):
        return (f"{ours['served']} / {theirs} | {ours['output']} / - | {ours['read_only']}/{ours['safe']} / - | "
                f"{ours['whole']}/{ours['served']} / -")
    return (f"{ours['served']} / {theirs['served']} | {ours['output']} / {theirs['output']} | "
            f"{ours['read_only']}/{ours['safe']} / {theirs['read_only']}/{theirs['safe']} | "
            f"{ours['whole']}/{ours['served']} / {theirs['whole']}/{theirs['served']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-v", action="store_true", help="say what toolcrib does not serve of each document, and why")
    parser.parse_args()  # -v is read where it matters (toolcrib_tools)
    if not EXAMPLES.exists():
        print(f"{EXAMPLES} is missing: run the OpenAPI tests once (they install it from npm)", file=sys.stderr)
        return 1
    import logging

    import fastmcp

    logging.disable(logging.ERROR)  # FastMCP logs each document it refuses at length; the table says it
    version = json.loads((EXAMPLES / "package.json").read_text())["version"]
    rows = []
    for name in DOCUMENTS:
        path = EXAMPLES / name
        text = path.read_text()
        document = json.loads(text) if name.endswith(".json") else yaml.safe_load(text)
        ours = measure(*toolcrib_tools(path))
        try:
            theirs: dict[str, Any] | str = measure(*asyncio.run(fastmcp_tools(document)))
        except Exception as exc:  # FastMCP refuses some documents whole
            theirs = f"refused: {type(exc).__name__}"
        rows.append((name, len(operations(document)), ours, theirs))
    print(f"@readme/oas-examples {version}; toolcrib vs FastMCP {fastmcp.__version__} (OpenAPIProvider, every route a "
          "tool)\n")
    head = ("| document | operations | served | with output schema | read-only GETs | whole input schemas |\n"
            "|---|---:|---:|---:|---:|---:|")
    print(head)
    for name, count, ours, theirs in rows:
        print(f"| {name} | {count} | {_cells(ours, theirs)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

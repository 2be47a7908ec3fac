"""Make ``tools.json``: the tool definitions of real MCP servers and llm plugins, as toolcrib serves them.

Run once, by hand, on a machine that can install from npm and PyPI (the servers are not installed by CI; the file
this writes is what the search benchmark reads):

    mkdir /tmp/harvest && cd /tmp/harvest && npm install @modelcontextprotocol/server-everything ...   # see SERVERS
    python3 -m venv py && py/bin/pip install mcp-server-fetch mcp-server-git mcp-server-time
    python3 -m venv py1 && py1/bin/pip install mcp-server-sqlite 'mcp<2'
    redis-server --port 6399 --daemonize yes   # server-redis connects when it starts
    python benchmarks/catalog/harvest.py /tmp/harvest

Each server is an upstream of one toolcrib config (``[mcps.<namespace>]``), with placeholder credentials where a
server will not start without one (listing tools calls no API), and the llm plugins and toolcrib's own packs are
packs of it; the file holds the agent's tools/list, names as toolcrib serves them (``<namespace>__<tool>``), with
the package and version each came from.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

NPM = {  # namespace -> (package, bin, args, env)
    "everything": ("@modelcontextprotocol/server-everything", "mcp-server-everything", [], {}),
    "files": ("@modelcontextprotocol/server-filesystem", "mcp-server-filesystem", ["{tmp}"], {}),
    "memory": ("@modelcontextprotocol/server-memory", "mcp-server-memory", [], {}),
    "thinking": ("@modelcontextprotocol/server-sequential-thinking", "mcp-server-sequential-thinking", [], {}),
    "github": ("@modelcontextprotocol/server-github", "mcp-server-github", [],
               {"GITHUB_PERSONAL_ACCESS_TOKEN": "placeholder"}),
    "gitlab": ("@modelcontextprotocol/server-gitlab", "mcp-server-gitlab", [],
               {"GITLAB_PERSONAL_ACCESS_TOKEN": "placeholder"}),
    "puppeteer": ("@modelcontextprotocol/server-puppeteer", "mcp-server-puppeteer", [], {}),
    "brave": ("@modelcontextprotocol/server-brave-search", "mcp-server-brave-search", [],
              {"BRAVE_API_KEY": "placeholder"}),
    "slack": ("@modelcontextprotocol/server-slack", "mcp-server-slack", [],
              {"SLACK_BOT_TOKEN": "placeholder", "SLACK_TEAM_ID": "placeholder"}),
    "maps": ("@modelcontextprotocol/server-google-maps", "mcp-server-google-maps", [],
             {"GOOGLE_MAPS_API_KEY": "placeholder"}),
    "postgres": ("@modelcontextprotocol/server-postgres", "mcp-server-postgres",
                 ["postgresql://localhost/placeholder"], {}),
    "redis": ("@modelcontextprotocol/server-redis", "mcp-server-redis", ["redis://localhost:6399"], {}),
    "playwright": ("@playwright/mcp", "playwright-mcp", [], {}),
    "notion": ("@notionhq/notion-mcp-server", "notion-mcp-server", [], {"NOTION_TOKEN": "placeholder"}),
    "firecrawl": ("firecrawl-mcp", "firecrawl-mcp", [], {"FIRECRAWL_API_KEY": "placeholder"}),
    "context7": ("@upstash/context7-mcp", "context7-mcp", [], {}),
    "tavily": ("tavily-mcp", "tavily-mcp", [], {"TAVILY_API_KEY": "placeholder"}),
}
PYPI = {  # namespace -> (distribution, its venv, command, args)
    "fetch": ("mcp-server-fetch", "py", "mcp-server-fetch", []),
    "git": ("mcp-server-git", "py", "mcp-server-git", ["--repository", "{tmp}"]),
    "time": ("mcp-server-time", "py", "mcp-server-time", []),
    "sqlite": ("mcp-server-sqlite", "py1", "mcp-server-sqlite", ["--db-path", "{tmp}/db.sqlite"]),  # needs mcp<2
}


def npm_version(root: Path, package: str) -> str:
    return json.loads((root / "node_modules" / package / "package.json").read_text())["version"]


def main(root: Path) -> None:
    from importlib.metadata import version

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "host"))
    from toolcrib.mcp.connect import open_host

    tmp = tempfile.mkdtemp()
    import subprocess

    subprocess.run(["git", "init", "-q", tmp], check=True)
    origin: dict[str, str] = {}
    toml = ["[agents.all]", "permissions = { plugins = { allow = ['*'] }, mcps = { allow = ['*'] }, "
            "tools = { allow = ['*'] } }", ""]
    for namespace, (package, binary, args, env) in NPM.items():
        origin[namespace] = f"npm {package}@{npm_version(root, package)}"
        toml += [f"[mcps.{namespace}]", f"command = {json.dumps(str(root / 'node_modules/.bin' / binary))}",
                 f"args = {json.dumps([a.format(tmp=tmp) for a in args])}",
                 "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in env.items()) + " }",
                 "timeout = 60", ""]
    for namespace, (dist, venv, command, args) in PYPI.items():
        versions = subprocess.run([str(root / venv / "bin/python"), "-c", f"import importlib.metadata as m; "
                                   f"print(m.version({dist!r}))"], capture_output=True, text=True, check=True)
        origin[namespace] = f"PyPI {dist}=={versions.stdout.strip()}"
        toml += [f"[mcps.{namespace}]", f"command = {json.dumps(str(root / venv / 'bin' / command))}",
                 f"args = {json.dumps([a.format(tmp=tmp) for a in args])}", "timeout = 60", ""]
    toml += ["[packs.llm.toolboxes.SQLite]", "path = ':memory:'", "", "[packs.llm.toolboxes.QuickJS]", ""]
    config = Path(tempfile.mkdtemp()) / "harvest.toml"
    config.write_text("\n".join(toml))
    with open_host(config, env={}) as (host, _):
        for problem in host.problems():
            if "mcps." in str(problem) or "failed" in str(problem):
                print("problem:", problem, file=sys.stderr)
        tools = [tool for tool in host.view("all").mcp_tools if not tool["name"].startswith("toolcrib__")]
    for tool in tools:
        namespace = tool["name"].split("__", 1)[0]
        if namespace not in origin:
            origin[namespace] = (f"PyPI toolcrib pack {namespace}" if namespace != "llm" else
                                 "PyPI llm plugins " + ", ".join(f"{d}=={version(d)}" for d in (
                                     "llm-tools-simpleeval", "llm-tools-quickjs", "llm-tools-sqlite")))
    out = Path(__file__).with_name("tools.json")
    sources = {ns: origin[ns] for ns in sorted({t["name"].split("__", 1)[0] for t in tools})}
    out.write_text(json.dumps({"sources": sources, "tools": tools}, indent=1, sort_keys=True) + "\n")
    print(f"{len(tools)} tools from {len(sources)} sources -> {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

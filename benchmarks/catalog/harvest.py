"""Make ``tools.json``: the tool definitions of real MCP servers, as toolcrib serves them (README.md: the whole set).

Run by hand, on a machine that can install from npm and PyPI (CI reads the file this writes); ROOT is a scratch
folder:

    python benchmarks/catalog/harvest.py install ROOT   # each candidate of candidates.txt in a folder of its own
    python benchmarks/catalog/harvest.py list ROOT      # each installed server listed by a toolcrib host of its own
    python benchmarks/catalog/harvest.py merge ROOT     # into tools.json, beside what it already holds

Each server is the one upstream of a toolcrib config (``[mcps.<namespace>]``), started with placeholder
credentials (listing tools calls no API) and a scratch folder where it wants one; what it lists, as the agent's
tools/list has it (``<namespace>__<tool>``), is kept with the package and version it came from. A server that does
not start or list without its service (most of the candidates that are missing) is left out. ``merge`` keeps the
tools and names ``tools.json`` already has (toolcrib's packs, the llm plugins, servers listed by earlier runs) and adds
each newly listed server under a namespace of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PLACEHOLDER = "placeholder-0123456789abcdef"
# credentials and addresses servers ask for before they list (none is used: nothing is called)
SECRETS = """GITHUB_PERSONAL_ACCESS_TOKEN GITHUB_TOKEN GITLAB_PERSONAL_ACCESS_TOKEN BRAVE_API_KEY SLACK_BOT_TOKEN
GOOGLE_MAPS_API_KEY NOTION_TOKEN FIRECRAWL_API_KEY TAVILY_API_KEY EXA_API_KEY STRIPE_SECRET_KEY SUPABASE_ACCESS_TOKEN
SENTRY_ACCESS_TOKEN SENTRY_AUTH_TOKEN HEROKU_API_KEY PRIVATE_APP_ACCESS_TOKEN ES_API_KEY NEON_API_KEY CIRCLECI_TOKEN
FIGMA_API_KEY AIRTABLE_API_KEY HYPERBROWSER_API_KEY APIFY_TOKEN TWILIO_ACCOUNT_SID CONTENTFUL_MANAGEMENT_ACCESS_TOKEN
MAPBOX_ACCESS_TOKEN PAYPAL_ACCESS_TOKEN PERPLEXITY_API_KEY OCTOPUS_API_KEY AUTH0_TOKEN DATADOG_API_KEY DATADOG_APP_KEY
DD_API_KEY DD_APP_KEY PINECONE_API_KEY LINEAR_API_KEY UPSTASH_EMAIL UPSTASH_API_KEY LARA_ACCESS_KEY_ID
LARA_ACCESS_KEY_SECRET RAYGUN_PAT_TOKEN SANITY_PROJECT_ID SANITY_API_TOKEN BROWSERBASE_API_KEY BROWSERBASE_PROJECT_ID
E2B_API_KEY TODOIST_API_TOKEN CONFLUENCE_API_TOKEN JIRA_API_TOKEN ATLASSIAN_API_TOKEN PULUMI_ACCESS_TOKEN SNYK_TOKEN
GB_API_KEY LAUNCHDARKLY_API_KEY POSTHOG_API_KEY PLANE_API_KEY PLANE_WORKSPACE_SLUG CLICKUP_API_KEY CLICKUP_TEAM_ID
TRELLO_API_KEY TRELLO_TOKEN TRELLO_BOARD_ID GOOGLE_API_KEY GOOGLE_CSE_ID TWITTER_API_KEY TWITTER_API_SECRET
TWITTER_ACCESS_TOKEN TWITTER_ACCESS_TOKEN_SECRET CHANNEL_ACCESS_TOKEN DESTINATION_USER_ID AMAP_MAPS_API_KEY
BAIDU_MAP_API_KEY RAILWAY_API_TOKEN NETLIFY_PERSONAL_ACCESS_TOKEN RENDER_API_KEY DIGITALOCEAN_API_TOKEN GRAFANA_API_KEY
PADDLE_API_KEY CHARGEBEE_API_KEY MERCADOPAGO_ACCESS_TOKEN ADYEN_API_KEY VECTORIZE_ORG_ID VECTORIZE_TOKEN DISCORD_TOKEN
SLACK_MCP_XOXP_TOKEN ALCHEMY_API_KEY HEURIST_API_KEY OPENAI_API_KEY ANTHROPIC_API_KEY OBSIDIAN_API_KEY ZOTERO_API_KEY
KAGI_API_KEY OPENWEATHER_API_KEY NASA_API_KEY HOME_ASSISTANT_TOKEN HA_TOKEN HASS_TOKEN SNOWFLAKE_ACCOUNT SNOWFLAKE_USER
SNOWFLAKE_PASSWORD LANGFUSE_PUBLIC_KEY LANGFUSE_SECRET_KEY PAGERDUTY_API_KEY SPOTIFY_CLIENT_ID SPOTIFY_CLIENT_SECRET
REDDIT_CLIENT_ID REDDIT_CLIENT_SECRET TELEGRAM_API_HASH BLUESKY_IDENTIFIER BLUESKY_APP_PASSWORD
MASTODON_ACCESS_TOKEN""".split()  # noqa: SIM905 - a list of 100 names reads better as text
ENV = {**{key: PLACEHOLDER for key in SECRETS}, "SLACK_TEAM_ID": "T0123", "TELEGRAM_API_ID": "12345",
       "ZOTERO_LIBRARY_ID": "12345", "ELASTICSEARCH_URL": "http://127.0.0.1:9", "ES_URL": "http://127.0.0.1:9",
       "GRAFANA_URL": "http://127.0.0.1:9", "QDRANT_URL": "http://127.0.0.1:9", "AIRFLOW_HOST": "http://127.0.0.1:9",
       "JIRA_URL": "https://example.atlassian.net", "CONFLUENCE_URL": "https://example.atlassian.net/wiki",
       "JIRA_USERNAME": "a@example.com", "CONFLUENCE_USERNAME": "a@example.com", "ATLASSIAN_SITE_NAME": "example",
       "ATLASSIAN_USER_EMAIL": "a@example.com", "DT_ENVIRONMENT": "https://example.live.dynatrace.com",
       "COLLECTION_NAME": "docs"}
ARGS = {  # servers that take their folder, database or organisation as arguments ({tmp}: a scratch git repository)
    "@modelcontextprotocol/server-filesystem": ["{tmp}"], "mcp-server-git": ["--repository", "{tmp}"],
    "@modelcontextprotocol/server-postgres": ["postgresql://localhost/placeholder"],
    "@modelcontextprotocol/server-redis": ["redis://localhost:6399"],
    "mcp-server-sqlite": ["--db-path", "{tmp}/db.sqlite"], "chroma-mcp": ["--client-type", "ephemeral"],
    "@bytebase/dbhub": ["--dsn", "sqlite:///{tmp}/db.sqlite"], "mcp-server-motherduck": ["--db-path", ":memory:"],
    "@supabase/mcp-server-supabase": ["--access-token", PLACEHOLDER], "basic-memory": ["mcp"],
    "@stripe/mcp": ["--tools=all", "--api-key=sk_test_placeholder"], "@azure-devops/mcp": ["example-org"]}
GENERIC = {"server", "mcp", "dev", "docs", "cli", "sdk", "srv"}  # a package name that says nothing: its scope instead


def candidates() -> list[tuple[str, str]]:
    """(registry, package) of candidates.txt."""
    found, registry = [], ""
    for line in (HERE / "candidates.txt").read_text().splitlines():
        if line.startswith("# "):
            registry = line[2:].strip()
        elif line.strip():
            found.append((registry, line.strip()))
    return found


def folder(root: Path, registry: str, package: str) -> Path:
    return root / registry / re.sub(r"[@/]", "_", package)


def install(root: Path) -> None:
    def one(candidate: tuple[str, str]) -> str:
        registry, package = candidate
        where = folder(root, registry, package)
        where.mkdir(parents=True, exist_ok=True)
        if registry == "npm":
            cmd = ["npm", "install", "--prefix", str(where), "--no-audit", "--no-fund", "--ignore-scripts", package]
        else:
            subprocess.run(["uv", "venv", "-q", "-p", "3.11", str(where / "venv")], check=False)
            cmd = ["uv", "pip", "install", "-q", "--python", str(where / "venv/bin/python"), package]
        done = subprocess.run(cmd, capture_output=True, timeout=400).returncode == 0
        (where / "installed").write_text("yes" if done else "no")
        return f"{'ok  ' if done else 'FAIL'} {registry} {package}"

    with ThreadPoolExecutor(4) as pool:
        for line in pool.map(one, candidates()):
            print(line)


def command(where: Path, registry: str, package: str) -> tuple[str, str]:
    """The server's command and where it came from ("npm name@version", "PyPI name==version")."""
    if registry == "npm":
        meta = json.loads((where / "node_modules" / package / "package.json").read_text())
        bins = meta.get("bin")
        binary = meta["name"].split("/")[-1] if isinstance(bins, str) else \
            sorted(bins, key=lambda k: ("mcp" not in k, len(k)))[0]
        return str(where / "node_modules/.bin" / binary), f"npm {meta['name']}@{meta['version']}"
    wanted = re.sub(r"[-_.]+", "_", package).lower()
    for info in (where / "venv/lib").glob("python3.*/site-packages/*.dist-info"):
        name, version = info.name.removesuffix(".dist-info").rsplit("-", 1)
        if re.sub(r"[-_.]+", "_", name).lower() == wanted:
            text = (info / "entry_points.txt").read_text() if (info / "entry_points.txt").exists() else ""
            scripts = [line.split("=")[0].strip() for line in text.split("[console_scripts]")[-1].splitlines()
                       if "=" in line and "[console_scripts]" in text]
            if scripts:
                script = sorted(scripts, key=lambda s: (s != package, "mcp" not in s, len(s)))[0]
                return str(where / "venv/bin" / script), f"PyPI {package}=={version}"
    raise LookupError(f"{package}: no console script")


def namespace(package: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "_", package.split("/")[-1].lower())
    name = re.sub(r"^(mcp_server_|server_|mcp_)|(_mcp_server|_mcp|_server)$", "", name).strip("_")
    if not name or name in GENERIC:
        name = re.sub(r"[^a-z0-9]+", "_", package.lstrip("@").split("/")[0].lower()).strip("_")
    return name[:24]


def list_one(root: Path, registry: str, package: str) -> str:
    """The server's tools as a toolcrib host serves them, to ``listed.json`` in its folder."""
    where = folder(root, registry, package)
    cmd, origin = command(where, registry, package)
    tmp = tempfile.mkdtemp()
    subprocess.run(["git", "init", "-q", tmp], check=True)
    ns = namespace(package)
    config = Path(tmp) / "harvest.toml"
    config.write_text("\n".join([
        "[agents.all]", "permissions = { mcps = { allow = ['*'] }, tools = { allow = ['*'] } }", "",
        f"[mcps.{ns}_upstream]", f"command = {json.dumps(cmd)}",
        f"args = {json.dumps([arg.format(tmp=tmp) for arg in ARGS.get(package, [])])}",
        "env = { " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in {**ENV, "HOME": tmp}.items()) + " }",
        "timeout = 60", ""]))
    os.environ["TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    from toolcrib.mcp.connect import open_host

    with open_host(config, env={}) as (host, _):
        tools = [t for t in host.view("all").mcp_tools if t["name"].startswith(f"{ns}_upstream__")]
    tools = [{**t, "name": t["name"].split("__", 1)[1]} for t in tools]
    (where / "listed.json").write_text(json.dumps({"origin": origin, "namespace": ns, "tools": tools}))
    return f"{package}: {len(tools)} tools"


def list_all(root: Path) -> None:
    installed = [(r, p) for r, p in candidates() if (folder(root, r, p) / "installed").read_text() == "yes"]
    with ThreadPoolExecutor(3) as pool:  # each in a process of its own: a server that hangs holds up nothing else
        for line in pool.map(lambda c: subprocess.run(
                [sys.executable, __file__, "list-one", str(root), *c], capture_output=True, text=True,
                timeout=200).stdout.strip() or f"{c[1]}: did not list", installed):
            print(line)


def merge(root: Path) -> None:
    current: dict[str, Any] = json.loads((HERE / "tools.json").read_text())
    sources, tools = dict(current["sources"]), list(current["tools"])
    have = {re.split(r"@(?=[0-9])|==", origin.split(" ", 1)[1])[0] for origin in sources.values()}
    for registry, package in candidates():
        listed = folder(root, registry, package) / "listed.json"
        if package in have or not listed.exists() or not json.loads(listed.read_text())["tools"]:
            continue
        found = json.loads(listed.read_text())
        ns, n = found["namespace"], 2
        while ns in sources:
            ns, n = f"{found['namespace']}{n}", n + 1
        sources[ns] = found["origin"]
        tools += [{**tool, "name": f"{ns}__{tool['name']}"} for tool in found["tools"]]
    lines = ",\n".join(json.dumps(tool, sort_keys=True, ensure_ascii=False) for tool in tools)
    (HERE / "tools.json").write_text(f'{{"sources": {json.dumps(dict(sorted(sources.items())), indent=1)},\n'
                                     f'"tools": [\n{lines}\n]}}\n')
    print(f"{len(tools)} tools from {len(sources)} sources")


if __name__ == "__main__":
    step, where = sys.argv[1], Path(sys.argv[2])
    if step == "list-one":
        print(list_one(where, sys.argv[3], sys.argv[4]))
    else:
        {"install": install, "list": list_all, "merge": merge}[step](where)

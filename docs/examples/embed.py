"""Using toolcrib from Python: the same config, packs, permissions and pipeline, without a server.

Run it next to a toolcrib.toml (docs/examples/embed.toml is one): python embed.py
"""

import anyio

import toolcrib

host = toolcrib.Host.from_config("embed.toml")  # or None: $TOOLCRIB_CONFIG, ./toolcrib.toml, built-in
view = host.view("reviewer")  # built once, then reused; UnknownAgentError if absent

for tool in view.tools:  # the agent's tools, in a stable order
    print(tool.name, "-", tool.description.splitlines()[0])

openai_tools = view.export("openai")  # or "openai-responses", "anthropic", "mcp"
print(openai_tools[0]["function"]["name"])
print([tool["name"] for tool in view.search("read a file", 2)])  # BM25 over what this agent sees


async def main() -> None:
    result = await view.call("fs__read_file", {"path": "embed.toml", "max_lines": 1})
    print(result.is_error, result.text.splitlines()[0])
    try:
        await view.call("fs__write_file", {"path": "x", "content": "y"})
    except toolcrib.UnknownToolError as exc:  # hidden tools do not exist for this agent
        print(exc)


anyio.run(main)

"""Packs in a process of their own (``[packs.<namespace>] isolate = true``).

The host never imports an isolated pack. Its upstream pool (``toolcrib.supply.mcp``) starts it as a confined
upstream stdio server instead: ``toolcrib serve`` in a child process, with a config of its own that loads that one
pack (``TOOLCRIB_PLUGINS``, no autoload) with the settings of its ``[packs.<namespace>]`` table and serves it, bare
named, to one agent that sees all of it. The host then offers the child's tools, resources and prompts under the
pack's namespace as the pack's own (the ``plugins`` rule governs them, their annotations are trusted), through the
same permissions, pipeline, curation, lock and audit as any source. The child is confined as a confined server is
(``toolcrib.supply.mcp.confinement``): it reads the system, the Python it runs on and the folders it imports from; it
writes only its temporary folder and the workspace; no network unless ``network = true``.

Its tool calls take a calls lane of their own (``toolcrib.supply.mcp.pack_calls``): a handler's progress, log messages,
questions (elicitation) and requests for a model's turn (sampling) reach the agent's client through the call's own
channel, and so do a call's ``remember`` and ``permits`` (answered for the calling agent, whose name the handler's
``ctx.agent`` is). Its availability checks and ``describe`` run in the child for the agent whose view the host
builds, asked over a line of their own (``toolcrib.supply.mcp.pack_checks``). ``subagent`` and ``server`` do not
cross yet (they answer None, as for an agent not permitted them): the limits of this form.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolcrib.config import LoadedConfig, PackConfig
from toolcrib.supply.mcp.confinement import pids_root
from toolcrib.supply.mcp.settings import McpConfig

if TYPE_CHECKING:
    from toolcrib.plugins import PluginRecord

ENTRY_POINT = "(isolated)"  # an isolated pack's record's, where an installed pack's names its entry point

CHILD_AGENT = "pack"  # the one agent a child serves
# tasks (processes and threads) an isolated pack's process may have at once, where they can be counted in a group
# of its own (``confinement.pids_root``); the per-user limit is not used, as it counts the user's others
PROCESSES = 256
START_SECONDS = 30.0  # for its process to start, import the pack and list it (one that hangs fails alone)
ISOLATED_ENV = "TOOLCRIB_ISOLATED_PACK"  # set for a child: the pack it serves (one that failed ends the child)
_WRITTEN: dict[tuple[str, str], Path] = {}  # (namespace, child config) -> the folder its file is in
# namespace -> "module" or "module:attr": a pack given by module rather than by entry point (the pack kit's,
# toolcrib.testing), which its process loads by that name
MODULES: dict[str, str] = {}


def _toml(value: Any) -> str:
    """A TOML value (JSON's string escapes are TOML's too)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()) + " }"
    raise ValueError(f"a setting of type {type(value).__name__} cannot be given to an isolated pack")


def child_config(loaded: LoadedConfig, namespace: str) -> str:
    """The config the child serves its pack with."""
    pack = loaded.config.packs.get(namespace) or PackConfig()
    lines = ["[host]", f"workspace = {json.dumps(str(loaded.workspace))}", "", f"[packs.{namespace}]"]
    lines += [f"{json.dumps(k)} = {_toml(v)}" for k, v in pack.settings.items()]
    lines += ["", f"[agents.{CHILD_AGENT}]", "bare_names = true", f"[agents.{CHILD_AGENT}.permissions]",
              f'plugins = {{ allow = ["{namespace}"] }}', 'tools = { allow = ["*"] }',
              'resources = { allow = ["*"] }', 'prompts = { allow = ["*"] }', ""]
    return "\n".join(lines)


def import_paths() -> list[str]:
    """The folders this Python imports from (``sys.path``, existing ones): the child imports from the same."""
    return [p for p in dict.fromkeys(os.path.abspath(p) for p in sys.path if p) if os.path.isdir(p)]


def server_config(loaded: LoadedConfig, namespace: str) -> McpConfig:
    """The isolated pack as a confined upstream stdio server (its config file written to a folder of its own)."""
    pack = loaded.config.packs.get(namespace) or PackConfig()
    text = child_config(loaded, namespace)
    key = (namespace, text)
    if key not in _WRITTEN:  # the same config, the same file: a reload keeps the child running
        folder = Path(tempfile.mkdtemp(prefix=f"toolcrib-pack-{namespace}-"))
        (folder / "toolcrib.toml").write_text(text, encoding="utf-8")
        atexit.register(shutil.rmtree, folder, True)  # gone with this process
        _WRITTEN[key] = folder
    folder = _WRITTEN[key]
    path = folder / "toolcrib.toml"
    paths = import_paths()
    target = f"{namespace}={MODULES[namespace]}" if namespace in MODULES else namespace
    env = {"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": target, ISOLATED_ENV: namespace,
           "PYTHONPATH": os.pathsep.join(paths)}
    # warnings only: a line on stderr per request would cost each call a write and the host a read
    return McpConfig(command=sys.executable, args=["-m", "toolcrib", "serve", "--agent", CHILD_AGENT, "--config",
                                                   str(path), "--no-reload", "--log-level", "warning"],
                     env=env, trusted=True, confine=True, network=pack.network,
                     processes=PROCESSES if pids_root() is not None else None, timeout=START_SECONDS,
                     read=[str(folder), sys.prefix, sys.base_prefix, *paths], write=[str(loaded.workspace)])


__all__ = ["CHILD_AGENT", "ISOLATED_ENV", "MODULES", "PROCESSES", "child_config", "server_config"]


def unserved(loaded: LoadedConfig, given: Collection[str]) -> list[PluginRecord]:
    """A failed record for each isolated pack a host was given no source for (``given``: its sources' names): an
    isolated pack runs only where a pool starts its process."""
    from toolcrib.plugins import PluginRecord

    found = []
    for namespace in sorted(loaded.isolated_packs() - set(given)):
        record = PluginRecord(name=namespace, kind="pack", state="failed", entry_point=ENTRY_POINT)
        record.error = ("an isolated pack is served by toolcrib serve (and the CLI's commands), which start its "
                        "process; this host was given no source for it")
        found.append(record)
    return found

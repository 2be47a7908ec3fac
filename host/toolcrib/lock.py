"""The definition lock, ``toolcrib.lock`` beside the config: what each tool looked like when the operator reviewed
it, so that a pack upgrade or an upstream server that redefines a tool ("rug pull") is caught.

``toolcrib lock`` records, for every tool the config can serve, a hash of what an agent sees (served name, title,
description, input and output schema, annotations) with its source and version, and a hash of each of those parts
(to say what changed). With a lock present, a tool whose definition differs is held back: it answers like a tool
that does not exist until the operator locks again; a tool the lock does not know is served, unless
``[host] lock = "strict"``.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal

from toolcrib.config import LOCK_FILE, LoadedConfig
from toolcrib.entries import BUILTIN, Entry
from toolcrib.errors import ConfigError, Problem
from toolcrib.names import clean, clean_schema

FORMAT = 1
# what an agent sees, then what a call does when the tool's runner says (``runs``: an HTTP operation's route)
PARTS = ("name", "title", "description", "inputSchema", "outputSchema", "annotations", "runs")


def definition(entry: Entry) -> dict[str, Any]:
    """What an agent sees of the tool, as the lock hashes it (a description written per agent is not in it)."""
    tool = entry.tool
    seen = {
        "name": entry.name,
        "title": clean(tool.title) if tool.title else None,
        "description": clean(tool.description),
        "inputSchema": clean_schema(tool.input_schema),
        "outputSchema": clean_schema(tool.output_schema) if tool.output_schema is not None else None,
        "annotations": dict(tool.annotations),
    }
    runs = getattr(tool.runner, "runs", None)  # what a call does, when its runner says (an HTTP operation's route)
    if runs is not None:
        seen["runs"] = runs
    return seen


def _hash(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def record(entry: Entry) -> dict[str, Any]:
    """The lock's record of one tool."""
    seen = definition(entry)
    return {"source": entry.source, "kind": entry.supplier.name, "version": entry.version, "sha256": _hash(seen),
            "parts": {part: _hash(seen[part])[:16] for part in PARTS if part in seen}}


def path_of(loaded: LoadedConfig) -> Path | None:
    """Where the config's lock lives: beside the config file (None for a config that was not read from a file, such
    as the built-in default, which has no folder)."""
    return loaded.file.parent / LOCK_FILE if loaded.file is not None else None


def write(loaded: LoadedConfig, entries: Mapping[str, Entry]) -> tuple[Path, int]:
    """Lock every entry's definition; returns the file and how many tools it holds."""
    path = path_of(loaded)
    if path is None:
        raise ConfigError([Problem("error", loaded.source, "a lock is kept beside the config file, and this config "
                                   "was not read from a file; write one first: toolcrib init")])
    tools = {}
    for name, entry in sorted(entries.items()):
        try:
            tools[name] = record(entry)
        except Exception as exc:  # a tool whose schema cannot be built: check reports it; nothing to lock
            tools[name] = {"source": entry.source, "kind": entry.supplier.name, "version": entry.version,
                           "sha256": None, "unbuildable": str(exc)}
    data = {"toolcrib_lock": FORMAT, "tools": tools}
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    temporary.replace(path)  # whole or not at all: a reload never reads half a lock
    return path, len(tools)


def read(loaded: LoadedConfig) -> dict[str, Any] | None:
    """The lock's tools, or None when there is no lock. A lock that cannot be read is a ``ConfigError``: serving
    without the protection the operator asked for would be worse than not starting."""
    path = path_of(loaded)
    if path is None or not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError([Problem("error", str(path), f"cannot be read ({exc}); write it again with toolcrib "
                                   "lock")]) from None
    if not isinstance(data, dict) or data.get("toolcrib_lock") != FORMAT or not isinstance(data.get("tools"), dict):
        raise ConfigError([Problem("error", str(path), f"is not a toolcrib lock of format {FORMAT}; write it again "
                                   "with toolcrib lock")])
    tools: dict[str, Any] = data["tools"]
    return tools


# Without a lock file: (config, tool, the operator's curation of it) -> the record of an untrusted upstream server's
# tool as this process first saw it. Kept for the life of the process, across reloads.
_FIRST_SEEN: dict[tuple[str, str, tuple[str, ...]], dict[str, Any]] = {}
_FIRST_SEEN_LOCK = threading.Lock()
# What a held definition is compared with, as explain and as check say it
_SINCE = {"lock": ("since toolcrib.lock", "since the lock"),
          "first seen": ("since toolcrib first saw it (there is no toolcrib.lock)",) * 2}


def first_seen(loaded: LoadedConfig, entries: Mapping[str, Entry], pinned: Collection[str]) -> dict[str, Any]:
    """For a config without a lock: the tools of the ``pinned`` sources (each source's record says whether it is:
    an upstream server or an OpenAPI document the operator did not mark ``trusted`` or ``follow_changes``) as this
    process first saw them, in the lock's shape. Those seen for the first time are recorded as they are now; a later
    definition that differs is then held back as a lock would hold it (a rug pull is caught even before anyone ran
    ``toolcrib lock``)."""
    found: dict[str, Any] = {}
    with _FIRST_SEEN_LOCK:
        for name, entry in entries.items():
            if entry.source not in pinned:
                continue
            # what the operator changed of it is part of the key: a change of curation is not the server's
            curated = entry.curation.changes if entry.curation is not None else ()
            key = (str(loaded.path or loaded.source), name, curated)
            if key not in _FIRST_SEEN:
                try:
                    _FIRST_SEEN[key] = record(entry)
                except Exception:
                    continue  # a tool whose schema cannot be built: check reports it
            found[name] = _FIRST_SEEN[key]
    return found


def held_back(locked: Mapping[str, Any] | None, entries: Mapping[str, Entry], strict: bool,
              where: str, against: Literal["lock", "first seen"] = "lock") -> tuple[dict[str, str], list[Problem]]:
    """The tools the lock holds back, each with why (for ``explain``), and a problem for each (for ``check``, the
    log and ``plugins``). ``against``: what ``locked`` is, the lock file or ``first_seen``."""
    since, since_lock = _SINCE[against]
    if locked is None:
        return {}, []
    held: dict[str, str] = {}
    problems = []
    for name, entry in entries.items():
        known = locked.get(name)
        if known is None:
            if strict:
                held[name] = "toolcrib.lock does not know it, and [host] lock is \"strict\"; toolcrib lock accepts it"
                problems.append(Problem("error", where, f"{name} ({_from(entry)}) is new since the lock; it is held "
                                        "back until toolcrib lock accepts it"))
            continue
        try:
            now = record(entry)
        except Exception:
            continue  # a tool whose schema cannot be built: check reports that on its own
        if now["sha256"] == known.get("sha256"):
            continue
        before = known.get("parts") if isinstance(known.get("parts"), dict) else {}
        changed = [part for part in PARTS if before.get(part) != now["parts"].get(part)] or ["its definition"]
        versions = ""
        if known.get("version") != entry.version:
            versions = f" (locked at {known.get('source')} {known.get('version') or '?'}, now {entry.version or '?'})"
        held[name] = (f"its definition changed {since}: {', '.join(changed)}{versions}; toolcrib lock accepts it")
        problems.append(Problem("error", where, f"{name} ({_from(entry)}) changed {since_lock}: "
                                f"{', '.join(changed)}{versions}; it is held back until toolcrib lock accepts it"))
    return held, problems


def hold(loaded: LoadedConfig, entries: Mapping[str, Entry],
         pinned: Collection[str] = ()) -> tuple[dict[str, str], list[Problem]]:
    """What the config's lock holds back of ``entries`` (what it says changed, and, when strict, what it does not
    know), each with why; without a lock, what changed since this process first saw the tools of the ``pinned``
    sources (by name: those whose record is ``pinned``). The one answer for the catalog at a host's start and for a
    lazy server's tools when an agent loads them."""
    locked = read(loaded)
    if locked is None:
        return held_back(first_seen(loaded, entries, pinned), entries, False, loaded.source, "first seen")
    return held_back(locked, entries, loaded.config.host.lock == "strict", str(path_of(loaded)))


def _from(entry: Entry) -> str:
    return f"{entry.supplier.label} {entry.source!r}" if entry.supplier is not BUILTIN \
        else "the host's own"

"""Operator curation of any tool, of any source (``[tools."<namespace>__<tool>"]``): serve it under another name in
its namespace, with another description or title, with annotations the operator vouches for, and with arguments
fixed to a value (gone from the schema) or given a default.

A curated tool is an ordinary catalog entry under its served name: permission rules, the audit log and every
interface use that name. The arguments a call gives are completed (defaults) and fixed (values) before the pipeline
validates them, so hooks, argument rules and the handler see what really runs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from toolcrib.config import LoadedConfig, ToolCuration, key_path
from toolcrib.entries import Entry
from toolcrib.errors import Problem
from toolcrib.names import SEPARATOR, full_name


@dataclasses.dataclass(frozen=True, slots=True)
class Curation:
    """What the operator changed of one tool: ``original`` is the full name its source serves it under."""

    original: str
    fixed: Mapping[str, Any]
    defaults: Mapping[str, Any]
    changes: tuple[str, ...]  # each change, as ``explain`` shows it

    def apply(self, arguments: Any) -> tuple[Any, str | None]:
        """The call's arguments with the defaults and fixed values in; or a problem (a fixed argument given)."""
        if not isinstance(arguments, dict):
            return arguments, None  # not an object: the pipeline's validation says so
        given = sorted(name for name in self.fixed if name in arguments)
        if given:
            return arguments, f"{', '.join(given)}: unknown argument (fixed by the operator)"
        return {**self.defaults, **arguments, **self.fixed}, None


def curate(entries: Mapping[str, Entry], loaded: LoadedConfig,
           unlisted: frozenset[str] = frozenset()) -> tuple[dict[str, Entry], list[Problem]]:
    """``entries`` as the operator's ``[tools.*]`` tables serve them. A table naming no tool, an argument the tool
    does not take, a fixed value its schema refuses: errors, and that table is not applied. Two tools served under
    one name: errors, and neither is served. Tables for the namespaces in ``unlisted`` (lazy servers, whose tools
    are listed only when an agent loads them) are not missed."""
    curations = loaded.config.tools
    if not curations:
        return dict(entries), []
    problems: list[Problem] = []
    curated: dict[str, Entry] = {}
    for name, spec in curations.items():
        entry = entries.get(name)
        where = f"{loaded.source}: {key_path(('tools', name))}"
        if entry is None and name.partition(SEPARATOR)[0] in unlisted:
            continue
        if entry is None:
            problems.append(Problem("error", where, f"no installed source offers a tool named {name!r} (the name to "
                                                    "give is the one its source serves it under)"))
            continue
        made = _curated(entry, spec, where, problems)
        if made is not None:
            curated[name] = made
    served: dict[str, Entry] = {}
    claims: dict[str, list[str]] = {}
    for name, entry in entries.items():
        entry = curated.get(name, entry)
        claims.setdefault(entry.name, []).append(name)
        served[entry.name] = entry
    for served_name, originals in sorted(claims.items()):
        if len(originals) > 1:
            problems.append(Problem("error", f"{loaded.source}: tools", (
                f"{', '.join(sorted(originals))} would all be served as {served_name!r}; none of them is served: "
                "rename one")))
            del served[served_name]
    return {name: served[name] for name in sorted(served)}, problems


def _curated(entry: Entry, spec: ToolCuration, where: str, problems: list[Problem]) -> Entry | None:
    tool = entry.tool
    changes = []
    updates: dict[str, Any] = {}
    served = entry.name
    if spec.name is not None and spec.name != tool.name:
        served = full_name(entry.namespace, spec.name)
        updates["name"] = spec.name
        changes.append(f"served as {served} (its source serves it as {entry.name})")
    if spec.description is not None:
        updates["description"] = spec.description
        updates["describe"] = None
        changes.append("description replaced")
    if spec.title is not None:
        updates["title"] = spec.title
        changes.append("title replaced")
    if spec.keywords:
        updates["keywords"] = (*tool.keywords, *spec.keywords)
        changes.append("search keywords added: " + ", ".join(spec.keywords))
    if spec.task is not None and spec.task != tool.task:
        updates["task"] = spec.task
        changes.append(f"runs as an MCP task: {spec.task} (its source says {tool.task})")
    trusted = entry.trusted
    if spec.annotations:
        updates["annotations"] = {**tool.annotations, **spec.annotations}
        trusted = True  # the operator vouches for the annotations as they end up
        changes.append("annotations set: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in spec.annotations.items()))
    fixed: dict[str, Any] = {}
    defaults: dict[str, Any] = {}
    if spec.arguments:
        try:
            schema = copy.deepcopy(dict(tool.input_schema))
        except Exception as exc:
            problems.append(Problem("error", where, f"the tool's input schema cannot be built ({exc}), so its "
                                                    "arguments cannot be curated"))
            return None
        properties = schema.setdefault("properties", {})
        required = list(schema.get("required", []))
        for argument, change in spec.arguments.items():
            at = f"{where}.arguments.{argument}"
            if argument not in properties:
                takes = ", ".join(properties) or "none"
                problems.append(Problem("error", at, f"{entry.name} takes no argument {argument!r} (it takes: "
                                                     f"{takes})"))
                return None
            if change.value is not None:
                problem = _refused(schema, argument, change.value)
                if problem is not None:
                    problems.append(Problem("error", f"{at}.value", f"{change.value!r} is not a value the tool "
                                                                    f"takes: {problem}"))
                    return None
                fixed[argument] = change.value
                del properties[argument]
                required = [r for r in required if r != argument]
                changes.append(f"argument {argument} fixed to {json.dumps(change.value)}")
                continue
            if change.default is not None:
                problem = _refused(schema, argument, change.default)
                if problem is not None:
                    problems.append(Problem("error", f"{at}.default", f"{change.default!r} is not a value the tool "
                                                                      f"takes: {problem}"))
                    return None
                defaults[argument] = change.default
                properties[argument] = {**properties[argument], "default": change.default}
                required = [r for r in required if r != argument]
                changes.append(f"argument {argument} defaults to {json.dumps(change.default)}")
            if change.description is not None:
                properties[argument] = {**properties[argument], "description": change.description}
                changes.append(f"argument {argument} described anew")
        if required:
            schema["required"] = required
        else:
            schema.pop("required", None)
        updates["given_input_schema"] = schema
    if not changes:
        return entry
    curation = Curation(original=entry.name, fixed=fixed, defaults=defaults, changes=tuple(changes))
    return dataclasses.replace(entry, name=served, definition=dataclasses.replace(tool, **updates), trusted=trusted,
                               curation=curation)


def _refused(schema: Mapping[str, Any], argument: str, value: Any) -> str | None:
    """Why the tool's schema refuses ``value`` for ``argument``, or None."""
    from jsonschema import validators  # type: ignore[import-untyped]  # no stubs

    probe = {k: v for k, v in schema.items() if k not in ("properties", "required", "additionalProperties")}
    probe.update({"type": "object", "properties": {argument: schema["properties"][argument]}})
    validator = validators.validator_for(probe, default=validators.Draft202012Validator)(probe)
    error = next(iter(validator.iter_errors({argument: value})), None)
    return error.message if error is not None else None


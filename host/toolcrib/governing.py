"""What governs the host, derived from the config's model: every file the config makes the host read or run.

A config field that names such a file carries a ``Governs`` marker in its metadata; a table that starts a program
(a command hook, an upstream stdio server) says what it launches (``Launch``). ``governing`` walks a validated
config and returns every path found, so a field added later with the marker is protected without anyone listing
it by hand. For a program, the code it runs is found from its command line: the program named by path, the script
given to an interpreter, a ``python -m`` module in the working directory and on ``PYTHONPATH``, and every folder
Python imports modules from (``toolcrib.workspace.protect_code``). A shell string (``sh -c ...``, ``python -c ...``)
cannot be followed: ``Code.opaque`` says so, and the host treats such a hook as it must (see ``default_plugins.hooks``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel


@dataclass(frozen=True)
class Governs:
    """Marks a config field (``Annotated[str | None, Governs("the audit log")]``) whose value names a file or folder
    the host reads or runs, so no tool may change it. ``what`` may use ``{key}`` (the key of the table the field
    is in) and ``{name}`` (the file's own name)."""

    what: str


@dataclass(frozen=True)
class Launch:
    """A program the config makes the host start: its command line, working directory and added environment."""

    where: str  # the key path of the table, "hooks.pre_tool_use[0]"
    command: Sequence[str]
    cwd: Path
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Code:
    """The code a command runs, as far as its command line tells."""

    files: list[Path] = field(default_factory=list)  # programs and scripts, protected by name (they need not exist)
    module_paths: list[Path] = field(default_factory=list)  # folders Python imports modules from
    opaque: str | None = None  # why the code cannot be located (a string of code on the command line)


_PYTHON = re.compile(r"(python|pypy)(\d+(\.\d+)*)?[a-z]?(\.exe)?")
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "busybox"})
# interpreter -> the options after which code, not a file, comes
_CODE_OPTIONS: dict[str, tuple[str, ...]] = {
    "node": ("-e", "--eval", "-p", "--print"), "nodejs": ("-e", "--eval", "-p", "--print"),
    "bun": ("-e", "--eval", "-p", "--print"), "deno": ("eval",), "perl": ("-e", "-E"), "ruby": ("-e",),
    "php": ("-r",), "lua": ("-e",), "Rscript": ("-e",), "osascript": ("-e",), "tclsh": (), "awk": (),
}
_PYTHON_VALUE_OPTIONS = frozenset({"--check-hash-based-pycs"})  # long options that take the next word


def analyse(command: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Code:
    """What ``command`` (run in ``cwd`` with ``env``) runs: see ``Code``. Paths are absolute and not resolved, so
    that protection can follow each link on the way (``toolcrib.workspace.names_of``)."""
    code = Code()
    words = list(command)
    while words and os.path.basename(words[0]) == "env":
        read = _env(words[1:], cwd, env)
        if isinstance(read, str):
            code.opaque = read
            return code
        words, cwd, env = read
    code.files.extend(_env_files(env, cwd))
    if not words:
        return code
    program, rest = words[0], words[1:]
    if "/" in program:
        code.files.append(_absolute(cwd, program))
    name = os.path.basename(program)
    if _PYTHON.fullmatch(name):
        _python(rest, cwd, env, code)
    elif name in _SHELLS or name in _CODE_OPTIONS:
        _interpreter(name, rest, cwd, code)
    else:
        code.files.extend(_path_arguments(rest, cwd))
    return code


def _env(words: list[str], cwd: Path, env: Mapping[str, str]) -> tuple[list[str], Path, Mapping[str, str]] | str:
    """``env [OPTION]... [NAME=VALUE]... [PROGRAM ARGS]`` as GNU env reads it: the words after it, the working
    directory and the environment the program gets (``-i`` empties it, ``-u`` unsets, ``-C`` changes directory),
    or why the program cannot be followed (``-S`` splits a string into words)."""
    env = dict(env)
    while words:
        word, words = words[0], words[1:]
        if word == "--":
            break
        if word == "-":  # -i, as old envs spell it
            env = {}
            continue
        if not word.startswith("-"):
            if "=" not in word:
                return [word, *words], cwd, env
            name, value = word.split("=", 1)
            env[name] = value
            continue
        if word == "--ignore-environment":
            env = {}
            continue
        letter, value, joined = "", "", ""  # an option that takes a value: its letter, the value, given joined?
        if word.startswith("--"):
            option, joined, value = word.partition("=")
            letter = _ENV_LONG.get(option, "")
        else:
            for i, one in enumerate(word[1:], start=1):
                if one == "i":
                    env = {}
                if one in "uCSa":
                    letter, value = one, word[i + 1:]
                    joined = value
                    break
        if letter and not joined:
            value, words = "".join(words[:1]), words[1:]
        if letter == "S":
            return "env -S runs a string of words toolcrib cannot follow"
        if letter == "u":
            env.pop(value, None)
        elif letter == "C":
            cwd = _absolute(cwd, value)
    return words, cwd, env


_ENV_LONG = {"--unset": "u", "--chdir": "C", "--split-string": "S", "--argv0": "a"}


def _python(rest: list[str], cwd: Path, env: Mapping[str, str], code: Code) -> None:
    """Python's command line as its own option parser reads it: one-letter options may be joined (``-Bm mod``),
    ``-m``, ``-c``, ``-W`` and ``-X`` take the rest of the word or the next one."""
    flags: set[str] = set()  # I (isolated), P (safe path), E (no PYTHON* variables), ...
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "-":  # the program comes on standard input
            break
        if word.startswith("--"):
            i += 2 if word in _PYTHON_VALUE_OPTIONS else 1
            continue
        if not word.startswith("-"):
            script = _absolute(cwd, word)
            code.files.append(script)
            code.module_paths = _python_path(script.parent, cwd, env, flags)
            code.files.extend(_path_arguments(rest[i + 1:], cwd))
            return
        for j, letter in enumerate(word[1:], start=1):
            value = word[j + 1:] or (rest[i + 1] if i + 1 < len(rest) else "")
            consumed = 0 if word[j + 1:] else 1
            if letter == "c":
                code.module_paths.extend(_python_path(cwd, cwd, env, flags))
                code.opaque = "python -c runs a string of code toolcrib cannot follow"
                return
            if letter == "m":
                if not value:  # python refuses to start: it runs nothing
                    return
                roots = _python_path(cwd, cwd, env, flags)
                code.module_paths.extend(roots)
                top = value.split(".")[0]
                for root in roots:
                    code.files += [root / f"{top}.py", root / top]  # a module, or a package folder, by that name
                code.files.extend(_path_arguments(rest[i + 1 + consumed:], cwd))
                return
            if letter in ("W", "X"):
                i += consumed
                break
            flags.add(letter)
        i += 1
    code.opaque = "python without a script reads its code from standard input"


def _python_path(first: Path, cwd: Path, env: Mapping[str, str], flags: set[str]) -> list[Path]:
    """Where a Python looks for modules before its own library: ``first`` (the script's folder, or the working
    directory for ``-m`` and ``-c``) unless ``-P``, ``-I`` or ``PYTHONSAFEPATH`` leave it out, then ``PYTHONPATH``
    (relative to ``cwd``) unless ``-E`` or ``-I`` ignore the environment."""
    ignore_env = "E" in flags or "I" in flags
    safe = "P" in flags or "I" in flags or (not ignore_env and bool(env.get("PYTHONSAFEPATH")))
    found = [] if safe else [Path(os.path.abspath(first))]
    if not ignore_env:
        found += [_absolute(cwd, p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    return found


def _interpreter(name: str, rest: list[str], cwd: Path, code: Code) -> None:
    """A shell's or another interpreter's command line: options (and their values) up to the script; ``--`` ends
    them, ``-`` (or none) reads the code from standard input, a code option (``-c``, ``-e``) gives it as a string."""
    code_options = _CODE_OPTIONS.get(name, ())
    shell = name in _SHELLS
    i = 0
    while i < len(rest):
        word = rest[i]
        if word == "-":
            break
        if word == "--":
            i += 1
            if i < len(rest):
                break  # what follows is the script, whatever it looks like
            continue
        if shell and word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            code.opaque = f"{name} -c runs a string of commands toolcrib cannot follow"
            return
        if word in code_options or any(word.startswith(f"{o}=") for o in code_options if o.startswith("--")):
            code.opaque = f"{name} {word} runs a string of code toolcrib cannot follow"
            return
        if not word.startswith(("-", "+")):
            break
        if shell:  # -o and -O (alone or last in a cluster) and --rcfile take the next word
            i += 2 if word in ("--rcfile", "--init-file") or (word[1] != "-" and word[-1] in "oO") else 1
            continue
        option, _, joined = word.partition("=") if word.startswith("--") else (word[:2], "", word[2:])
        loads = _LOADS.get(name, {}).get(option)
        takes = loads is not None or option in _VALUE_OPTIONS.get(name, ())
        value = joined or ("".join(rest[i + 1:i + 2]) if takes else "")
        if loads == "file" and value.startswith((".", "/")):  # a path, not a package name
            code.files.append(_absolute(cwd, value))
        elif loads == "folder" and value:
            code.module_paths.append(_absolute(cwd, value))
        i += 2 if takes and not joined else 1
    else:
        code.opaque = f"{name} without a script reads its code from standard input"
        return
    if rest[i] == "-":
        code.opaque = f"{name} without a script reads its code from standard input"
        return
    code.files.append(_absolute(cwd, rest[i]))
    code.files.extend(_path_arguments(rest[i + 1:], cwd))


# interpreter -> its options that take a value (joined, or the next word)
_VALUE_OPTIONS: dict[str, tuple[str, ...]] = {"node": ("-C", "--conditions"), "nodejs": ("-C", "--conditions"),
                                              "ruby": ("-r",)}
_NODE_LOADS = dict.fromkeys(("-r", "--require", "--import", "--loader", "--experimental-loader"), "file")
# interpreter -> its options whose value is code it loads: a file by path, or a folder it imports modules from
_LOADS: dict[str, dict[str, str]] = {"node": _NODE_LOADS, "nodejs": _NODE_LOADS, "bun": _NODE_LOADS,
                                     "perl": {"-I": "folder"}, "ruby": {"-I": "folder"}}


# Environment variables whose value names code a program loads before its own: the dynamic linker's preloads, the
# start-up file a non-interactive bash or sh reads, Node's --require and --import.
_CODE_VARIABLES = ("LD_PRELOAD", "BASH_ENV", "ENV")


def _env_files(env: Mapping[str, str], cwd: Path) -> Iterator[Path]:
    """The files a program's environment makes it load (``LD_PRELOAD``, ``BASH_ENV``, ``ENV``, and the modules
    ``NODE_OPTIONS`` requires or imports)."""
    for variable in _CODE_VARIABLES:
        for word in env.get(variable, "").replace(":", " ").split():
            yield _absolute(cwd, word)
    words = env.get("NODE_OPTIONS", "").split()
    for i, word in enumerate(words):
        name, _, value = word.partition("=")
        if name in _NODE_LOADS:
            target = value or "".join(words[i + 1:i + 2])
            if target.startswith((".", "/")):  # a path, not a package name
                yield _absolute(cwd, target)


def _path_arguments(words: Iterable[str], cwd: Path) -> Iterator[Path]:
    """The arguments that name files: an existing file, or a path (with a '/') that does not exist yet. A folder
    is not taken (a program given its data folder, or the workspace, must not freeze it)."""
    for word in words:
        if not word or word.startswith("-") or word.endswith("/") or "\x00" in word:
            continue
        path = _absolute(cwd, word)
        try:
            if path.is_dir():
                continue
            if path.is_file() or ("/" in word and not path.exists()):
                yield path
        except OSError:
            continue


def _absolute(base: Path, path: str) -> Path:
    return Path(os.path.abspath(os.path.join(base, os.path.expanduser(path))))


def unlocated(where: str, command: Sequence[str], cwd: Path, env: Mapping[str, str], workspace: Path,
              vouched: bool) -> str | None:
    """Why a hook must not start: its code cannot be located from its command line (a shell string), so it cannot
    be protected, and its working directory lies in the workspace, where an agent could write what it runs. None
    when it may start: its code is located (and protected), it runs outside the workspace, or the operator vouches
    for it (``vouched``: ``out_of_reach = true``)."""
    opaque = analyse(command, cwd, env).opaque
    if opaque is None or vouched:
        return None
    ws, real = os.path.realpath(workspace), os.path.realpath(cwd)
    if os.path.commonpath([ws, real]) != ws:  # outside the workspace
        return None
    return (f"{where} does not start: {opaque}, and it runs in {real}, inside the workspace, where an agent could "
            "write what it runs; move it out of the workspace, name its script by path, or set out_of_reach = true "
            "if its code is out of every agent's reach")


# -- walking the config ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """One thing that governs the host: a path (or the folder of a module path) and what it is."""

    path: Path
    what: str
    kind: Literal["path", "code"] = "path"


def governing(model: BaseModel, base_dir: Path, env: Mapping[str, str]) -> tuple[list[Found], list[tuple[str, str]]]:
    """Everything a validated config names that governs the host, and the programs whose code cannot be located
    (key path, why). Paths are relative to ``base_dir``; ``env`` is the host's environment (what programs get)."""
    found: list[Found] = []
    opaque: list[tuple[str, str]] = []
    for node, key, where in _tables(model, None, ""):
        for name, info in type(node).model_fields.items():
            marks = [m for m in info.metadata if isinstance(m, Governs)]
            value = getattr(node, name)
            if not marks or value is None:
                continue
            for text in value if isinstance(value, list) else [value]:
                path = _absolute(base_dir, text)
                found.append(Found(path, marks[0].what.format(key=key, name=path.name)))
        launches = getattr(node, "launches", None)
        for launch in launches(where, base_dir, env) if callable(launches) else ():
            code = analyse(launch.command, launch.cwd, launch.env)
            found += [Found(path, f"a program of {launch.where}") for path in code.files]
            found += [Found(path, launch.where, "code") for path in code.module_paths]
            if code.opaque is not None:
                opaque.append((launch.where, code.opaque))
    return found, opaque


def _tables(node: Any, key: str | None, where: str) -> Iterator[tuple[BaseModel, str | None, str]]:
    """Every model in a config, with the key of the table it is (or None) and its key path."""
    if isinstance(node, BaseModel):
        yield node, key, where
        for name in type(node).model_fields:
            yield from _tables(getattr(node, name), key, f"{where}.{name}" if where else name)
    elif isinstance(node, dict):
        for k, value in node.items():
            yield from _tables(value, str(k), f"{where}.{k}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _tables(value, key, f"{where}[{i}]")

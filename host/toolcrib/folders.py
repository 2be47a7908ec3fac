"""Tool folders (``[host] tool_dirs``): tools too small to package, as seed 002 scans for user tools.

Each folder is a pack named after it (``tools/`` -> ``tools__<tool>``): every ``*.py`` file in it (not those whose
name starts with ``_``) is imported, and the functions it declares with ``@toolcrib.tool`` are the pack's tools.
The pack is like any other: the same naming, ``plugins`` permissions, availability checks, isolation (a file that
fails to import fails this pack, named with the file, and nothing else), and a row in ``toolcrib plugins``. The
folders are code the host runs, so they govern it: no tool may write in them (``toolcrib.workspace.protect``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from toolcrib.hookspecs import hookimpl
from toolcrib.plugins import Deferred, LoadError
from toolcrib.tool import get_tool


class FolderError(LoadError):
    """A file of a tool folder that cannot be imported."""


class FolderPack(Deferred):
    """The tools of one folder's Python files, as one pack."""

    distribution = "(tool folder)"

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = str(path)
        self.tools: list[Any] = []

    def load(self) -> FolderPack:
        """Import each file (sorted by name) and keep the tools it declares; raises ``FolderError`` naming the
        file that fails."""
        if not self.path.is_dir():
            raise FolderError(f"{self.path} is not a folder")
        for file in sorted(self.path.glob("*.py")):
            if file.name.startswith("_"):
                continue
            name = f"toolcrib_folder_{abs(hash(str(self.path))):x}_{file.stem}"
            spec = importlib.util.spec_from_file_location(name, file)
            if spec is None or spec.loader is None:
                raise FolderError(f"{file}: not importable")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # pydantic resolves a model's annotations through its module
            try:
                spec.loader.exec_module(module)
            except BaseException as exc:
                sys.modules.pop(name, None)
                if isinstance(exc, KeyboardInterrupt):
                    raise
                raise FolderError(f"{file.name}: {type(exc).__name__}: {exc}") from exc
            self.tools += [obj for obj in vars(module).values()
                           if get_tool(obj) is not None and getattr(obj, "__module__", None) == name]
        return self

    @hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return self.tools


def folder_packs(directories: list[Path]) -> dict[str, FolderPack]:
    """Each folder's pack, by its namespace (the folder's name)."""
    return {path.name: FolderPack(path) for path in directories}


__all__ = ["FolderError", "FolderPack", "folder_packs"]

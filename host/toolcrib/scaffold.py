"""``toolcrib new``: a new tool pack, as a distribution that installs and passes its own tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from toolcrib.errors import ToolcribError
from toolcrib.names import namespace_problem

_DIST = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")


class ScaffoldError(ToolcribError):
    """A pack cannot be scaffolded as asked; ``argument`` names what to change (``name``, ``namespace``, ...)."""

    exit_code = 2

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(message)
        self.argument = argument


@dataclass(frozen=True)
class Scaffold:
    """What ``new_pack`` wrote: the folder, the pack's namespace and package, and each file it wrote."""

    directory: Path
    namespace: str
    package: str
    files: tuple[Path, ...]


def requirement() -> str:
    """What pip installs this toolcrib from, as a requirement: where it was installed from (a folder, an archive
    or a VCS URL at its commit, as pip records it in ``direct_url.json``), else its version from an index."""
    import json
    from importlib.metadata import PackageNotFoundError, distribution

    from toolcrib._version import __version__

    try:
        direct = distribution("toolcrib").read_text("direct_url.json")
        found = json.loads(direct) if direct else {}
    except (PackageNotFoundError, ValueError):
        found = {}
    url = found.get("url") if isinstance(found, dict) else None
    if not isinstance(url, str) or not url:
        return f"toolcrib=={__version__}"
    vcs = found.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("vcs"), str):
        commit = vcs.get("commit_id")
        return f"toolcrib @ {vcs['vcs']}+{url}" + (f"@{commit}" if isinstance(commit, str) else "")
    return f"toolcrib @ {url}"


def new_pack(name: str, namespace: str | None = None, directory: Path | None = None) -> Scaffold:
    """Write a new pack, the distribution ``name`` (like ``acme-orders``), into ``directory`` (default ``./name``),
    with namespace ``namespace`` (default: from the name, without a ``toolcrib-`` prefix)."""
    from toolcrib._version import __version__

    if not _DIST.fullmatch(name):
        raise ScaffoldError("name", "a distribution name: letters, digits, '-', '_' and '.', letter first")
    package = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
    namespace = namespace or re.sub(r"^toolcrib_|_?toolcrib$", "", package) or package
    problem = namespace_problem(namespace)
    if problem is not None:
        raise ScaffoldError("namespace", f"{namespace!r}: {problem}")
    target = directory or Path(name)
    if target.exists() and any(target.iterdir()):
        raise ScaffoldError("directory", f"{target} exists and is not empty")
    templates = resources.files("toolcrib").joinpath("templates/pack")
    files = {
        "pyproject.toml": "pyproject.toml.tmpl",
        "README.md": "README.md.tmpl",
        f"src/{package}/__init__.py": "__init__.py.tmpl",
        f"tests/test_{package}.py": "test_pack.py.tmpl",
    }
    minor = ".".join(__version__.split(".")[:2])
    written = []
    for relative, template in files.items():
        text = templates.joinpath(template).read_text(encoding="utf-8")
        for token, value in (("__DIST__", name), ("__PACKAGE__", package), ("__NAMESPACE__", namespace),
                             ("__TOOLCRIB_VERSION__", minor), ("__TOOLCRIB_REQUIREMENT__", requirement())):
            text = text.replace(token, value)
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return Scaffold(target, namespace, package, tuple(written))

"""What ``toolcrib check`` says of the config's upstream servers and isolated packs beyond their records: confinement
this machine cannot give, processes it cannot count, code it cannot protect, folders that hold what governs the
host."""

from __future__ import annotations

from toolcrib import workspace
from toolcrib.config import LoadedConfig
from toolcrib.errors import Problem


def warnings(loaded: LoadedConfig, governing: frozenset[str]) -> list[Problem]:
    """``governing``: the names (``workspace.names_of``) of what governs the host."""
    source, config = loaded.source, loaded.config
    found = []
    confined = sorted([*(f"mcps.{ns}" for ns, c in config.mcps.items() if c.enabled and c.confine),
                       *(f"packs.{ns}" for ns in loaded.isolated_packs())])
    why = None
    if confined:
        from toolcrib.supply.mcp.confinement import unconfinable

        why = unconfinable()
        if why is not None:
            then = ("they run unconfined ([host] allow_unconfined)" if config.host.allow_unconfined
                    else "they are not started")
            found.append(Problem("warning", f"{source}: {confined[0]}", f"{why}: {', '.join(confined)} ask to "
                                 f"be confined, and {then}"))
    isolated = sorted(loaded.isolated_packs())
    if isolated and why is None:
        from toolcrib.supply.mcp.confinement import pids_root

        if pids_root() is None:
            found.append(Problem("warning", f"{source}: packs.{isolated[0]}", (
                f"{', '.join(isolated)}: an isolated pack's processes cannot be counted here (no pids cgroup "
                "this host may make: run it as root, or give it a cgroup v2 group with the pids controller "
                "delegated), so a fork bomb in one is not stopped")))
    for where, why_opaque in loaded.opaque_programs():
        if where.startswith("mcps."):
            found.append(Problem("warning", f"{source}: {where}.command", (
                f"{why_opaque}: toolcrib cannot protect the code this server runs; name its script by path")))
    for name, server in sorted(config.mcps.items()):
        for arg in server.args:
            folder = loaded.resolve(arg) if server.command is not None else None
            if folder is None or not folder.is_dir():
                continue
            reached = [f"{path} ({what})" for path, what in workspace.protected_within(folder) if path in governing]
            if reached:
                found.append(Problem("warning", f"{source}: mcps.{name}.args", (
                    f"upstream server {name!r} is given the folder {folder}, which holds what governs the host: "
                    f"{', '.join(reached)}; toolcrib cannot keep another program from changing it")))
    return found

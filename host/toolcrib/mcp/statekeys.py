"""The secret that seals what a 2026-07-28 client carries between the rounds of one call: checked before anything
is served (and without the MCP SDK: ``toolcrib serve --agent`` checks it before the SDK is imported)."""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping

from toolcrib.errors import ConfigError, Problem

__all__ = ["STATE_SECRET_ENV", "state_keys", "stateless_warning"]

STATE_SECRET_ENV = "TOOLCRIB_STATE_SECRET"


def state_keys(env: Mapping[str, str] | None = None) -> list[bytes]:
    """The keys that seal what a 2026-07-28 client carries between the rounds of one call (approvals, sub-agent
    runs): ``$TOOLCRIB_STATE_SECRET`` when set, so that replicas behind a balancer accept each other's rounds, else a
    random key of this process. A comma-separated list rotates: the first seals, every one opens."""
    configured = (os.environ if env is None else env).get(STATE_SECRET_ENV)
    if configured is None:
        return [secrets.token_bytes(32)]
    keys = [key.strip() for key in configured.split(",")]
    if any(len(key) < 32 for key in keys) or len(set(keys)) != len(keys):
        raise ConfigError([Problem("error", STATE_SECRET_ENV, "must be at least 32 characters (it seals what clients "
                                   "carry between the rounds of a call), or a comma-separated list of such secrets, "
                                   "each once (the first seals, all open: rotation); make one with: python3 -c "
                                   "'import secrets; print(secrets.token_urlsafe(32))'")])
    return [key.encode() for key in keys]


def stateless_warning(stateless: bool, env: Mapping[str, str] | None = None) -> str | None:
    """What an operator should know before serving ``--stateless`` replicas without one shared state secret."""
    if not stateless or (os.environ if env is None else env).get(STATE_SECRET_ENV):
        return None
    return (f"--stateless without ${STATE_SECRET_ENV}: if several replicas serve behind a balancer, give them all one "
            "secret, or approvals and sub-agent runs of 2026-07-28 clients fail whenever a call's next round reaches "
            "another replica")

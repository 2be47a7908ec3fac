"""The CLI's side of the operator endpoint (``toolcrib approvals``): a request to the running server, with the
operator token the config names (``[operator] token_env``), and its JSON answer."""

from __future__ import annotations

import os
from typing import Any

from toolcrib.config import LoadedConfig
from toolcrib.errors import ToolcribError


class OperatorNotSet(ToolcribError):
    """What the endpoint needs is not configured here (no ``[operator]``, no URL, no token)."""

    exit_code = 2


class OperatorError(ToolcribError):
    """The endpoint cannot be reached, or refused."""

    exit_code = 1


def operator_request(loaded: LoadedConfig, url: str | None, method: str, path: str, body: Any = None) -> Any:
    """``method path`` on the operator endpoint at ``url`` (default: ``[operator] url``); its JSON answer."""
    import httpx2

    operator = loaded.config.operator
    if operator is None:
        raise OperatorNotSet("the config has no [operator] table: approvals go to the agents' clients")
    base = url or operator.url
    if base is None:
        raise OperatorNotSet("pass --url (where the server is reached), or set [operator] url")
    token = os.environ.get(operator.token_env, "")
    if not token:
        raise OperatorNotSet(f"${operator.token_env} is not set: the operator endpoint needs the operator token")
    try:
        answer = httpx2.request(method, base.rstrip("/") + path, json=body, timeout=30,
                                headers={"Authorization": f"Bearer {token}"})
    except httpx2.HTTPError as exc:
        raise OperatorError(f"the operator endpoint at {base} cannot be reached: {exc}") from None
    try:
        found = answer.json()
    except ValueError:
        found = None
    if answer.status_code != 200:
        why = found.get("error_description") or found.get("error") if isinstance(found, dict) else answer.text[:200]
        raise OperatorError(f"the operator endpoint answered {answer.status_code}: {why}")
    return found


__all__ = ["OperatorError", "OperatorNotSet", "operator_request"]

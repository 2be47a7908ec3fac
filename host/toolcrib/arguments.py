"""What a call's arguments must be before its tool sees them: the payload limits (size, depth, integer size,
finite numbers) checked before validation, and the wording of validation errors (every bad field and why, which is
what a model needs to correct its call)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

MAX_DEPTH = 32
MAX_INT_BITS = 64
_BIG = 1 << (MAX_INT_BITS - 1)
_LOW = -_BIG  # (made once: -_BIG in the loop makes a new integer each time)


def payload_problem(arguments: Any, limit: int) -> str | None:
    """Why ``arguments`` break the payload limits (an object, at most ``limit`` bytes of JSON, nested at most
    ``MAX_DEPTH`` levels, integers of at most ``MAX_INT_BITS`` bits, finite numbers), or None."""
    if not isinstance(arguments, dict):
        return f"arguments must be a JSON object, not {_json_type(arguments)}"
    # The common case inline (short strings and small numbers at the top level); containers go to _walk.
    left = limit
    for key, value in arguments.items():
        kind = type(value)
        if kind is str:
            left -= len(value) + len(key) + 5
        elif kind is int and _LOW < value < _BIG:
            left -= len(key) + 23
        elif kind is bool or value is None:
            left -= len(key) + 8
        else:
            budget = [left]
            problem = _walk({key: value}, 0, budget, limit)
            if problem is not None:
                return problem
            left = budget[0]
    if left < 0:
        return f"the arguments are larger than the limit of {limit} bytes"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return type(value).__name__


def _walk(value: Any, depth: int, budget: list[int], limit: int) -> str | None:
    """Check a JSON value against the payload limits: depth, size, integer size, finite numbers."""
    if depth > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(value, str):
        budget[0] -= len(value) + 2
    elif isinstance(value, bool) or value is None:
        budget[0] -= 5
    elif isinstance(value, int):
        if value.bit_length() >= MAX_INT_BITS:
            return f"an integer has more than {MAX_INT_BITS} bits; send big numbers as strings"
        budget[0] -= 20
    elif isinstance(value, float):
        if not math.isfinite(value):
            return "numbers must be finite (NaN and Infinity are not JSON)"
        budget[0] -= 24
    elif isinstance(value, dict):
        budget[0] -= 2
        for key, item in value.items():
            if not isinstance(key, str):
                return "object keys must be strings"
            budget[0] -= len(key) + 3
            problem = _walk(item, depth + 1, budget, limit)
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        budget[0] -= 2
        for item in value:
            problem = _walk(item, depth + 1, budget, limit)
            if problem is not None:
                return problem
    else:
        return f"{type(value).__name__} is not a JSON value"
    if budget[0] < 0:
        return f"the arguments are larger than the limit of {limit} bytes"
    return None


def format_validation_error(tool: str, exc: ValidationError, model: Any = None, suffix: str = "") -> str:
    """Every bad field and why, one per line: what the model needs to correct its call."""
    lines = [f"Invalid arguments for {tool}{suffix}:"]
    takes = ", ".join(model.model_fields) if model is not None else ""
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        kind = err["type"]
        if kind == "extra_forbidden":
            message = f"unknown argument (this tool takes: {takes})" if takes else "unknown argument (it takes none)"
        elif kind == "missing":
            message = "required argument is missing"
        else:
            message = err["msg"]
            if "input" in err and kind not in ("model_type", "dict_type", "json_schema"):  # JSON Schema's says it
                shown = repr(err["input"])
                message += f" (got {shown[:80] + '...' if len(shown) > 80 else shown})"
        lines.append(f"- {loc or '(arguments)'}: {message}")
    return "\n".join(lines)

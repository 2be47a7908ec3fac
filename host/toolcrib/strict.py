"""The base of every config table: no unknown key, no coercion (``"1"`` is not ``1``), frozen once read."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


__all__ = ["Strict"]

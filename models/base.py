"""Shared pydantic configuration for every gpuplan schema."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """Immutable schema object that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class InputError(ValueError):
    """Bad user input: the message names the object, the field and the reason."""

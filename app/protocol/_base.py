"""The base of every wire shape: frozen, camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from typing import Any, TypeAlias

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

Json: TypeAlias = Any
"""JSON data (results, outputs). Not pydantic's `JsonValue`: its validator calls back into Python
for every value, which costs more than the rest of a chunk; values are made JSON where they are
produced (`to_jsonable_python`) and where they are parsed (JSON text)."""


class WireModel(BaseModel):
    """A frozen wire shape; serialised with camelCase keys (`model_dump(by_alias=True)`)."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
    )

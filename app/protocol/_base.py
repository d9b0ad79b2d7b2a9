"""The base of every wire shape: frozen, camelCase on the wire, snake_case in Python."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self, TypeAlias, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

Json: TypeAlias = Any
"""JSON data (results, outputs). Not pydantic's `JsonValue`: its validator calls back into Python
for every value, which costs more than the rest of a chunk; values are made JSON where they are
produced (`to_jsonable_python`) and where they are parsed (JSON text)."""


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
"""Holds a required field's place in a template: left there, the instance fails to serialise."""

_Shape: TypeAlias = tuple[dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]
_SHAPES: dict[type[BaseModel], _Shape] = {}
_M = TypeVar("_M", bound=BaseModel)
_new_object = object.__new__
_set_attribute = object.__setattr__


class WireModel(BaseModel):
    """A frozen wire shape; serialised with camelCase keys (`model_dump(by_alias=True)`)."""

    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    @classmethod
    def trusted(cls, values: dict[str, Any]) -> Self:
        """An instance of `values` (by field name) that the runtime made from valid data: its
        own ids, numbers and texts, or what a validated object holds (external input is validated
        where it enters: model adapters, HTTP bodies, tool arguments). Validating again cost twice
        what building takes. An unknown name still raises `TypeError`."""
        shape = _SHAPES.get(cls)
        if shape is None:
            shape = _SHAPES[cls] = _shape(cls)
        template, factories = shape
        # The template lists every field in order, so the instance serialises in field order.
        data = {**template, **values}
        if len(data) != len(template):
            raise TypeError(f"{cls.__name__} has no field {sorted(data.keys() - template)}")
        for name, factory in factories:
            if name not in values:
                data[name] = factory()
        return _built(cls, data, set(values))

    def replaced(self, changes: dict[str, Any]) -> Self:
        """A copy with `changes` that the runtime made from valid data: what
        `model_copy(update=changes)` gives, in a fraction of its time. An unknown name raises
        `TypeError`."""
        data = {**self.__dict__, **changes}
        if len(data) != len(self.__dict__):
            raise TypeError(f"{type(self).__name__} has no field {sorted(changes)}")
        return _built(type(self), data, {*self.__pydantic_fields_set__, *changes})


def _built(cls: type[_M], data: dict[str, Any], fields_set: set[str]) -> _M:
    """An instance of `cls` holding `data` (every field, in order), as validation leaves one."""
    model = _new_object(cls)
    _set_attribute(model, "__dict__", data)
    _set_attribute(model, "__pydantic_fields_set__", fields_set)
    _set_attribute(model, "__pydantic_extra__", None)
    _set_attribute(model, "__pydantic_private__", None)
    return model


def _shape(cls: type[BaseModel]) -> _Shape:
    if cls.__private_attributes__:
        raise TypeError(f"{cls.__name__} has private attributes: build it validated")
    template: dict[str, Any] = {}
    factories = []
    for name, info in cls.model_fields.items():
        template[name] = _MISSING if info.is_required() else info.default
        if info.default_factory is not None:
            factories.append((name, info.default_factory))
    return template, tuple(factories)  # type: ignore[arg-type]

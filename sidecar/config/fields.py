"""How a configuration section is declared: frozen records whose fields carry their documentation
and value checks, and how attribute names become YAML keys and environment names."""

import dataclasses
import re
from dataclasses import MISSING, FrozenInstanceError, field
from typing import Any, TypeVar, dataclass_transform

_T = TypeVar("_T")


def _opt(default: Any, doc: str, **checks: Any) -> Any:
    """A config field with its documentation and value checks (min, max, choices)."""
    return field(default=default, metadata={"doc": doc, **checks})


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def section(cls: type[_T]) -> type[_T]:
    """``@dataclass(frozen=True)`` with shared methods instead of generated ones.

    ``dataclasses`` compiles six methods for every class (about 2 ms each on this machine, most of
    what importing the configuration cost a thin client); these behave the same for what the
    configuration uses: keyword or positional construction with defaults and factories,
    ``fields``/``replace``/``is_dataclass``, equality, hashing, repr, and assignment refused.
    """
    if cls.__doc__ is None:  # else dataclass derives one from inspect.signature: slow (tokenize)
        cls.__doc__ = f"The {cls.__name__} section."
    made = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    for name, method in _METHODS.items():
        setattr(made, name, method)
    return made


def _fields(obj: Any) -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(obj)


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    fields = _fields(self)
    name = type(self).__qualname__
    if len(args) > len(fields):
        raise TypeError(f"{name}() takes {len(fields)} positional arguments but {len(args)} were given")
    for f, value in zip(fields, args, strict=False):
        if f.name in kwargs:
            raise TypeError(f"{name}() got multiple values for argument {f.name!r}")
        kwargs[f.name] = value
    unknown = sorted(kwargs.keys() - {f.name for f in fields})
    if unknown:
        raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
    for f in fields:
        if f.name in kwargs:
            value = kwargs[f.name]
        elif f.default is not MISSING:
            value = f.default
        elif f.default_factory is not MISSING:
            value = f.default_factory()
        else:
            raise TypeError(f"{name}() missing required argument: {f.name!r}")
        object.__setattr__(self, f.name, value)


def _values(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in _fields(obj))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in _fields(self))
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _hash(self: Any) -> int:
    return hash(_values(self))


def _setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


_METHODS = {
    "__init__": _init,
    "__repr__": _repr,
    "__eq__": _eq,
    "__hash__": _hash,
    "__setattr__": _setattr,
    "__delattr__": _delattr,
}


def camel(name: str) -> str:
    """``wiki_subfolder`` -> ``wikiSubfolder`` (YAML keys are camelCase)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def env_name(dotted: str) -> str:
    """``search.vectorWeight`` -> ``SIDECAR_SEARCH_VECTOR_WEIGHT``."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", dotted).replace(".", "_")
    return "SIDECAR_" + snake.upper()

"""Every settable key of the configuration, and how a raw value (YAML, environment, flag) becomes
its type or a :class:`ConfigError` naming where it came from."""

import dataclasses
import functools
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sidecar.config.fields import camel, section
from sidecar.config.root import Config
from sidecar.contracts.errors import ConfigError


@section
class Setting:
    """One settable leaf of the configuration."""

    dotted: str  # camelCase YAML path, e.g. "search.boosts.wiki"
    attrs: tuple[str, ...]  # dataclass attribute path
    type: Any
    default: Any
    doc: str
    checks: Mapping[str, Any]


def settings(cls: type = Config, prefix: str = "", attrs: tuple[str, ...] = ()) -> list[Setting]:
    """Every settable key, in declaration order (the example file and `config check` use it)."""
    if cls is Config and not prefix:
        return list(_every_setting())
    return _collect(cls, prefix, attrs)


@functools.cache
def _every_setting() -> tuple[Setting, ...]:
    """Built once: every load and the model defaults look the keys up."""
    return tuple(_collect(Config, "", ()))


def _collect(cls: type, prefix: str, attrs: tuple[str, ...]) -> list[Setting]:
    out: list[Setting] = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        dotted = f"{prefix}{camel(f.name)}"
        tp = f.type
        if dataclasses.is_dataclass(tp):
            out.extend(_collect(typing.cast(type, tp), dotted + ".", (*attrs, f.name)))
            continue
        checks = {k: v for k, v in f.metadata.items() if k != "doc"}
        out.append(Setting(dotted, (*attrs, f.name), tp, f.default, f.metadata.get("doc", ""), checks))
    return out


def carried(cfg: Config, new: Config, prefixes: tuple[str, ...]) -> Config:
    """``cfg`` with the value of every setting whose key starts with one of ``prefixes`` taken
    from ``new`` (the reloadable ones of a file read again; the others stay as started)."""
    for s in settings():
        if s.dotted.startswith(prefixes):
            cfg = _replaced(cfg, s.attrs, functools.reduce(getattr, s.attrs, new))
    return cfg


def _replaced(section: Any, attrs: tuple[str, ...], value: Any) -> Any:
    inner = value if len(attrs) == 1 else _replaced(getattr(section, attrs[0]), attrs[1:], value)
    return dataclasses.replace(section, **{attrs[0]: inner})


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _to_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    word = raw.strip().lower() if isinstance(raw, str) else None
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise ValueError("expected true or false")


def _to_str_tuple(raw: Any, checks: Mapping[str, Any]) -> tuple[str, ...]:
    """A YAML list of strings, or one string with items separated by commas (environment, flags).
    A string in brackets, ``[a/, b/]``, is a YAML list written where commas are expected: split,
    it would be the patterns ``[a/`` and ``b/]``, matching nothing. It is refused, saying how to
    write it (a trailing comma keeps a single bracket expression such as ``[ab],``)."""
    text = raw.strip() if isinstance(raw, str) else ""
    if text.startswith("[") and text.endswith("]"):
        items = [i.strip().strip("'\"") for i in text[1:-1].split(",")]
        raise ValueError(
            f"looks like a YAML list; here a list is one string, its items separated by commas: "
            f"{','.join(i for i in items if i)!r} (a single pattern in brackets: end it with a comma)"
        )
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected a list of strings")
    value = tuple(i.strip() for i in items if i.strip())
    choices = checks.get("choices")
    if choices:  # names from a fixed list: EN and en are one, a repeat counts once
        value = tuple(dict.fromkeys(i.lower() for i in value))
        if any(i not in choices for i in value):
            raise ValueError(f"each item must be one of {', '.join(choices)}")
    return value


def _to_number(raw: Any, base: type, checks: Mapping[str, Any]) -> int | float:
    kind = "an integer" if base is int else "a number"
    if isinstance(raw, bool) or (base is int and isinstance(raw, float)):
        raise ValueError(f"expected {kind}")
    try:
        value: int | float = base(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise ValueError(f"expected {kind}") from None
    if not math.isfinite(value):  # .nan passes every range check and turns scores into NaN
        raise ValueError(f"expected a finite number, not {raw!r}")
    if "min" in checks and value < checks["min"]:
        raise ValueError(f"must be at least {checks['min']}")
    if "max" in checks and value > checks["max"]:
        raise ValueError(f"must be at most {checks['max']}")
    return value


def _to_str(raw: Any, checks: Mapping[str, Any]) -> str:
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise ValueError("expected text")
    value = str(raw)
    choices = checks.get("choices")
    if choices and value not in choices:
        raise ValueError(f"must be one of {', '.join(choices)}")
    return value


def _to_path(raw: Any) -> Path:
    if not isinstance(raw, str) or not raw.strip():
        raise ValueError("expected a path")
    if "\0" in raw:
        raise ValueError("a path cannot contain NUL")
    return Path(raw).expanduser()


def _coerce(setting: Setting, raw: Any, where: str) -> Any:
    """Turn a YAML or string value into the setting's type, or raise naming where it came from."""
    tp = setting.type
    optional = isinstance(tp, types.UnionType) and type(None) in typing.get_args(tp)
    base = next(a for a in typing.get_args(tp) if a is not type(None)) if optional else tp
    empty = raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "null", "none"))
    try:
        if optional and empty:
            return None
        if raw is None:
            raise ValueError("a value is required")
        if base is bool:
            return _to_bool(raw)
        if base in (int, float):
            return _to_number(raw, base, setting.checks)
        if base is str:
            return _to_str(raw, setting.checks)
        if base is Path:
            return _to_path(raw)
        if base == tuple[str, ...]:
            return _to_str_tuple(raw, setting.checks)
        raise ValueError(f"unsupported type {tp}")  # pragma: no cover - every declared type is handled
    except ValueError as exc:
        raise ConfigError(f"{where}: {setting.dotted} = {raw!r}: {exc}") from None

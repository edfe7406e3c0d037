"""A small declarative schema: YAML mappings -> frozen dataclasses, with exact error messages.

Each spec dataclass declares its fields with :func:`key`, naming the YAML key (which carries
the YAML unit, e.g. ``hbm_capacity_GiB``) and the factor to SI. :func:`build` walks a parsed
YAML mapping, rejects unknown keys (listing the valid ones and the closest match), checks types
and ranges, converts units once, and returns the frozen dataclass.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from deepflow.errors import ConfigError

__all__ = [
    "Ctx",
    "build",
    "check_choice",
    "describe_value",
    "key",
    "knob",
    "suggest",
    "yaml_keys",
]

T = TypeVar("T")
_MISSING = dataclasses.MISSING


@dataclass(frozen=True)
class Ctx:
    """Where a value came from: the file shown in messages and the dotted key path."""

    file: str
    path: str = ""

    def child(self, name: str | int) -> Ctx:
        if isinstance(name, int):
            return Ctx(self.file, f"{self.path}[{name}]")
        return Ctx(self.file, f"{self.path}.{name}" if self.path else name)

    def error(self, message: str) -> ConfigError:
        """An error about this key: ``FILE: path <message>``."""
        where = f"{self.path} " if self.path else ""
        return ConfigError(f"{self.file}: {where}{message}")

    def invalid(self, requirement: str, value: object) -> ConfigError:
        """``FILE: a.b.c must be <requirement>; got <value>.``"""
        return self.error(f"must be {requirement}; got {describe_value(value)}.")


def describe_value(value: object) -> str:
    """How a user's value is shown in messages: strings quoted, YAML spellings for the rest."""
    if value is None:
        return "null (empty)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if not math.isinf(value) else str(value)
    return str(value)


def suggest(word: str, options: Sequence[str]) -> str | None:
    """The closest valid spelling of ``word``, if one is close enough."""
    matches = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return matches[0] if matches else None


def key(
    yaml: str,
    *,
    scale: float = 1.0,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    default: Any = _MISSING,
    doc: str = "",
) -> Any:
    """Declare a spec field read from YAML key ``yaml``.

    Args:
        yaml: the YAML key (with its YAML unit suffix).
        scale: factor from the YAML unit to SI (``2**30`` for ``*_GiB``); applied once at load.
        gt, ge, le, lt: bounds on the YAML value (before scaling).
        choices: allowed strings.
        keys: allowed keys of a ``dict[str, float]`` field.
        default: value when the key is absent (already in SI); absent default = required.
        doc: one line for ``deepflow show`` and documentation.
    """
    meta = _meta(yaml, scale=scale, gt=gt, ge=ge, le=le, lt=lt, choices=choices, keys=keys, doc=doc)
    return _declare(meta, default)


def knob(
    yaml: str,
    *,
    workloads: Sequence[str],
    column: str = "",
    framework: bool = False,
    ge: float | None = None,
    le: float | None = None,
    choices: Sequence[str] | None = None,
    default: Any,
    doc: str = "",
) -> Any:
    """Declare a mapping knob: a :func:`key` field that is also an input column of the oracle
    (the knob table, :data:`deepflow.config.mapping.KNOBS`, is built from these declarations).

    Args:
        yaml: the YAML key, which is also the field's name.
        workloads: the workload kinds whose step reads the knob (their input columns hold it).
        column: the oracle's input column (default: ``yaml``); an integer or boolean is its
            value as a float, a choice its index in ``choices``.
        framework: a switch of how the framework runs (fused kernels, overlap) rather than a
            way to split the work: best-mapping keeps it as the scenario sets it.
        ge, le, choices, default, doc: as for :func:`key`.
    """
    meta = _meta(yaml, ge=ge, le=le, choices=choices, doc=doc)
    meta.update(workloads=tuple(workloads), column=column or yaml, framework=framework)
    return _declare(meta, default)


def _meta(
    yaml: str,
    *,
    scale: float = 1.0,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    doc: str = "",
) -> dict[str, Any]:
    """The schema metadata of a field (see :func:`key`)."""
    return {
        "yaml": yaml,
        "scale": scale,
        "gt": gt,
        "ge": ge,
        "le": le,
        "lt": lt,
        "choices": tuple(choices) if choices is not None else None,
        "keys": tuple(keys) if keys is not None else None,
        "doc": doc,
    }


def _declare(meta: dict[str, Any], default: Any) -> Any:
    """A dataclass field with schema metadata ``meta`` and ``default`` (absent: required)."""
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    if isinstance(default, dict | list):
        frozen = (
            types.MappingProxyType(dict(default)) if isinstance(default, dict) else tuple(default)
        )
        return dataclasses.field(default_factory=lambda: frozen, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def yaml_keys(cls: type) -> list[str]:
    """The YAML keys a spec class accepts, in declaration order."""
    return [f.metadata["yaml"] for f in dataclasses.fields(cls) if "yaml" in f.metadata]


def _bounds_text(meta: Mapping[str, Any]) -> str:
    parts = []
    for name, op in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
        if meta.get(name) is not None:
            parts.append(f"{op} {describe_value(float(meta[name]))}")
    return " and ".join(parts)


def _check_bounds(value: float, meta: Mapping[str, Any], ctx: Ctx, noun: str) -> None:
    ok = True
    if meta.get("gt") is not None and not value > meta["gt"]:
        ok = False
    if meta.get("ge") is not None and not value >= meta["ge"]:
        ok = False
    if meta.get("lt") is not None and not value < meta["lt"]:
        ok = False
    if meta.get("le") is not None and not value <= meta["le"]:
        ok = False
    if not ok:
        raise ctx.invalid(f"{noun} {_bounds_text(meta)}", value)


def _number(value: object, meta: Mapping[str, Any], ctx: Ctx) -> float:
    noun = "a number"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ctx.invalid(f"{noun} {_bounds_text(meta)}".strip(), value)
    if not math.isfinite(value):
        raise ctx.invalid(f"a finite number {_bounds_text(meta)}".strip(), value)
    _check_bounds(float(value), meta, ctx, noun)
    return float(value) * float(meta["scale"])


def _integer(value: object, meta: Mapping[str, Any], ctx: Ctx) -> int:
    noun = "an integer"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ctx.invalid(f"{noun} {_bounds_text(meta)}".strip(), value)
    _check_bounds(float(value), meta, ctx, noun)
    return int(value) * int(meta["scale"])


def _convert(value: object, hint: Any, meta: Mapping[str, Any], ctx: Ctx) -> Any:
    origin = typing.get_origin(hint)
    if hint is float:
        return _number(value, meta, ctx)
    if hint is int:
        return _integer(value, meta, ctx)
    if hint is bool:
        if not isinstance(value, bool):
            raise ctx.invalid("true or false", value)
        return value
    if hint is str:
        choices = meta.get("choices")
        if choices is not None:
            return check_choice(value, choices, ctx)
        if not isinstance(value, str) or not value:
            raise ctx.invalid("a non-empty string", value)
        return value
    if origin in (tuple, Sequence) and typing.get_args(hint)[0] is int:
        if not isinstance(value, list) or not value:
            raise ctx.invalid("a non-empty list of integers", value)
        return tuple(_integer(v, meta, ctx.child(i)) for i, v in enumerate(value))
    if origin in (dict, Mapping) and typing.get_args(hint)[1] is float:
        if not isinstance(value, Mapping) or not value:
            raise ctx.invalid("a non-empty mapping", value)
        allowed = meta.get("keys")
        out: dict[str, float] = {}
        for k, v in value.items():
            if allowed is not None and k not in allowed:
                raise _unknown_key(ctx, str(k), allowed)
            out[str(k)] = _number(v, meta, ctx.child(str(k)))
        return types.MappingProxyType(out)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return build(hint, value, ctx)
    raise TypeError(f"schema: unsupported field type {hint!r} at {ctx.path}")  # pragma: no cover


def check_choice(value: object, choices: Sequence[str], ctx: Ctx) -> str:
    """``value`` if it is one of ``choices``; else ``must be one of: ...`` with the closest."""
    if not isinstance(value, str) or value not in choices:
        near = suggest(value, choices) if isinstance(value, str) else None
        hint = f" (did you mean '{near}'?)" if near else ""
        raise ctx.error(f"must be one of: {', '.join(choices)}; got {describe_value(value)}{hint}.")
    return value


def _unknown_key(ctx: Ctx, name: str, valid: Sequence[str]) -> ConfigError:
    full = f"{ctx.path}.{name}" if ctx.path else name
    near = suggest(name, valid)
    hint = f"; did you mean '{near}'?" if near else "."
    return ConfigError(
        f"{ctx.file}: unknown key '{full}'{hint} Valid keys: {', '.join(sorted(valid))}."
    )


def check_keys(raw: Mapping[str, Any], valid: Sequence[str], ctx: Ctx) -> None:
    """Reject the first key of ``raw`` that is not in ``valid``."""
    for name in raw:
        if name not in valid:
            raise _unknown_key(ctx, str(name), valid)


def require_mapping(raw: object, ctx: Ctx, what: str = "a mapping") -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ctx.invalid(what, raw)
    return raw


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a spec class (resolving them is slow; classes are fixed)."""
    return typing.get_type_hints(cls)


def build(cls: type[T], raw: object, ctx: Ctx, *, extra: Mapping[str, Any] | None = None) -> T:
    """Build the frozen dataclass ``cls`` from the YAML mapping ``raw``.

    Args:
        cls: a dataclass whose fields are declared with :func:`key` (fields without YAML
            metadata must be supplied through ``extra``).
        raw: the parsed YAML value.
        ctx: file and key path, for messages.
        extra: values for non-YAML fields (e.g. a preset's name).

    Raises:
        ConfigError: unknown key, missing key, wrong type or out-of-range value.
    """
    mapping = require_mapping(raw, ctx)
    fields = [f for f in dataclasses.fields(cls) if "yaml" in f.metadata]  # type: ignore[arg-type]
    valid = [f.metadata["yaml"] for f in fields]
    check_keys(mapping, valid, ctx)
    hints = _type_hints(cls)  # type: ignore[arg-type]
    values: dict[str, Any] = dict(extra or {})
    for f in fields:
        name = f.metadata["yaml"]
        if name in mapping and mapping[name] is not None:
            values[f.name] = _convert(mapping[name], hints[f.name], f.metadata, ctx.child(name))
        elif f.default is _MISSING and f.default_factory is _MISSING:
            if name in mapping:
                raise ctx.child(name).error("is empty; give a value.")
            raise ctx.child(name).error("is required.")
    return cls(**values)

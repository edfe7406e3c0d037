"""Query points from YAML: a list of designs, each a mapping of variable values.

A points file is a list of mappings (or a mapping with one key, ``points``, holding that
list). Keys are the design space's variable names (``tensor_parallel``) or the dataset's
column names (``x_tensor_parallel``); a simplex variable is a mapping of its parts
(``area_split: {core: 0.6, l2: 0.1, ...}``) or one ``x_<variable>_<part>`` key per part::

    - {technology: n5, die_area_mm2: 800, tensor_parallel: 8, pipeline_parallel: 8,
       data_parallel: 16, area_split: {core: 0.65, l2: 0.08, ...}, ...}

Every variable the model was fitted on needs a value; values are checked against the
space's declared domain (bounds, choices, simplex parts summing to 1). A derived column
(``x_data_parallel`` when the space derives data parallelism) takes a positive integer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from deepflow.config._schema import Ctx, describe_value, suggest
from deepflow.errors import ConfigError

__all__ = ["check_points", "points_from_table", "read_points"]

#: Simplex parts must sum to 1 within this.
SUM_TOLERANCE = 1e-6


def _number_text(value: float) -> str:
    return describe_value(float(value))


class _Var:
    """One accepted variable: its name, x_ columns and domain."""

    def __init__(self, desc: Mapping[str, Any]) -> None:
        self.name = str(desc["name"])
        self.type = str(desc["type"])
        self.columns = [str(c) for c in desc.get("columns", [f"x_{self.name}"])]
        self.low: Any = desc.get("low")
        self.high: Any = desc.get("high")
        self.choices = list(desc.get("choices", []))
        self.parts = [str(p) for p in desc.get("parts", [])]

    def requirement(self) -> str:
        if self.type == "continuous":
            if self.low is None:
                return "a number"
            return f"a number in [{_number_text(self.low)}, {_number_text(self.high)}]"
        if self.type == "integer":
            if self.low is None:
                return "an integer >= 1"
            return f"an integer in [{_number_text(self.low)}, {_number_text(self.high)}]"
        return f"one of: {', '.join(describe_value(c) for c in self.choices)}"

    def check(self, value: Any, ctx: Ctx) -> Any:
        """``value`` if it lies in the domain; else ``FILE: points[i].name must be ...``."""
        if isinstance(value, float) and value.is_integer() and self.type != "continuous":
            value = int(value)  # YAML 8.0 for an integer or an integer choice
        if self.type in ("continuous", "integer"):
            is_int = isinstance(value, int) and not isinstance(value, bool)
            ok = is_int or (
                self.type == "continuous" and isinstance(value, float) and math.isfinite(value)
            )
            if ok and self.low is not None:
                ok = float(self.low) <= float(value) <= float(self.high)
            elif ok and self.type == "integer":  # a derived degree without declared bounds
                ok = value >= 1
            if not ok:
                raise ctx.invalid(self.requirement(), value)
            return float(value) if self.type == "continuous" else value
        for choice in self.choices:  # bool choices admit only bools, numbers only numbers
            if type(choice) is type(value) and choice == value:
                return value
            if isinstance(choice, float) and type(value) is int and choice == value:
                return float(value)
        near = suggest(value, [str(c) for c in self.choices]) if isinstance(value, str) else None
        hint = f" (did you mean '{near}'?)" if near else ""
        if self.type == "fixed":
            raise ctx.error(
                f"must be {describe_value(self.choices[0])} (fixed in the design space); "
                f"got {describe_value(value)}."
            )
        raise ctx.error(f"must be {self.requirement()}; got {describe_value(value)}{hint}.")

    def check_part(self, j: int, value: Any, ctx: Ctx) -> float:
        lo, hi = float(self.low[j]), float(self.high[j])
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not lo <= value <= hi:
            raise ctx.invalid(f"a share in [{_number_text(lo)}, {_number_text(hi)}]", value)
        return float(value)


def _catalogue(model: Any) -> list[_Var]:
    """The variables a point may name: the dataset's, else what the encoder knows."""
    declared = [_Var(v) for v in model.info.get("variables", []) or []]
    known = {c for v in declared for c in v.columns}
    extra: list[_Var] = []
    for spec in model.encoder.features_:
        if spec.column in known:
            continue
        known.add(spec.column)
        name = spec.column.removeprefix("x_")
        if spec.kind == "onehot":
            extra.append(_Var({"name": name, "type": "categorical", "choices": spec.choices}))
        elif spec.kind == "bool":
            extra.append(_Var({"name": name, "type": "categorical", "choices": [False, True]}))
        elif name == "data_parallel" or not declared:  # derived degree; or an old model
            kind = "integer" if name == "data_parallel" else "continuous"
            extra.append(_Var({"name": name, "type": kind}))
    return declared + extra


def _read(path: Path) -> list[Any]:
    from deepflow.config.loader import load_yaml

    shown = str(path)
    data = load_yaml(path)
    if isinstance(data, Mapping):
        for k in data:
            if k != "points":
                raise ConfigError(f"{shown}: unknown key '{k}'. Valid keys: points.")
        data = data.get("points")
    if not isinstance(data, list) or not data:
        raise ConfigError(
            f"{shown}: expected a non-empty list of points (mappings of variable values), "
            f"or 'points:' holding one; got {describe_value(data)}."
        )
    return data


def read_points(path: str | Path, model: Any) -> Any:
    """Read query points for ``model`` from a YAML file.

    Args:
        path: the YAML file (format in the module docstring).
        model: the fitted :class:`~deepflow.surrogate.SurrogateModel` the points are for.

    Returns:
        A DataFrame with one row per point and the dataset's ``x_*`` columns the points name.

    Raises:
        ConfigError: the message names the file and the point's key: an unknown variable
            (with the closest name), a missing value, or a value outside the variable's domain,
            e.g. ``pts.yaml: points[1].tensor_parallel must be an integer in [1, 32]; got 64.``
    """
    p = Path(path)
    return check_points(_read(p), model, file=str(p))


def points_from_table(df: Any, model: Any, *, file: str) -> Any:
    """Check the rows of a Parquet points table (``x_*`` columns) exactly as YAML points.

    Raises:
        ConfigError: no rows, or the first row breaking a rule of :func:`read_points`, named
            as ``FILE: rows[i].x_name ...``.
    """
    if len(df) == 0:
        raise ConfigError(f"{file}: holds no rows; give at least one point.")
    columns = [c for c in df.columns if str(c).startswith("x_")]
    records = df[columns].to_dict(orient="records")
    return check_points(records, model, file=file, label="rows")


def check_points(raw: Sequence[Any], model: Any, *, file: str, label: str = "points") -> Any:
    """Check points (mappings of variable values) against ``model``'s design space; a
    DataFrame of their ``x_*`` columns (see :func:`read_points`)."""
    import pandas as pd

    variables = _catalogue(model)
    by_key: dict[str, tuple[_Var, int | None]] = {}
    for v in variables:
        by_key[v.name] = (v, None)
        if v.type == "simplex":
            for j, col in enumerate(v.columns):
                by_key[col] = (v, j)
        else:
            by_key[v.columns[0]] = (v, None)
    needed = {s.column for s in model.encoder.features_}
    valid = sorted(v.name for v in variables)
    top = Ctx(file, label)
    rows: list[dict[str, Any]] = []
    for i, point in enumerate(raw):
        ctx = top.child(i)
        if not isinstance(point, Mapping):
            raise ctx.invalid("a mapping of variable values", point)
        row: dict[str, Any] = {}
        seen: dict[str, str] = {}
        for key, value in point.items():
            name = str(key)
            if name not in by_key:
                near = suggest(name, valid + list(by_key))
                hint = f"; did you mean '{near}'?" if near else "."
                raise ctx.error(
                    f"has unknown variable '{name}'{hint} Valid: {', '.join(valid)} "
                    "(or their x_ column names)."
                )
            var, part = by_key[name]
            label = name if part is not None else var.name
            if label in seen:
                raise ctx.child(name).error(f"repeats {seen[label]}.")
            seen[label] = name
            if part is not None:
                if var.name in seen:
                    raise ctx.child(name).error(f"repeats {var.name}.")
                row[var.columns[part]] = var.check_part(part, value, ctx.child(name))
            elif var.type == "simplex":
                if any(c in seen for c in var.columns):
                    raise ctx.child(name).error("repeats a part given as an x_ column.")
                row.update(_simplex(var, value, ctx.child(name)))
            else:
                row[var.columns[0]] = var.check(value, ctx.child(name))
        for var in variables:
            cols = [c for c in var.columns if c in needed]
            absent = [c for c in cols if c not in row]
            if var.type == "simplex" and cols:
                given = [c for c in var.columns if c in row]
                if given and absent:
                    parts = [var.parts[var.columns.index(c)] for c in absent]
                    raise ctx.error(f"is missing {var.name} part(s) {', '.join(parts)}.")
                if not absent:
                    _check_sum(var, [row[c] for c in var.columns], ctx.child(var.name))
            if absent:
                raise ctx.error(f"is missing {var.name} (the model needs it).")
        rows.append(row)
    _check_mappings(rows, model, top)
    columns = [c for v in variables for c in v.columns if any(c in r for r in rows)]
    return pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=columns)


def _simplex(var: _Var, value: Any, ctx: Ctx) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise ctx.invalid(f"a mapping of parts ({', '.join(var.parts)})", value)
    for k in value:
        if str(k) not in var.parts:
            near = suggest(str(k), var.parts)
            hint = f"; did you mean '{near}'?" if near else "."
            raise ctx.error(f"has unknown part '{k}'{hint} Parts: {', '.join(var.parts)}.")
    missing = [part for part in var.parts if part not in value]
    if missing:
        raise ctx.error(f"is missing part(s) {', '.join(missing)}.")
    shares = [var.check_part(j, value[part], ctx.child(part)) for j, part in enumerate(var.parts)]
    _check_sum(var, shares, ctx)
    return dict(zip(var.columns, shares, strict=True))


def _check_sum(var: _Var, shares: Sequence[float], ctx: Ctx) -> None:
    total = math.fsum(shares)
    if abs(total - 1.0) > SUM_TOLERANCE:
        raise ctx.error(f"parts must sum to 1; got {total:.6g}.")


def _check_mappings(rows: Sequence[Mapping[str, Any]], model: Any, top: Ctx) -> None:
    """Transformer mappings the oracle cannot run (degrees that do not multiply to the
    system's devices, or break a rule of :mod:`deepflow.config.mapping`) are errors, as in a
    scenario: a surrogate would otherwise answer for a design that does not exist."""
    from deepflow.config.mapping import STRUCTURAL, first_violation
    from deepflow.datasets.space import space_from_text

    text = str(model.info.get("space_yaml", "") or "")
    if not text:  # a model fitted before the space was recorded: nothing to check against
        return
    try:
        space = space_from_text(text, file="<the model's design space>")
    except ConfigError:  # the space names presets this installation lacks
        return
    if not space.base_is_transformer:
        return
    base = space.base
    models = dict(zip(space.by_name["model"].choices, space.resolved["model"], strict=True)) if (
        "model" in space.by_name) else {}  # fmt: skip

    def value(row: Mapping[str, Any], name: str, default: Any) -> Any:
        return row.get(f"x_{name}", default)

    for i, row in enumerate(rows):
        ctx = top.child(i)
        devices = int(value(row, "devices_per_node", base.system.devices_per_node)) * int(
            value(row, "num_nodes", base.system.num_nodes))  # fmt: skip
        spec = models.get(value(row, "model", None), base.workload.model)
        degrees = {d: int(value(row, d, getattr(base.mapping, d))) for d in STRUCTURAL}
        if "x_data_parallel" not in row:  # derived: the devices the other degrees leave
            split = degrees["tensor_parallel"] * degrees["pipeline_parallel"] * degrees[
                "context_parallel"]  # fmt: skip
            degrees["data_parallel"] = max(devices // split, 1)
        used = (degrees["tensor_parallel"] * degrees["pipeline_parallel"]
                * degrees["context_parallel"] * degrees["data_parallel"])  # fmt: skip
        if used != devices:
            raise ctx.error(
                f"is an impossible mapping: tensor_parallel {degrees['tensor_parallel']} × "
                f"pipeline_parallel {degrees['pipeline_parallel']} × context_parallel "
                f"{degrees['context_parallel']} × data_parallel {degrees['data_parallel']} = "
                f"{used} devices, but the system has {devices}."
            )
        balance = value(row, "pipeline_balance", base.mapping.pipeline_balance)
        etp = value(row, "expert_tensor_parallel", base.mapping.expert_tensor_parallel)
        replicas = value(row, "data_parallel_replicas", base.mapping.data_parallel_replicas)
        broken = first_violation(
            {
                **degrees,
                "pipeline_balance": balance,
                "expert_tensor_parallel": int(etp),
                "data_parallel_replicas": int(replicas),
            },
            spec,
            serving=space.base_is_serving,
        )
        if broken is not None:
            raise ctx.child(broken[0]).error(broken[1])
        batch = int(value(row, "global_batch_size", base.workload.global_batch_size))
        per_step = degrees["data_parallel"] * degrees["micro_batch_size"]
        if batch % per_step:
            raise ctx.error(
                f"is an impossible mapping: global_batch_size {batch} is not divisible by "
                f"data_parallel {degrees['data_parallel']} × micro_batch_size "
                f"{degrees['micro_batch_size']} = {per_step}."
            )

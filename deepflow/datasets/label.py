"""Label rows of a design space with the oracle: unit cube -> variable values -> results.

Rows are grouped by the scenario they need (device, network, system size, model, precision);
each group is one :func:`~deepflow.oracle.evaluate.evaluate_table` call with the mapping,
workload and design-budget columns of its rows, whatever the workload kind.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from deepflow.config.mapping import Knob, knobs_of
from deepflow.config.specs import (
    AreaBudgetSpec,
    DesignDeviceSpec,
    PerimeterBudgetSpec,
    PowerBudgetSpec,
    Scenario,
)
from deepflow.datasets.samplers import (
    decode_continuous,
    decode_index,
    decode_integer,
    decode_simplex,
    unit_cube,
)
from deepflow.datasets.space import (
    AREA_PARTS,
    GROUP_VARIABLES,
    PERIMETER_PARTS,
    POWER_PARTS,
    SERVING_MAPPING,
    STRUCTURAL,
    TECH_VARIABLES,
    DesignSpace,
)
from deepflow.oracle.evaluate import evaluate_table
from deepflow.oracle.hardware import DESIGN_COLUMNS, design_table

__all__ = [
    "CONSTRAINTS",
    "arrow_schema",
    "cube_rows",
    "decode",
    "decode_x",
    "label_points",
    "label_rows",
    "output_names",
    "point_scenarios",
    "unique_rows",
]

F = NDArray[np.float64]
I64 = NDArray[np.int64]

#: Oracle outputs that are constraints (<= 0 feasible): the dataset's ``c_`` columns.
CONSTRAINTS = (
    "memory_excess_B", "area_excess_mm2", "power_excess_W", "perimeter_excess",
    "reticle_excess_mm2", "sram_excess_B", "invalid_output",
)  # fmt: skip
_MAPPING = "__mapping__"
#: The transformer's mapping knobs other than the structural degrees (which the mapping table
#: draws jointly): each passed on, encoded by the knob table, where the space varies it.
_KNOBS = tuple(k for k in knobs_of("transformer") if k.name not in STRUCTURAL)
_TECH_PREFIXES = {
    "technology": ("core_", "ratio_", "l2_", "l1_", "register_file_"),
    "dram_technology": ("dram_",),
    "scale_up_link": ("scale_up_",),
    "scale_out_link": ("scale_out_",),
}


# ------------------------------------------------------------------------------- decode
def unique_rows(keys: I64) -> tuple[I64, I64]:
    """Distinct rows of an (n, m) integer array and each row's group number.

    Faster than ``np.unique(axis=0)`` (which sorts structured records): the columns are
    folded one by one into compact integer codes.
    """
    n = keys.shape[0]
    codes = np.zeros(n, dtype=np.int64)
    for j in range(keys.shape[1]):
        values, inverse = np.unique(keys[:, j], return_inverse=True)
        if len(values) > 1:
            _, codes = np.unique(codes * len(values) + inverse.ravel(), return_inverse=True)
            codes = codes.ravel().astype(np.int64)
    _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
    return keys[first], inverse.ravel().astype(np.int64)


def decode(space: DesignSpace, u: F) -> dict[str, NDArray[Any]]:
    """Cube rows (n, d) -> per variable: values (continuous, integer), choice indices
    (categorical, fixed), (n, k) parts (simplex), and the mapping rows (n, 7) of
    :data:`STRUCTURAL` under ``"__mapping__"`` for transformer spaces."""
    n = u.shape[0]
    out: dict[str, NDArray[Any]] = {}
    col = 0
    for v in space.variables:
        if v.joint:  # drawn below, jointly with the other structural degrees
            continue
        d = v.num_dims
        log = v.scale == "log"
        if v.type == "continuous":
            out[v.name] = decode_continuous(u[:, col], v.low, v.high, log=log)
        elif v.type == "integer":
            out[v.name] = decode_integer(u[:, col], int(v.low), int(v.high), log=log)
        elif v.type == "simplex":
            out[v.name] = decode_simplex(u[:, col : col + d], v.part_low, v.part_high)
        elif d:
            out[v.name] = decode_index(u[:, col], len(v.choices))
        else:
            out[v.name] = np.zeros(n, dtype=np.int64)
        col += d
    if space.base_is_transformer:
        u_map = u[:, col] if space.has_mapping_dim else np.zeros(n)
        out[_MAPPING] = _decode_mapping(space, out, u_map)
    return out


def _values(space: DesignSpace, dec: dict[str, NDArray[Any]], name: str, default: Any,
           n: int) -> NDArray[Any]:  # fmt: skip
    """Per-row values of a non-simplex variable (choices looked up), or ``default``."""
    var = space.by_name.get(name)
    if var is None:
        return np.full(n, default)
    if var.type in ("categorical", "fixed"):
        return np.asarray(var.choices)[dec[name]]
    return dec[name]


def _decode_mapping(space: DesignSpace, dec: dict[str, NDArray[Any]], u: F) -> I64:
    n = u.shape[0]
    system, workload = space.base.system, space.base.workload
    per_node = _values(space, dec, "devices_per_node", system.devices_per_node, n)
    devices = per_node.astype(np.int64) * _values(space, dec, "num_nodes", system.num_nodes, n)
    model = dec["model"] if "model" in space.by_name else np.zeros(n, dtype=np.int64)
    batch = _values(space, dec, "global_batch_size", workload.global_batch_size, n)
    keys = np.stack([devices, model, batch.astype(np.int64)], axis=1)
    unique, inverse = unique_rows(keys)
    out = np.empty((n, len(STRUCTURAL)), dtype=np.int64)
    for g, key in enumerate(unique):
        rows = np.flatnonzero(inverse == g)
        table = space.mapping_tables[(int(key[0]), int(key[1]), int(key[2]))]
        out[rows] = table[decode_index(u[rows], len(table))]
    return out


# ------------------------------------------------------------------------------- inputs
def x_columns(space: DesignSpace, dec: dict[str, NDArray[Any]], n: int) -> dict[str, Any]:
    """The dataset's ``x_`` columns, in order."""
    out: dict[str, Any] = {}
    mapping = dec.get(_MAPPING)
    for v in space.variables:
        if v.type == "simplex":
            for j, part in enumerate(v.parts):
                out[f"x_{v.name}_{part}"] = dec[v.name][:, j]
        elif v.name in STRUCTURAL and mapping is not None:
            out[f"x_{v.name}"] = mapping[:, STRUCTURAL.index(v.name)]
        elif v.name == "sequence_parallel" and mapping is not None:
            out["x_sequence_parallel"] = _sequence_parallel(space, dec, mapping, n)
        else:
            out[f"x_{v.name}"] = _values(space, dec, v.name, None, n)
    if space.derives_data_parallel and mapping is not None:
        out["x_data_parallel"] = mapping[:, STRUCTURAL.index("data_parallel")]
    return out


def decode_x(space: DesignSpace, u: F) -> dict[str, NDArray[Any]]:
    """Unit-cube rows ``u`` (n, ``space.num_dims``) -> the dataset's ``x_`` columns, in order
    (what :func:`label_rows` writes for them: choices as values, simplex parts, mapping)."""
    u = np.asarray(u, dtype=float).reshape(-1, space.num_dims)
    return x_columns(space, decode(space, u), u.shape[0])


def _sequence_parallel(space: DesignSpace, dec: dict[str, NDArray[Any]], mapping: I64,
                       n: int) -> NDArray[np.bool_]:  # fmt: skip
    """Sequence parallelism splits over the tensor-parallel group: off without one."""
    sp = _values(space, dec, "sequence_parallel", space.base.mapping.sequence_parallel, n)
    return sp.astype(bool) & (mapping[:, STRUCTURAL.index("tensor_parallel")] > 1)


# ------------------------------------------------------------------------------- design
def _tech_columns(space: DesignSpace, name: str, device: DesignDeviceSpec) -> dict[str, F]:
    """DESIGN_COLUMNS a technology choice sets, one array entry per choice."""
    cache_key = ("tech", name)
    cached: dict[str, F] | None = space.cache.get(cache_key)
    if cached is not None:
        return cached
    specs = [dataclasses.replace(device, **{name: t}) for t in space.resolved[name]]
    table = design_table(specs)
    prefixes = _TECH_PREFIXES[name]
    cols = {c: table[c] for c in DESIGN_COLUMNS
            if c.startswith(prefixes) and not c.endswith("_neighbours")}  # fmt: skip
    space.cache[cache_key] = cols
    return cols


def _design_values(space: DesignSpace, dec: dict[str, NDArray[Any]], rows: I64, total: int,
                   device: DesignDeviceSpec) -> dict[str, NDArray[Any]]:  # fmt: skip
    """Design parameters of ``rows`` (of ``total`` decoded rows), by spec field or
    DESIGN_COLUMNS name (mm², W, fractions); technology entries hold choice indices."""
    names = space.by_name
    n = len(rows)

    def num(name: str, default: float) -> F:
        if name not in names:
            return np.full(n, float(default))
        return np.asarray(_values(space, dec, name, default, total)[rows], dtype=float)

    out: dict[str, NDArray[Any]] = {}
    out["die_area_mm2"] = num("die_area_mm2", device.die_area_mm2)
    out["tdp_W"] = num("tdp_W", device.tdp_W)
    totals = {"area_split": out["die_area_mm2"], "power_split": out["tdp_W"],
              "perimeter_split": np.ones(n)}  # fmt: skip
    budgets = {
        "area_split": (AREA_PARTS, "area_{}_mm2", device.area_mm2),
        "power_split": (POWER_PARTS, "power_{}_W", device.power_W),
        "perimeter_split": (PERIMETER_PARTS, "perimeter_{}", device.perimeter_fraction),
    }
    for split, (parts, pattern, spec) in budgets.items():
        var = names.get(split)
        for p in parts:
            column = pattern.format(p)
            if var is not None and p in var.parts:
                out[column] = dec[split][rows, var.parts.index(p)] * totals[split]
            else:
                out[column] = num(column, float(getattr(spec, p)))
    for c in ("scale_up", "scale_out"):
        out[f"{c}_neighbours"] = num(f"{c}_neighbours", float(getattr(device, f"{c}_neighbours")))
    for name in TECH_VARIABLES:
        if name in names:
            out[name] = dec[name][rows]
    if "hbm_num_stacks" in names:
        if "dram_technology" in names:
            footprint = np.array([t.stack_footprint_mm2 for t in space.resolved["dram_technology"]])
            per_stack = footprint[dec["dram_technology"][rows]]
        else:
            per_stack = np.full(n, device.dram_technology.stack_footprint_mm2)
        out["package_area_mm2"] = out["die_area_mm2"] + num("hbm_num_stacks", 1.0) * per_stack
    else:
        out["package_area_mm2"] = num("package_area_mm2", device.package_area_mm2)
    if "dram_stack_capacity_GiB" in names:  # replaces the DRAM technology's stack capacity
        out["dram_stack_capacity_B"] = num("dram_stack_capacity_GiB", 1.0) * 2**30
    return out


def _design_columns(space: DesignSpace, vals: dict[str, NDArray[Any]],
                    device: DesignDeviceSpec) -> dict[str, NDArray[Any]]:  # fmt: skip
    """The DESIGN_COLUMNS overrides of evaluate_table for the rows of ``vals``."""
    cols = {k: v for k, v in vals.items() if k in DESIGN_COLUMNS}
    for name in TECH_VARIABLES:
        if name in vals:
            for c, per_choice in _tech_columns(space, name, device).items():
                cols[c] = per_choice[vals[name]]
    if "dram_stack_capacity_B" in vals:  # a stack-capacity variable wins over the technology's
        cols["dram_stack_capacity_B"] = vals["dram_stack_capacity_B"]
    return cols


def _row_device(space: DesignSpace, device: DesignDeviceSpec, vals: dict[str, NDArray[Any]],
                i: int) -> DesignDeviceSpec:  # fmt: skip
    """Row ``i`` of ``vals`` as a design-mode device spec (for :func:`evaluate_one`)."""
    changes: dict[str, Any] = {
        "die_area_mm2": float(vals["die_area_mm2"][i]),
        "package_area_mm2": float(vals["package_area_mm2"][i]),
        "tdp_W": float(vals["tdp_W"][i]),
        "scale_up_neighbours": int(vals["scale_up_neighbours"][i]),
        "scale_out_neighbours": int(vals["scale_out_neighbours"][i]),
        "area_mm2": AreaBudgetSpec(**{p: float(vals[f"area_{p}_mm2"][i]) for p in AREA_PARTS}),
        "power_W": PowerBudgetSpec(**{p: float(vals[f"power_{p}_W"][i]) for p in POWER_PARTS}),
        "perimeter_fraction": PerimeterBudgetSpec(
            **{p: float(vals[f"perimeter_{p}"][i]) for p in PERIMETER_PARTS}
        ),
    }
    for name in TECH_VARIABLES:
        if name in vals:
            changes[name] = space.resolved[name][int(vals[name][i])]
    if "dram_stack_capacity_B" in vals:
        dram = changes.get("dram_technology", device.dram_technology)
        changes["dram_technology"] = dataclasses.replace(
            dram, stack_capacity_B=float(vals["dram_stack_capacity_B"][i])
        )
    return dataclasses.replace(device, **changes)


# ------------------------------------------------------------------------------- oracle
def _group_keys(space: DesignSpace, dec: dict[str, NDArray[Any]], n: int) -> NDArray[np.int64]:
    """(n, 6) group keys: choice indices or counts per GROUP_VARIABLES; -1 = the base's."""
    keys = np.full((n, len(GROUP_VARIABLES)), -1, dtype=np.int64)
    for j, name in enumerate(GROUP_VARIABLES):
        if name not in space.by_name:
            continue
        if name in ("devices_per_node", "num_nodes"):
            keys[:, j] = _values(space, dec, name, 0, n).astype(np.int64)
        else:
            keys[:, j] = dec[name]
    return keys


def _transformer_inputs(space: DesignSpace, dec: dict[str, NDArray[Any]], rows: I64,
                        n: int) -> dict[str, NDArray[Any]]:  # fmt: skip
    """Mapping and workload columns of evaluate_table for ``rows``."""
    names = space.by_name
    cols: dict[str, NDArray[Any]] = {}
    mapping = dec[_MAPPING][rows]
    for j, degree in enumerate(STRUCTURAL):
        if space.base_is_serving and degree not in SERVING_MAPPING:
            continue  # the serving model reads tp, pp, dp and ep only
        cols[degree] = mapping[:, j].astype(float)
    for knob in _KNOBS:
        if knob.name not in names:
            continue
        if knob.name == "sequence_parallel":  # off without tensor parallelism
            values = _sequence_parallel(space, dec, dec[_MAPPING], n).astype(float)
        else:
            values = _encoded(space, dec, knob)
        cols[knob.column] = values[rows]
    if "global_batch_size" in names:
        cols["global_batch_size"] = _values(space, dec, "global_batch_size", 1, n)[rows].astype(
            float
        )
    return cols


def _encoded(space: DesignSpace, dec: dict[str, NDArray[Any]], knob: Knob) -> F:
    """A mapping knob's column (all decoded rows), encoded by the knob table."""
    var = space.by_name[knob.name]
    if var.type in ("categorical", "fixed"):
        return np.array([knob.encode(c) for c in var.choices], dtype=float)[dec[knob.name]]
    return np.asarray(dec[knob.name], dtype=float)


def _batch_inputs(space: DesignSpace, dec: dict[str, NDArray[Any]], rows: I64,
                  n: int) -> dict[str, NDArray[Any]]:  # fmt: skip
    """The global batch of ``rows`` where the space varies it (workloads without a mapping
    table)."""
    if "global_batch_size" not in space.by_name:
        return {}
    return {"global_batch_size": _values(space, dec, "global_batch_size", 1, n)[rows].astype(float)}


def _evaluate(space: DesignSpace, dec: dict[str, NDArray[Any]], n: int) -> dict[str, F]:
    keys = _group_keys(space, dec, n)
    unique, inverse = unique_rows(keys)
    merged: dict[str, F] = {}
    for g, key in enumerate(unique):
        rows = np.flatnonzero(inverse == g)
        group = space.group(tuple(None if k < 0 else int(k) for k in key))
        scenario = group.scenario
        device = scenario.system.device
        cols = _transformer_inputs(space, dec, rows, n) if group.transformer else (
            _batch_inputs(space, dec, rows, n))  # fmt: skip
        if space.has_design_variables and isinstance(device, DesignDeviceSpec):
            cols.update(_design_columns(space, _design_values(space, dec, rows, n, device),
                                        device))  # fmt: skip
        result = evaluate_table(scenario, cols)
        for k, v in result.items():
            if k not in merged:
                # A constraint a group's device lacks (design budgets on a spec device) holds;
                # an output it lacks (die cost) is unknown.
                merged[k] = np.zeros(n) if k in CONSTRAINTS else np.full(n, np.nan)
            merged[k][rows] = v
    return merged


def output_names(space: DesignSpace) -> tuple[list[str], list[str]]:
    """The ``y_`` and ``c_`` column names (without prefix) of the space's datasets.

    Found by evaluating the base scenario once per kind of group (device mode x workload
    kind) the space can produce, so every chunk has the same columns.
    """
    cached = space.cache.get("outputs")
    if cached is not None:
        return cached
    devices = space.resolved.get("device", (space.base.system.device,))
    models = space.resolved.get("model", (space.base.workload.model,))
    seen: dict[tuple[bool, str], tuple[Any, Any]] = {}
    for d in devices:
        for m in models:
            seen.setdefault((isinstance(d, DesignDeviceSpec), m.kind), (d, m))
    names: dict[str, None] = {}
    for _key, (device, model) in seen.items():
        base = space.base
        scenario = dataclasses.replace(
            base, system=dataclasses.replace(base.system, device=device),
            workload=dataclasses.replace(base.workload, model=model),
        )  # fmt: skip
        names.update(dict.fromkeys(evaluate_table(scenario, {})))
    names.pop("feasible", None)
    y = [k for k in names if k not in CONSTRAINTS]
    c = [k for k in CONSTRAINTS if k in names]
    space.cache["outputs"] = (y, c)
    return y, c


# ------------------------------------------------------------------------------- arrow
def _x_type(space: DesignSpace, column: str) -> pa.DataType:
    for v in space.variables:
        if column not in v.columns:
            continue
        if v.type in ("continuous", "simplex"):
            return pa.float64()
        if v.type == "integer" or v.name in STRUCTURAL:
            return pa.int64()
        if v.name == "sequence_parallel":
            return pa.bool_()
        kinds = {type(c) for c in v.choices}
        if kinds == {bool}:
            return pa.bool_()
        if kinds <= {int}:
            return pa.int64()
        if kinds <= {int, float}:
            return pa.float64()
        return pa.string()
    return pa.int64()  # x_data_parallel (derived)


def arrow_schema(space: DesignSpace) -> pa.Schema:
    """The dataset's column schema (no file metadata)."""
    y, c = output_names(space)
    fields = [pa.field("sample_index", pa.int64())]
    fields += [pa.field(col, _x_type(space, col)) for col in space.x_columns()]
    fields += [pa.field(f"y_{k}", pa.float64()) for k in y]
    fields += [pa.field(f"c_{k}", pa.float64()) for k in c]
    fields += [
        pa.field("feasible", pa.bool_()),
        pa.field("oracle_version", pa.string()),
        pa.field("space_sha256", pa.string()),
        pa.field("seed", pa.int64()),
    ]
    return pa.schema(fields)


def label_rows(space: DesignSpace, *, seed: int, start: int, stop: int, num_samples: int,
               oracle_version: str) -> pa.Table:  # fmt: skip
    """Rows ``start..stop-1`` of the dataset of ``num_samples`` rows, as an Arrow table.

    The result depends only on the space, the seed, ``num_samples`` and the row range, and
    row i is the same whichever range it is computed in.
    """
    u = cube_rows(space, seed=seed, start=start, stop=stop, num_samples=num_samples)
    return label_points(space, u, seed=seed, sample_index=np.arange(start, stop, dtype=np.int64),
                        oracle_version=oracle_version)  # fmt: skip


def cube_rows(space: DesignSpace, *, seed: int, start: int, stop: int, num_samples: int) -> F:
    """Rows ``start..stop-1`` of the space's sampler sequence: the unit-cube points (n,
    ``space.num_dims``) that :func:`label_rows` labels."""
    levels, endpoints = space.grid_levels() if space.sampler == "grid" else ([], [])
    return unit_cube(space.sampler, seed=seed, start=start, stop=stop, num_samples=num_samples,
                     dims=space.num_dims, levels=levels, endpoints=endpoints)  # fmt: skip


def label_points(space: DesignSpace, u: F, *, oracle_version: str, seed: int = -1,
                 sample_index: I64 | None = None) -> pa.Table:  # fmt: skip
    """Label given points of the space's unit cube (rows of ``u``, shape (n, num_dims)).

    The columns are the dataset's (:func:`arrow_schema`); ``sample_index`` defaults to
    0..n-1 and ``seed`` to -1 (points not drawn by a sampler, e.g. proposed by a search).
    """
    u = np.asarray(u, dtype=float).reshape(-1, space.num_dims)
    n = u.shape[0]
    dec = decode(space, u)
    xs = x_columns(space, dec, n)
    result = _evaluate(space, dec, n)
    y_names, c_names = output_names(space)
    schema = arrow_schema(space)
    index = np.arange(n, dtype=np.int64) if sample_index is None else sample_index
    arrays: dict[str, Any] = {"sample_index": index}
    arrays.update(xs)
    for k in y_names:
        arrays[f"y_{k}"] = result.get(k, np.full(n, np.nan))
    for k in c_names:
        arrays[f"c_{k}"] = result.get(k, np.zeros(n))
    arrays["feasible"] = np.asarray(result["feasible"]) > 0
    arrays["seed"] = np.full(n, seed, dtype=np.int64)
    # String columns from codes into their few values: choices, and the provenance constants.
    same = np.zeros(n, dtype=np.int64)
    codes = {"oracle_version": (same, np.array([oracle_version])),
             "space_sha256": (same, np.array([space.sha256]))}  # fmt: skip
    for v in space.variables:
        if v.type in ("categorical", "fixed") and v.name in dec and f"x_{v.name}" in xs:
            codes[f"x_{v.name}"] = (dec[v.name], np.asarray(v.choices))
    columns = [_string_array(*codes[f.name]) if f.name in codes and pa.types.is_string(f.type)
               else _arrow_array(arrays[f.name], f.type) for f in schema]  # fmt: skip
    return pa.Table.from_arrays(columns, schema=schema)


def point_scenarios(space: DesignSpace, u: F) -> list[Scenario]:
    """Each row of ``u`` as the full scenario the oracle evaluates for it.

    ``evaluate_one(point_scenarios(space, u)[i])`` gives row i of :func:`label_points`
    (the batch equals the loop; tested), and ``deepflow evaluate`` reproduces it from the
    scenario written as YAML.
    """
    u = np.asarray(u, dtype=float).reshape(-1, space.num_dims)
    n = u.shape[0]
    dec = decode(space, u)
    keys = _group_keys(space, dec, n)
    out: list[Scenario | None] = [None] * n
    unique, inverse = unique_rows(keys)
    for g, key in enumerate(unique):
        rows = np.flatnonzero(inverse == g)
        scenario = space.group(tuple(None if k < 0 else int(k) for k in key)).scenario
        device = scenario.system.device
        vals = (_design_values(space, dec, rows, n, device)
                if space.has_design_variables and isinstance(device, DesignDeviceSpec)
                else None)  # fmt: skip
        cols = _transformer_inputs(space, dec, rows, n) if _MAPPING in dec else {}
        batch = _values(space, dec, "global_batch_size", scenario.workload.global_batch_size, n)
        for i, row in enumerate(rows):
            system = scenario.system
            if vals is not None:
                assert isinstance(device, DesignDeviceSpec)
                system = dataclasses.replace(system, device=_row_device(space, device, vals, i))
            workload = dataclasses.replace(scenario.workload, global_batch_size=int(batch[row]))
            mapping = scenario.mapping
            if cols:
                changes: dict[str, Any] = {d: int(cols[d][i]) for d in STRUCTURAL if d in cols}
                for knob in _KNOBS:
                    if knob.column in cols:
                        changes[knob.name] = knob.decode(cols[knob.column][i])
                mapping = dataclasses.replace(mapping, **changes)
            out[row] = dataclasses.replace(scenario, system=system, workload=workload,
                                           mapping=mapping)  # fmt: skip
    return [s for s in out if s is not None]


def _string_array(codes: I64, values: NDArray[Any]) -> pa.Array:
    """Strings ``values[codes]`` as an Arrow string array, assembled from the few distinct
    values' bytes (what ``pa.array(values[codes].tolist(), pa.string())`` gives)."""
    n = codes.shape[0]
    if values.dtype.kind != "U":  # e.g. None among the choices: Arrow makes it null
        return pa.array(values[codes].tolist(), type=pa.string())
    encoded = [s.encode("utf-8") for s in values.tolist()]
    if len(encoded) == 1 and n * len(encoded[0]) < 2**31:  # one value (provenance columns)
        offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(encoded[0]))
        data = np.frombuffer(encoded[0] * n, dtype=np.uint8)
        return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(data)])  # fmt: skip
    sizes = np.array([len(b) for b in encoded], dtype=np.int64)[codes]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    if offsets[-1] >= 2**31:  # beyond 32-bit string offsets: let Arrow split it
        return pa.array(values[codes].tolist(), type=pa.string())
    padded = np.zeros((len(encoded), max(max((len(b) for b in encoded), default=0), 1)),
                      dtype=np.uint8)  # fmt: skip
    for i, b in enumerate(encoded):
        padded[i, : len(b)] = np.frombuffer(b, dtype=np.uint8)
    data = padded[codes][np.arange(padded.shape[1]) < sizes[:, None]]
    buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), n, buffers)


def _arrow_array(values: Any, type_: pa.DataType) -> pa.Array:
    """A column of n values as an Arrow array of ``type_``, built from its buffers (numbers
    without a copy): ``pa.array`` gives the same arrays, but its first call imports pandas,
    half a second in every fresh worker process."""
    arr = np.asarray(values)
    n = arr.shape[0]
    if pa.types.is_string(type_) and arr.dtype.kind == "U":
        distinct, inverse = np.unique(arr, return_inverse=True)
        return _string_array(inverse.ravel().astype(np.int64), distinct)
    if pa.types.is_boolean(type_):
        bits = np.packbits(arr.astype(bool), bitorder="little")
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(bits)])
    dtype = {pa.float64(): np.float64, pa.int64(): np.int64}.get(type_)
    if dtype is None:  # other types (none in the schema): Arrow converts
        return pa.array(arr.tolist(), type=type_)
    data = np.ascontiguousarray(arr, dtype=dtype)
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(data)])

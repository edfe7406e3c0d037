"""Design-space YAML -> a validated :class:`DesignSpace` (schema: ``docs/spaces.md``).

A space is a base scenario (the contract's scenario YAML, by preset name, ``.yaml`` path or
inline) plus named variables that override parts of it. Each variable name is a knob of the
system, workload, mapping or design-mode device; its type says how it is sampled:
``continuous`` (linear or log), ``integer``, ``categorical``, ``simplex`` (parts summing to 1)
or ``fixed``. Everything a sweep could trip over later is checked here, once, with messages
that name the file and the dotted key; in particular every combination of system size, model
and batch must admit at least one valid mapping, so no invalid design is ever sampled.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config import (
    list_presets,
    load_device,
    load_model,
    load_network,
    load_scenario,
    read_yaml,
    scenario_from_mapping,
)
from deepflow.config import mapping as mapping_rules
from deepflow.config._schema import Ctx, check_choice, check_keys, describe_value, suggest
from deepflow.config.loader import load_technology_ref, parse_yaml, preset_file, preset_path
from deepflow.config.specs import (
    AREA_PARTS,
    PERIMETER_PARTS,
    POWER_PARTS,
    WORKLOAD_PRECISIONS,
    DesignDeviceSpec,
    ModelSpec,
    NetworkSpec,
    Scenario,
    TransformerSpec,
)
from deepflow.datasets.samplers import SAMPLERS, SOBOL_MAX_SAMPLES, grid_size, simplex_dims
from deepflow.errors import ConfigError, PlausibilityWarning

__all__ = [
    "AREA_PARTS",
    "PERIMETER_PARTS",
    "POWER_PARTS",
    "SERVING_MAPPING",
    "STRUCTURAL",
    "VARIABLE_TYPES",
    "DesignSpace",
    "Variable",
    "load_space",
    "plausibility_warnings",
    "space_from_text",
    "valid_mappings",
]

I64 = NDArray[np.int64]

VARIABLE_TYPES = ("continuous", "integer", "categorical", "simplex", "fixed")
TOP_KEYS = ("description", "base", "sampler", "chunk_size", "variables")
DEFAULT_CHUNK_SIZE = 65536
#: Grid levels of a continuous dimension (or a simplex coordinate) without ``levels``.
DEFAULT_GRID_LEVELS = 5
#: Up-front validity check: at most this many (devices, model, batch) combinations.
MAX_VALIDITY_KEYS = 100_000

#: Mapping degrees that must factorise the device count and fit the model: drawn jointly,
#: uniformly over the valid combinations (the order of the mapping table's columns).
STRUCTURAL = mapping_rules.STRUCTURAL
#: A simplex part that takes a share but sets nothing (uncore area, unused power or edge).
OTHER = "other"
SIMPLEXES = {"area_split": AREA_PARTS, "power_split": POWER_PARTS,
             "perimeter_split": PERIMETER_PARTS}  # fmt: skip
TECH_VARIABLES = {"technology": "logic", "dram_technology": "dram", "scale_up_link": "link",
                  "scale_out_link": "link"}  # fmt: skip
#: Variables that select the scenario the oracle is called with (one call per group).
GROUP_VARIABLES = ("device", "network", "devices_per_node", "num_nodes", "model", "precision")


@dataclass(frozen=True)
class _Domain:
    """What values a variable name admits."""

    kind: str  # real | int | bool | choice | preset | tech | simplex
    section: str  # system | workload | mapping | design
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    choices: tuple[str, ...] = ()
    preset: str = ""

    @property
    def types(self) -> tuple[str, ...]:
        return {
            "real": ("continuous", "integer", "categorical", "fixed"),
            "int": ("integer", "categorical", "fixed"),
            "simplex": ("simplex",),
        }.get(self.kind, ("categorical", "fixed"))

    def requirement(self) -> str:
        noun = {"real": "a number", "int": "an integer", "bool": "true or false"}.get(self.kind)
        if noun is None:
            return f"one of: {', '.join(self.choices)}"
        bounds = [f"{op} {describe_value(float(v))}" for op, v in
                  ((">", self.gt), (">=", self.ge), ("<=", self.le)) if v is not None]  # fmt: skip
        return " ".join([noun, " and ".join(bounds)]).strip()


#: The mapping keys a space may vary: the transformer's knobs of the knob table (the
#: design-space labeller passes exactly these on).
MAPPING_KNOBS = tuple(k.name for k in mapping_rules.knobs_of("transformer"))
#: The mapping keys a serving space may vary: the degrees the serving model reads
#: (``deepflow.oracle.workloads.inference.INFERENCE_COLUMNS``).
SERVING_MAPPING = ("tensor_parallel", "pipeline_parallel", "data_parallel", "expert_parallel")


def _mapping_domain(name: str) -> _Domain:
    """A mapping knob's domain from the knob table (type, range, choices)."""
    k = mapping_rules.KNOB[name]
    return _Domain(k.type, "mapping", ge=k.ge, le=k.le, choices=k.choices)


def _domains() -> dict[str, _Domain]:
    d: dict[str, _Domain] = {
        "device": _Domain("preset", "system", preset="devices"),
        "network": _Domain("preset", "system", preset="networks"),
        "devices_per_node": _Domain("int", "system", ge=1),
        "num_nodes": _Domain("int", "system", ge=1),
        "model": _Domain("preset", "workload", preset="models"),
        "global_batch_size": _Domain("int", "workload", ge=1),
        "precision": _Domain("choice", "workload", choices=WORKLOAD_PRECISIONS),
    }
    for name in MAPPING_KNOBS:
        d[name] = _mapping_domain(name)
    for name in TECH_VARIABLES:
        d[name] = _Domain("tech", "design", preset="technologies")
    for name in ("die_area_mm2", "package_area_mm2", "tdp_W", "dram_stack_capacity_GiB"):
        d[name] = _Domain("real", "design", gt=0)
    for name in ("scale_up_neighbours", "scale_out_neighbours", "hbm_num_stacks"):
        d[name] = _Domain("int", "design", ge=1)
    for p in AREA_PARTS:
        d[f"area_{p}_mm2"] = _Domain("real", "design", ge=0)
    for p in POWER_PARTS:
        d[f"power_{p}_W"] = _Domain("real", "design", ge=0)
    for p in PERIMETER_PARTS:
        d[f"perimeter_{p}"] = _Domain("real", "design", ge=0, le=1)
    for name in SIMPLEXES:
        d[name] = _Domain("simplex", "design")
    return d


DOMAINS = _domains()
#: YAML keys a variable of each type accepts.
TYPE_KEYS = {
    "continuous": ("type", "low", "high", "scale", "levels", "description"),
    "integer": ("type", "low", "high", "scale", "levels", "description"),
    "categorical": ("type", "choices", "description"),
    "simplex": ("type", "parts", "levels", "description"),
    "fixed": ("type", "value", "description"),
}


@dataclass(frozen=True)
class Variable:
    """One variable of a design space (values in the YAML's units; names carry the unit).

    ``categorical`` and ``fixed`` keep their values in ``choices`` (one for ``fixed``);
    ``simplex`` keeps its parts with per-part bounds.
    """

    name: str
    type: str
    low: float = 0.0
    high: float = 0.0
    scale: str = "linear"
    choices: tuple[Any, ...] = ()
    parts: tuple[str, ...] = ()
    part_low: tuple[float, ...] = ()
    part_high: tuple[float, ...] = ()
    levels: int | None = None
    description: str = ""

    @property
    def joint(self) -> bool:
        """A structural mapping degree: drawn with the others, over valid combinations only."""
        return self.name in STRUCTURAL

    @property
    def num_dims(self) -> int:
        """Unit-cube dimensions this variable draws (the joint mapping draw is separate)."""
        if self.joint:
            return 0
        if self.type == "simplex":
            return simplex_dims(self.part_low, self.part_high)
        if self.type == "fixed" or (self.type == "categorical" and len(self.choices) == 1):
            return 0
        return 1

    @property
    def columns(self) -> tuple[str, ...]:
        """Its ``x_`` column names in the dataset."""
        if self.type == "simplex":
            return tuple(f"x_{self.name}_{p}" for p in self.parts)
        return (f"x_{self.name}",)

    def grid_levels(self) -> list[int]:
        """Levels of each of its dimensions on a grid."""
        if self.type == "simplex":
            return [self.levels or DEFAULT_GRID_LEVELS] * self.num_dims
        if self.type == "continuous":
            return [self.levels or DEFAULT_GRID_LEVELS]
        if self.type == "integer":
            return [self.levels or int(self.high - self.low + 1)]
        return [len(self.choices)] if self.num_dims else []

    @property
    def varies(self) -> bool:
        """Whether it can take more than one value."""
        if self.type in ("categorical", "fixed"):
            return len(self.choices) > 1
        return not (self.type == "integer" and self.low == self.high)

    def candidates(self) -> tuple[Any, ...]:
        """Every value a discrete variable can take (integer ranges expanded)."""
        if self.type == "integer":
            return tuple(range(int(self.low), int(self.high) + 1))
        return self.choices

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (for the dataset's metadata)."""
        out: dict[str, Any] = {"name": self.name, "type": self.type, "columns": list(self.columns)}
        if self.type in ("continuous", "integer"):
            out.update(low=self.low, high=self.high, scale=self.scale)
        elif self.type == "simplex":
            out.update(parts=list(self.parts), low=list(self.part_low), high=list(self.part_high))
        else:
            out["choices"] = list(self.choices)
        return out


# ------------------------------------------------------------------------------- parsing
def _check_value(value: object, dom: _Domain, ctx: Ctx) -> Any:
    """One value of a variable's domain (a choice, a bound, a fixed value)."""
    if dom.kind in ("real", "int"):
        is_int = isinstance(value, int) and not isinstance(value, bool)
        ok = is_int if dom.kind == "int" else (
            isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))  # fmt: skip
        if ok:
            v = float(value)  # type: ignore[arg-type]
            ok = not (
                (dom.gt is not None and not v > dom.gt)
                or (dom.ge is not None and not v >= dom.ge)
                or (dom.le is not None and not v <= dom.le)
            )
        if not ok:
            raise ctx.invalid(dom.requirement(), value)
        return value
    if dom.kind == "bool":
        if not isinstance(value, bool):
            raise ctx.invalid("true or false", value)
        return value
    if dom.kind == "choice":
        return check_choice(value, dom.choices, ctx)
    # preset / tech: a preset name or a .yaml path, resolved later.
    if not isinstance(value, str) or not value:
        raise ctx.invalid("a preset name or a .yaml path", value)
    return value


def _bound(raw: Mapping[str, Any], key: str, dom: _Domain, ctx: Ctx, typ: str) -> float:
    if key not in raw or raw[key] is None:
        raise ctx.child(key).error("is required.")
    if typ == "integer":
        int_dom = dataclasses.replace(dom, kind="int")
        return float(_check_value(raw[key], int_dom, ctx.child(key)))
    return float(_check_value(raw[key], dom, ctx.child(key)))


def _levels(raw: Mapping[str, Any], ctx: Ctx) -> int | None:
    value = raw.get("levels")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ctx.child("levels").invalid("an integer >= 1", value)
    return value


def _simplex(name: str, raw: Mapping[str, Any], ctx: Ctx) -> Variable:
    valid = (*SIMPLEXES[name], OTHER)
    pctx = ctx.child("parts")
    parts_raw = raw.get("parts")
    if parts_raw is None:
        raise pctx.error(f"is required (a list or mapping of parts from: {', '.join(valid)}).")
    if isinstance(parts_raw, list):
        entries: dict[str, Any] = {}
        for i, p in enumerate(parts_raw):
            if not isinstance(p, str):
                raise pctx.child(i).invalid("a part name", p)
            if p in entries:
                raise pctx.child(i).error(f"repeats part '{p}'.")
            entries[p] = None
    elif isinstance(parts_raw, Mapping):
        entries = {str(k): v for k, v in parts_raw.items()}
    else:
        raise pctx.invalid("a list of part names or a mapping part: [low, high]", parts_raw)
    check_keys(entries, valid, pctx)
    if len(entries) < 2:
        raise pctx.error(f"must name at least 2 parts; got {len(entries)}.")
    lows, highs = [], []
    for part, bounds in entries.items():
        bctx = pctx.child(part)
        if bounds is None:
            lo, hi = 0.0, 1.0
        else:
            numbers = isinstance(bounds, list) and all(
                isinstance(b, int | float) and not isinstance(b, bool) for b in bounds
            )
            ok = numbers and len(bounds) == 2
            if not ok or not 0 <= bounds[0] <= bounds[1] <= 1:
                shown = json.dumps(bounds) if isinstance(bounds, list) else describe_value(bounds)
                raise bctx.error(f"must be [low, high] with 0 <= low <= high <= 1; got {shown}.")
            lo, hi = float(bounds[0]), float(bounds[1])
        lows.append(lo)
        highs.append(hi)
    if sum(lows) > 1 + 1e-12:
        raise pctx.error(f"lower bounds sum to {sum(lows):.6g} > 1; the parts cannot sum to 1.")
    if sum(highs) < 1 - 1e-12:
        raise pctx.error(f"upper bounds sum to {sum(highs):.6g} < 1; the parts cannot sum to 1.")
    return Variable(
        name=name, type="simplex", parts=tuple(entries), part_low=tuple(lows),
        part_high=tuple(highs), levels=_levels(raw, ctx),
        description=str(raw.get("description", "")),
    )  # fmt: skip


def _variable(name: str, raw: object, ctx: Ctx) -> Variable:
    dom = DOMAINS[name]
    if not isinstance(raw, Mapping):  # shorthand: `name: value` is a fixed variable
        if dom.kind == "simplex":
            raise ctx.invalid("a mapping with type: simplex", raw)
        return Variable(name=name, type="fixed", choices=(_check_value(raw, dom, ctx),))
    typ = raw.get("type")
    tctx = ctx.child("type")
    if typ is None:
        raise tctx.error(f"is required (one of: {', '.join(VARIABLE_TYPES)}).")
    if typ not in VARIABLE_TYPES:
        near = suggest(typ, VARIABLE_TYPES) if isinstance(typ, str) else None
        hint = f" (did you mean '{near}'?)" if near else ""
        raise tctx.error(
            f"must be one of: {', '.join(VARIABLE_TYPES)}; got {describe_value(typ)}{hint}."
        )
    if typ not in dom.types:
        raise tctx.error(f"must be {' or '.join(dom.types)} for {name}; got {describe_value(typ)}.")
    check_keys(raw, TYPE_KEYS[typ], ctx)
    description = str(raw.get("description", ""))
    if typ == "simplex":
        return _simplex(name, raw, ctx)
    if typ == "fixed":
        if raw.get("value") is None:
            raise ctx.child("value").error("is required.")
        value = _check_value(raw["value"], dom, ctx.child("value"))
        return Variable(name=name, type="fixed", choices=(value,), description=description)
    if typ == "categorical":
        cctx = ctx.child("choices")
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise cctx.invalid("a non-empty list", choices)
        values = tuple(_check_value(c, dom, cctx.child(i)) for i, c in enumerate(choices))
        for i, v in enumerate(values):
            if values.index(v) != i:
                raise cctx.child(i).error(f"repeats {describe_value(v)}.")
        return Variable(name=name, type="categorical", choices=values, description=description)
    low = _bound(raw, "low", dom, ctx, typ)
    high = _bound(raw, "high", dom, ctx, typ)
    scale = raw.get("scale", "linear")
    if scale not in ("linear", "log"):
        raise ctx.child("scale").error(f"must be one of: linear, log; got {describe_value(scale)}.")
    if typ == "continuous" and not high > low:
        raise ctx.child("high").error(
            f"must be > low ({describe_value(low)}); got {describe_value(high)}: "
            "the range is empty."
        )
    if typ == "integer" and not high >= low:
        raise ctx.child("high").error(
            f"must be >= low ({describe_value(low)}); got {describe_value(high)}: "
            "the range is empty."
        )
    if scale == "log" and not low > 0:
        raise ctx.child("low").invalid("> 0 with scale: log", low)
    return Variable(name=name, type=typ, low=low, high=high, scale=str(scale),
                    levels=_levels(raw, ctx), description=description)  # fmt: skip


# ----------------------------------------------------------------------------- the space
@dataclass(frozen=True)
class _Group:
    """The scenario of one oracle call: device, network, size, model and precision."""

    scenario: Scenario
    transformer: bool


@dataclass
class DesignSpace:
    """A validated design space: base scenario, variables and how to sample them.

    Build with :func:`load_space` or :func:`space_from_text`. ``text`` is the YAML as written;
    ``sha256`` is its hash (the datasets' ``space_sha256``). The space is re-read from its text
    in worker processes (specs hold read-only mappings that do not pickle).
    """

    file: str
    text: str
    base_dir: str
    description: str
    base: Scenario
    sampler: str
    chunk_size: int
    variables: tuple[Variable, ...]
    #: Resolved values of preset/technology choices, by variable name, in choice order.
    resolved: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    #: Candidate values of each structural mapping degree (None: derived data_parallel).
    candidates: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    #: Valid mapping table (rows of STRUCTURAL) per (num_devices, model index, batch).
    mapping_tables: dict[tuple[int, int, int], I64] = field(default_factory=dict)
    _groups: dict[tuple[Any, ...], _Group] = field(default_factory=dict, repr=False)
    #: Per-process memo of derived tables (technology columns, output names).
    cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------------ structure
    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @functools.cached_property
    def by_name(self) -> dict[str, Variable]:
        return {v.name: v for v in self.variables}

    @property
    def has_mapping_dim(self) -> bool:
        """Whether the mapping is drawn (some structural degree has more than one candidate)."""
        return any(c is not None and len(c) > 1 for c in self.candidates.values())

    @property
    def derives_data_parallel(self) -> bool:
        """Whether ``x_data_parallel`` is a derived column (not declared, but it varies)."""
        if not self.base_is_transformer or "data_parallel" in self.by_name:
            return False
        varying = {v.name for v in self.variables if v.varies}
        return bool(varying & {"tensor_parallel", "pipeline_parallel", "context_parallel",
                               "devices_per_node", "num_nodes"})  # fmt: skip

    @property
    def has_design_variables(self) -> bool:
        return any(DOMAINS[v.name].section == "design" for v in self.variables)

    @property
    def base_is_transformer(self) -> bool:
        return isinstance(self.base.workload.model, TransformerSpec)

    @property
    def base_is_serving(self) -> bool:
        """A serving space (``workload.kind: inference``): mappings by the serving rules, and
        only the degrees the serving model reads (:data:`SERVING_MAPPING`)."""
        return self.base.workload.kind == "inference"

    @property
    def num_dims(self) -> int:
        return sum(v.num_dims for v in self.variables) + int(self.has_mapping_dim)

    def grid_levels(self) -> tuple[list[int], list[bool]]:
        """Levels and whether endpoints are included, per cube dimension."""
        levels: list[int] = []
        endpoints: list[bool] = []
        for v in self.variables:
            lv = v.grid_levels() if v.num_dims else []
            levels += lv
            endpoints += [v.type in ("continuous", "simplex")] * len(lv)
        if self.has_mapping_dim:
            levels.append(max(len(t) for t in self.mapping_tables.values()))
            endpoints.append(False)
        return levels, endpoints

    def grid_size(self) -> int:
        return grid_size(self.grid_levels()[0])

    def x_columns(self) -> list[str]:
        cols = [c for v in self.variables for c in v.columns]
        if self.derives_data_parallel:
            cols.append("x_data_parallel")
        return cols

    def check_num_samples(self, num_samples: int) -> None:
        """Raise if the sampler cannot draw ``num_samples`` points."""
        ctx = Ctx(self.file, "sampler")
        if self.sampler == "grid" and num_samples > self.grid_size():
            raise ctx.error(
                f"grid has {self.grid_size():,} points; --num-samples {num_samples:,} asks "
                "for more."
            )
        if self.sampler == "sobol" and num_samples > SOBOL_MAX_SAMPLES:
            raise ctx.error(
                f"sobol draws at most 2**30 points; --num-samples {num_samples:,} asks for more."
            )

    # ------------------------------------------------------------------ groups
    def choice(self, name: str, index: int) -> Any:
        """The resolved value of choice ``index`` of variable ``name`` (spec or value)."""
        return self.resolved[name][index] if name in self.resolved else (
            self.by_name[name].choices[index])  # fmt: skip

    def group(self, key: tuple[Any, ...]) -> _Group:
        """The scenario for one combination of :data:`GROUP_VARIABLES` values.

        ``key`` holds, per group variable, a choice index (device, network, model, precision)
        or a count (devices_per_node, num_nodes); None keeps the base scenario's.
        """
        cached = self._groups.get(key)
        if cached is not None:
            return cached
        device_i, network_i, per_node, nodes, model_i, precision_i = key
        base = self.base
        system = base.system
        device = system.device if device_i is None else self.choice("device", device_i)
        network = system.network if network_i is None else self.choice("network", network_i)
        system = dataclasses.replace(
            system, device=device, network=network,
            devices_per_node=system.devices_per_node if per_node is None else int(per_node),
            num_nodes=system.num_nodes if nodes is None else int(nodes),
        )  # fmt: skip
        workload = base.workload
        if model_i is not None:
            workload = dataclasses.replace(workload, model=self.choice("model", model_i))
        if precision_i is not None:
            workload = dataclasses.replace(
                workload, precision=self.choice("precision", precision_i)
            )
        scenario = dataclasses.replace(base, system=system, workload=workload)
        group = _Group(scenario=scenario, transformer=isinstance(workload.model, TransformerSpec))
        self._groups[key] = group
        return group


# ------------------------------------------------------------------------ resolution
def _preset_ref(kind: str, value: str, ctx: Ctx, base_dir: Path) -> Any:
    noun = {"devices": "device", "networks": "network", "models": "model"}[kind]
    if value.endswith((".yaml", ".yml")):
        path = base_dir / value
        if not path.is_file():
            raise ctx.error(f"refers to {value!r}, but {path} does not exist.")
    elif preset_path(kind, value) is None:
        names = list_presets(kind)
        near = suggest(value, names)
        hint = f"; did you mean '{near}'?" if near else "."
        raise ctx.error(
            f"names an unknown {noun} preset {value!r}{hint} Available: {', '.join(names)}."
        )
    loader = {"devices": load_device, "networks": load_network, "models": load_model}[kind]
    return loader(value, base_dir=base_dir)


def _base(raw: object, ctx: Ctx, base_dir: Path) -> Scenario:
    if raw is None:
        raise ctx.error("is required (a scenario preset name, a .yaml path or a mapping).")
    if isinstance(raw, str):
        if raw.endswith((".yaml", ".yml")):
            path = base_dir / raw
            if not path.is_file():
                raise ctx.error(f"refers to {raw!r}, but {path} does not exist.")
        else:
            found = preset_path("scenarios", raw)
            if found is None:
                names = list_presets("scenarios")
                near = suggest(raw, names)
                hint = f"; did you mean '{near}'?" if near else "."
                raise ctx.error(
                    f"names an unknown scenario preset {raw!r}{hint} Available: {', '.join(names)}."
                )
            path = found
        return load_scenario(path)
    if isinstance(raw, Mapping):
        return scenario_from_mapping(raw, file=f"{ctx.file}: base", base_dir=base_dir)
    raise ctx.invalid("a scenario preset name, a .yaml path or a scenario mapping", raw)


def _resolve_choices(space: DesignSpace, top: Ctx, base_dir: Path) -> None:
    for var in space.variables:
        dom = DOMAINS[var.name]
        if dom.kind not in ("preset", "tech"):
            continue
        vctx = top.child("variables").child(var.name)
        resolved = []
        for i, value in enumerate(var.choices):
            cctx = vctx.child("choices").child(i) if var.type == "categorical" else (
                vctx.child("value") if var.type == "fixed" else vctx)  # fmt: skip
            if dom.kind == "tech":
                resolved.append(load_technology_ref(
                    value, cctx, base_dir, kind=TECH_VARIABLES[var.name]))  # fmt: skip
            else:
                resolved.append(_preset_ref(dom.preset, value, cctx, base_dir))
        space.resolved[var.name] = tuple(resolved)


def _options(space: DesignSpace, name: str, base_value: Any) -> tuple[Any, ...]:
    """All values a scenario part can take: the variable's resolved choices or the base's."""
    var = space.by_name.get(name)
    if var is None:
        return (base_value,)
    if name in space.resolved:
        return space.resolved[name]
    return var.candidates()


def _check_combinations(space: DesignSpace, top: Ctx) -> None:
    """Rules across variables: sections vs base, conflicts, system and precision support."""
    vctx = top.child("variables")
    names = space.by_name
    base = space.base
    if base.mapping.prefill_replicas:
        pools = top.child("base").child("mapping").child("prefill_replicas")
        raise pools.error(
            f"({base.mapping.prefill_replicas}) splits the replicas into disaggregated pools, "
            "but a space's mappings are co-located splits of its devices; evaluate pools one "
            "scenario at a time (deepflow evaluate, deepflow best-mapping)."
        )
    devices: tuple[Any, ...] = _options(space, "device", base.system.device)
    models: tuple[ModelSpec, ...] = _options(space, "model", base.workload.model)
    networks: tuple[NetworkSpec, ...] = _options(space, "network", base.system.network)
    for name in names:
        section = DOMAINS[name].section
        if section == "design":
            spec_mode = [d.name for d in devices if not isinstance(d, DesignDeviceSpec)]
            if spec_mode:
                raise vctx.child(name).error(
                    f"needs a design-mode device; {spec_mode[0]} is a spec-mode device."
                )
        if name == "expert_tensor_parallel":
            raise vctx.child(name).error(
                "cannot vary: which expert-parallel degrees are valid depends on it; set it in "
                "base.mapping (one space per expert layout)."
            )
        if name == "data_parallel_replicas":
            raise vctx.child(name).error(
                "cannot vary: which data-parallel degrees are valid depends on it; set it in "
                "base.mapping (one space per hybrid-sharding layout)."
            )
        if section == "mapping" and space.base_is_serving and name not in SERVING_MAPPING:
            raise vctx.child(name).error(
                f"is not read by the serving model (workload.kind: inference varies "
                f"{', '.join(SERVING_MAPPING)})."
            )
        if section == "mapping":
            other = [m for m in models if not isinstance(m, TransformerSpec)]
            if other:
                raise vctx.child(name).error(
                    f"needs a transformer workload; model {other[0].name} is a "
                    f"{other[0].kind} model."
                )
    conflicts = [(f"area_{p}_mm2", "area_split", p) for p in AREA_PARTS]
    conflicts += [(f"power_{p}_W", "power_split", p) for p in POWER_PARTS]
    conflicts += [(f"perimeter_{p}", "perimeter_split", p) for p in PERIMETER_PARTS]
    for single, split, part in conflicts:
        if single in names and split in names and part in names[split].parts:
            raise vctx.child(single).error(
                f"conflicts with variables.{split}, which also sets the {part} share."
            )
    if "hbm_num_stacks" in names and "package_area_mm2" in names:
        raise vctx.child("hbm_num_stacks").error(
            "conflicts with variables.package_area_mm2 (hbm_num_stacks sets the package area)."
        )
    per_node = _options(space, "devices_per_node", base.system.devices_per_node)
    for net in networks:
        too_big = [n for n in per_node if n > net.scale_up.domain_size]
        if too_big:
            raise vctx.child("devices_per_node").error(
                f"({too_big[0]}) exceeds network {net.name}'s scale_up.domain_size "
                f"({net.scale_up.domain_size})."
            )
    precisions = _options(space, "precision", base.workload.precision)
    techs: tuple[Any, ...] = space.resolved.get("technology", (None,))
    for device, tech, precision in itertools.product(devices, techs, precisions):
        supported = device.precisions if tech is None else tuple(tech.precision_ratio)
        if precision not in supported:
            listed = f"(it lists: {', '.join(supported)})."
            if tech is not None:
                key, text = "technology", f"({tech.name}) does not support precision {precision}"
            elif "device" in names:
                key, text = "device", f"({device.name}) does not support precision {precision}"
            else:
                key, text = "precision", f"({precision}) is not supported by device {device.name}"
            raise vctx.child(key).error(f"{text} {listed}")
    if "global_batch_size" in names and not space.base_is_transformer:
        m = base.mapping
        per_step = m.data_parallel * m.micro_batch_size
        bad = [b for b in names["global_batch_size"].candidates() if b % per_step]
        if bad:
            raise vctx.child("global_batch_size").error(
                f"({bad[0]}) is not divisible by data_parallel {m.data_parallel} × "
                f"micro_batch_size {m.micro_batch_size} = {per_step}."
            )


def _divides(a: int, b: int) -> bool:
    return b % a == 0


def valid_mappings(
    num_devices: int, model: TransformerSpec, batch: int,
    candidates: Mapping[str, tuple[int, ...] | None], *, serving: bool = False,
    pipeline_balance: str = "layers", expert_tensor_parallel: int = 0,
    data_parallel_replicas: int = 1,
) -> I64:  # fmt: skip
    """Every valid combination of the structural degrees (rows in :data:`STRUCTURAL` order),
    by the mapping rules the scenario loader applies (:mod:`deepflow.config.mapping`; a
    serving space's by the serving rules), with the base mapping's pipeline split and expert
    tensor parallelism and hybrid-sharding replicas."""
    fixed = {
        "pipeline_balance": pipeline_balance,
        "expert_tensor_parallel": expert_tensor_parallel,
        "data_parallel_replicas": data_parallel_replicas,
    }
    return mapping_rules.valid_mappings(num_devices, model, batch, candidates, serving=serving,
                                        fixed=fixed)  # fmt: skip


def _mapping_tables(space: DesignSpace, top: Ctx) -> None:
    """Candidates per structural degree and the valid table per (devices, model, batch)."""
    if not space.base_is_transformer:
        return
    names = space.by_name
    m = space.base.mapping
    for degree in STRUCTURAL:
        var = names.get(degree)
        if var is not None:
            space.candidates[degree] = tuple(sorted(int(v) for v in var.candidates()))
        elif degree == "data_parallel":
            space.candidates[degree] = None
        else:
            space.candidates[degree] = (int(getattr(m, degree)),)
    base = space.base
    per_node = _options(space, "devices_per_node", base.system.devices_per_node)
    nodes = _options(space, "num_nodes", base.system.num_nodes)
    models = _options(space, "model", base.workload.model)
    batches = _options(space, "global_batch_size", base.workload.global_batch_size)
    counts = sorted({int(a) * int(b) for a in per_node for b in nodes})
    total = len(counts) * len(models) * len(batches)
    if total > MAX_VALIDITY_KEYS:
        raise top.child("variables").error(
            f"{total:,} combinations of system size, model and global_batch_size exceed "
            f"{MAX_VALIDITY_KEYS:,}; give some of them as categorical choices."
        )
    declared = [d for d in STRUCTURAL if d in names] or ["(none: the base mapping's degrees)"]
    for n, (mi, model), batch in itertools.product(counts, enumerate(models), batches):
        table = valid_mappings(n, model, int(batch), space.candidates,
                               serving=space.base_is_serving,
                               pipeline_balance=space.base.mapping.pipeline_balance,
                               expert_tensor_parallel=m.expert_tensor_parallel,
                               data_parallel_replicas=m.data_parallel_replicas)  # fmt: skip
        if not len(table):
            raise top.child("variables").error(
                f"admit no valid mapping for {n} devices, model {model.name}, global_batch_size "
                f"{batch} within the declared mapping variables: {', '.join(declared)}."
            )
        space.mapping_tables[(n, mi, int(batch))] = table


def space_from_text(text: str, *, file: str = "<space>", base_dir: str | Path | None = None,
                    raw: Mapping[str, Any] | None = None) -> DesignSpace:  # fmt: skip
    """Build a :class:`DesignSpace` from its YAML text.

    Args:
        text: the space YAML (kept verbatim: its hash is the datasets' ``space_sha256``).
        file: the name shown in messages.
        base_dir: where relative ``.yaml`` references are resolved (default: cwd).
        raw: the already parsed text (to skip parsing again).

    Raises:
        ConfigError: the message names the file and the dotted key of the first problem.
    """
    directory = Path(base_dir) if base_dir is not None else Path.cwd()
    top = Ctx(file)
    if raw is None:
        raw = parse_yaml(text, file)
        if not isinstance(raw, Mapping):
            raise ConfigError(
                f"{file}: top level must be a design-space mapping; got {describe_value(raw)}."
            )
    check_keys(raw, TOP_KEYS, top)
    base = _base(raw.get("base"), top.child("base"), directory)
    sampler = raw.get("sampler", "sobol")
    if sampler not in SAMPLERS:
        near = suggest(sampler, SAMPLERS) if isinstance(sampler, str) else None
        hint = f" (did you mean '{near}'?)" if near else ""
        raise top.child("sampler").error(
            f"must be one of: {', '.join(SAMPLERS)}; got {describe_value(sampler)}{hint}."
        )
    chunk = raw.get("chunk_size", DEFAULT_CHUNK_SIZE)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise top.child("chunk_size").invalid("an integer >= 1", chunk)
    vraw = raw.get("variables")
    vctx = top.child("variables")
    if not isinstance(vraw, Mapping) or not vraw:
        raise vctx.invalid("a non-empty mapping of variables", vraw)
    check_keys(vraw, list(DOMAINS), vctx)
    variables = tuple(_variable(str(k), v, vctx.child(str(k))) for k, v in vraw.items())
    space = DesignSpace(
        file=file, text=text, base_dir=str(directory.resolve()),
        description=str(raw.get("description", "")), base=base, sampler=str(sampler),
        chunk_size=chunk, variables=variables,
    )  # fmt: skip
    _resolve_choices(space, top, directory)
    _check_combinations(space, top)
    _mapping_tables(space, top)
    return space


def load_space(path: str | Path) -> DesignSpace:
    """Read and validate a design-space YAML file (``configs/spaces/*.yaml``).

    A bare name (no ``.yaml``) that is not a file is looked up as a preset in
    ``configs/spaces/``.

    Raises:
        ConfigError: the message names the file and the dotted key of the problem.
    """
    p = preset_file("spaces", "space", path)
    raw = read_yaml(p, what="a design-space mapping")
    text = p.read_text(encoding="utf-8")
    space = space_from_text(text, file=str(path), base_dir=p.resolve().parent, raw=raw)
    for message in plausibility_warnings(space, base=isinstance(raw.get("base"), Mapping)):
        warnings.warn(message, PlausibilityWarning, stacklevel=2)
    return space


def _values(var: Variable, where: str) -> list[tuple[str, Any]]:
    """The values a variable declares, each with its dotted key: bounds, choices or value."""
    if var.type in ("continuous", "integer"):
        return [(f"{where}.low", var.low), (f"{where}.high", var.high)]
    if var.type == "categorical":
        return [(f"{where}.choices[{i}]", c) for i, c in enumerate(var.choices)]
    if var.type == "fixed":
        return [(where, var.choices[0])]
    return []


def plausibility_warnings(space: DesignSpace, *, base: bool = True) -> list[str]:
    """Messages for the values of ``space`` far outside any real device or run (most often a
    unit slip; :mod:`deepflow.config.plausibility`): bounds, choices and fixed values of the
    budgets (``die_area_mm2``, ``tdp_W``, ``dram_stack_capacity_GiB``) and of
    ``global_batch_size``, the devices and networks given as choices and, with ``base``, the
    base scenario.

    Each message starts with the space file and the dotted key, e.g. ``sp.yaml:
    variables.tdp_W.low = 5 is far below the range of real devices (75–1200 W); check its
    unit.``
    """
    from deepflow.config import plausibility as plaus

    found: list[str | None] = [m.removeprefix(f"{space.file}: ") for m in
                               plaus.plausibility_warnings(space.base)] if base else []  # fmt: skip
    models = _options(space, "model", space.base.workload.model)
    for var in space.variables:
        where = f"variables.{var.name}"
        for key, value in _values(var, where):
            if var.name in plaus.RANGES:
                found.append(plaus.value_warning(var.name, float(value), key))
            elif var.name == "global_batch_size":
                found.extend(plaus.batch_warning(int(value), m, key) for m in models)
        if var.name in ("device", "network"):  # a preset or .yaml per choice
            keys = [k for k, _ in _values(var, where)]
            for key, spec in zip(keys, space.resolved[var.name], strict=True):
                found.extend(plaus.device_warnings(spec, key) if var.name == "device"
                             else plaus.link_warnings(spec, key))  # fmt: skip
    unique = dict.fromkeys(m for m in found if m is not None)  # a batch bound, several models
    return [f"{space.file}: {m}" for m in unique]

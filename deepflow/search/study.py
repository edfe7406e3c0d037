"""Study YAML (``configs/studies/*.yaml``): a design space, objectives, constraints, a search.

Schema (every key but ``space`` and ``objectives`` optional)::

    name: default                        # default: the file's stem
    description: "..."
    space: ../spaces/llm-pathfinding.yaml  # a space file (relative to the study) or preset name
    objectives:                          # oracle outputs (y_ columns without the prefix)
      - {name: step_time_s, direction: minimize, reference: 120, ideal: 10, scale: log}
      - {name: area_mm2}                 # reference/ideal: inferred from the initial designs
    constraints:                         # user bounds; the oracle's c_ columns always apply
      - {name: energy_per_step_J, max: 2.0e7}
    search:
      strategy: surrogate                # botorch | nsga2 | tpe | gp | random | surrogate
      budget: 96                         # oracle evaluations
      batch_size: 8                      # designs per ask (BoTorch q, NSGA-II population)
      initial_points: 16                 # space-filling start (Sobol)
      seed: 0
    surrogate:                           # surrogate-assisted search (strategy: surrogate)
      model: mlp                         # mlp | gp | svgp | gbt
      num_samples: 20000                 # oracle-labelled designs to train on (0: trials only)
      inner_strategy: nsga2              # run on the surrogate each round: nsga2|tpe|gp|random
      inner_budget: 2000                 # surrogate evaluations of that strategy per round
      pool_size: 20000                   # random + mutated designs scored per round
      refit: true                        # refit on the new oracle evaluations every round
      path: ""                           # a folder from `deepflow fit` (skips sampling/fitting)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepflow.config._schema import Ctx, build, check_keys, describe_value, key, require_mapping
from deepflow.config.loader import read_yaml
from deepflow.datasets.label import output_names
from deepflow.datasets.space import DesignSpace, load_space
from deepflow.errors import ConfigError
from deepflow.search.objectives import Bound, Objective
from deepflow.search.registry import INNER_STRATEGIES, STRATEGIES

__all__ = [
    "STRATEGIES",
    "SearchSettings",
    "Study",
    "SurrogateSettings",
    "load_study",
    "study_from_mapping",
]

# Search strategies: deepflow.search.registry (``surrogate`` runs ``surrogate.inner_strategy``
# on a surrogate; BoTorch acquisitions over a surrogate go through deepflow.surrogate's
# BoTorch adapter).
_SURROGATE_MODELS = ("mlp", "gp", "svgp", "gbt")
TOP_KEYS = ("name", "description", "space", "objectives", "constraints", "search", "surrogate")
DEFAULT_OBJECTIVES = ("step_time_s", "area_mm2", "power_W")


@dataclass(frozen=True)
class SearchSettings:
    """How the search runs."""

    strategy: str = key("strategy", choices=STRATEGIES, default="botorch")
    budget: int = key("budget", ge=1, default=64, doc="oracle evaluations")
    batch_size: int = key("batch_size", ge=1, default=8, doc="designs per ask")
    initial_points: int = key("initial_points", ge=0, default=16, doc="Sobol start")
    seed: int = key("seed", ge=0, default=0)
    prescreen_evaluations: int = key(
        "prescreen_evaluations", ge=0, default=0,
        doc="oracle evaluations of a MOEA/D run first (random, botorch, surrogate)",
    )  # fmt: skip
    prescreen_population: int = key("prescreen_population", ge=2, default=1000,
                                    doc="its population")  # fmt: skip
    prescreen_points: int = key("prescreen_points", ge=1, default=1024,
                                doc="its Pareto designs kept as trials (thinned)")  # fmt: skip


@dataclass(frozen=True)
class SurrogateSettings:
    """Surrogate-assisted search (strategy ``surrogate``) and ``deepflow run``'s fit step."""

    model: str = key("model", choices=_SURROGATE_MODELS, default="mlp")
    num_samples: int = key("num_samples", ge=0, default=0, doc="oracle-labelled designs")
    inner_strategy: str = key("inner_strategy", choices=INNER_STRATEGIES, default="nsga2")
    inner_budget: int = key("inner_budget", ge=0, default=2000, doc="surrogate evaluations")
    pool_size: int = key("pool_size", ge=0, default=20000, doc="designs scored per round")
    refit: bool = key("refit", default=True)
    path: str = key("path", default="", doc="a fitted surrogate folder (deepflow fit)")


@dataclass(frozen=True)
class Study:
    """A validated study: its space, objectives, user bounds and settings."""

    name: str
    description: str
    file: str
    space: DesignSpace
    space_ref: str
    objectives: tuple[Objective, ...]
    bounds: tuple[Bound, ...]
    search: SearchSettings
    surrogate: SurrogateSettings
    text: str = ""

    @property
    def constraint_names(self) -> list[str]:
        """The oracle's constraint columns this space has (``c_`` without the prefix)."""
        return list(output_names(self.space)[1])

    def replace(self, **search: Any) -> Study:
        """A copy with search settings overridden (CLI flags); None values are ignored."""
        changes = {k: v for k, v in search.items() if v is not None}
        if not changes:
            return self
        top = Ctx(self.file, "search")
        for name, value in changes.items():
            field = {f.name: f for f in dataclasses.fields(SearchSettings)}[name]
            if field.metadata.get("choices") and value not in field.metadata["choices"]:
                from deepflow.config._schema import check_choice

                check_choice(value, field.metadata["choices"], top.child(name))
            if field.metadata.get("ge") is not None and int(value) < field.metadata["ge"]:
                raise ConfigError(
                    f"--{name.replace('_', '-')} must be >= {field.metadata['ge']}; "
                    f"got {describe_value(value)}."
                )
        return dataclasses.replace(self, search=dataclasses.replace(self.search, **changes))


def _objective(raw: object, ctx: Ctx, outputs: list[str]) -> Objective:
    if isinstance(raw, str):
        raw = {"name": raw}
    obj = build(Objective, raw, ctx)
    _check_output(obj.name, ctx.child("name"), outputs)
    for side in ("reference", "ideal"):
        value = getattr(obj, side)
        if obj.scale == "log" and math.isfinite(value) and value <= 0:
            raise ctx.child(side).invalid("> 0 with scale: log", value)
    if math.isfinite(obj.reference) and math.isfinite(obj.ideal):
        better = (
            obj.ideal < obj.reference
            if obj.direction == "minimize"
            else (obj.ideal > obj.reference)
        )
        if not better:
            word = "below" if obj.direction == "minimize" else "above"
            raise ctx.child("ideal").error(
                f"must be {word} reference ({describe_value(obj.reference)}) for a "
                f"{obj.direction}d objective; got {describe_value(obj.ideal)}."
            )
    return obj


def _check_output(name: str, ctx: Ctx, outputs: list[str]) -> None:
    if name not in outputs:
        from deepflow.config._schema import suggest

        near = suggest(name, outputs)
        hint = f" (did you mean '{near}'?)" if near else ""
        raise ctx.error(
            f"must be an output of the space's oracle; got {describe_value(name)}{hint}. "
            f"Outputs: {', '.join(outputs)}."
        )


def _bound(raw: object, ctx: Ctx, outputs: list[str]) -> Bound:
    b = build(Bound, raw, ctx)
    _check_output(b.name, ctx.child("name"), outputs)
    if not b.labels:
        raise ctx.error("needs min or max.")
    if math.isfinite(b.min) and math.isfinite(b.max) and b.min > b.max:
        raise ctx.child("min").error(
            f"must be <= max ({describe_value(b.max)}); got {describe_value(b.min)}."
        )
    return b


def _space(value: object, ctx: Ctx, base_dir: Path) -> tuple[DesignSpace, str]:
    if not isinstance(value, str) or not value:
        raise ctx.invalid("a design-space file or preset name", value)
    candidate = base_dir / value
    ref = str(candidate) if value.endswith((".yaml", ".yml")) or candidate.exists() else value
    try:
        return load_space(ref), ref
    except ConfigError as exc:
        raise ConfigError(f"{ctx.file}: space: {exc}") from exc


def study_from_mapping(
    raw: object, *, file: str = "<study>", base_dir: str | Path = ".", text: str = ""
) -> Study:
    """Validate a parsed study mapping.

    Raises:
        ConfigError: naming the file and the dotted key of the first problem.
    """
    top = Ctx(file)
    mapping = require_mapping(raw, top, "a study mapping")
    check_keys(mapping, TOP_KEYS, top)
    if "space" not in mapping:
        raise top.child("space").error("is required.")
    space, space_ref = _space(mapping["space"], top.child("space"), Path(base_dir))
    y_names, _ = output_names(space)
    raw_objectives = mapping.get("objectives", list(DEFAULT_OBJECTIVES))
    octx = top.child("objectives")
    if not isinstance(raw_objectives, list) or not raw_objectives:
        raise octx.invalid("a non-empty list of objectives", raw_objectives)
    objectives = tuple(_objective(o, octx.child(i), y_names) for i, o in enumerate(raw_objectives))
    seen: set[str] = set()
    for i, o in enumerate(objectives):
        if o.name in seen:
            raise octx.child(i).child("name").error(f"repeats objective '{o.name}'.")
        seen.add(o.name)
    raw_bounds = mapping.get("constraints") or []
    cctx = top.child("constraints")
    if not isinstance(raw_bounds, list):
        raise cctx.invalid("a list of {name, min, max} bounds", raw_bounds)
    bounds = tuple(_bound(b, cctx.child(i), y_names) for i, b in enumerate(raw_bounds))
    search = build(SearchSettings, mapping.get("search") or {}, top.child("search"))
    surrogate = build(SurrogateSettings, mapping.get("surrogate") or {}, top.child("surrogate"))
    name = mapping.get("name", Path(file).stem)
    if (
        not isinstance(name, str)
        or not name
        or not name.replace("-", "").replace("_", "").isalnum()
    ):
        raise top.child("name").invalid("a name of letters, digits, '-' and '_'", name)
    description = mapping.get("description", "")
    if not isinstance(description, str):
        raise top.child("description").invalid("a string", description)
    return Study(
        name=name,
        description=description,
        file=file,
        space=space,
        space_ref=space_ref,
        objectives=objectives,
        bounds=bounds,
        search=search,
        surrogate=surrogate,
        text=text,
    )


def load_study(path: str | Path) -> Study:
    """Read and validate a study YAML; a bare name is looked up in ``configs/studies/``.

    Raises:
        ConfigError: naming the file and the dotted key of the first problem.
    """
    from deepflow.config.loader import preset_file

    p = preset_file("studies", "study", path)
    raw = read_yaml(p, what="a study mapping")
    text = p.read_text(encoding="utf-8")
    return study_from_mapping(raw, file=str(path), base_dir=p.resolve().parent, text=text)


def to_mapping(study: Study) -> Mapping[str, Any]:
    """The study as plain data (for ``study.yaml`` in the result folder)."""
    objectives = []
    for o in study.objectives:
        entry: dict[str, Any] = {"name": o.name, "direction": o.direction, "scale": o.scale}
        for side in ("reference", "ideal"):
            if math.isfinite(getattr(o, side)):
                entry[side] = getattr(o, side)
        objectives.append(entry)
    bounds = []
    for b in study.bounds:
        entry = {"name": b.name}
        for side in ("min", "max"):
            if math.isfinite(getattr(b, side)):
                entry[side] = getattr(b, side)
        bounds.append(entry)
    return {
        "name": study.name,
        "description": study.description,
        "space": str(Path(study.space_ref).resolve())
        if Path(study.space_ref).exists()
        else study.space_ref,
        "objectives": objectives,
        "constraints": bounds,
        "search": dataclasses.asdict(study.search),
        "surrogate": dataclasses.asdict(study.surrogate),
    }

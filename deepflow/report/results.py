"""Reading a result directory (docs/results.md) for the report, with errors that name the file.

Only what docs/results.md lists is read: ``pareto.json``, ``summary.json`` and
``trials.parquet``. Everything is checked before a single byte of the report is written.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deepflow.errors import ReportError

__all__ = ["REQUIRED_TRIAL_COLUMNS", "Objective", "Result", "load_result"]

#: Columns of trials.parquet the report needs besides ``y_<objective>`` (docs/results.md).
REQUIRED_TRIAL_COLUMNS = ("evaluation", "trial", "feasible", "pareto")

DIRECTIONS = ("minimize", "maximize")
_DOC = "docs/results.md"


@dataclass(frozen=True)
class Objective:
    """One objective of the study, as ``pareto.json`` declares it.

    Attributes:
        name: the output's name with its unit, e.g. ``step_time_s``; trials.parquet holds it
            as ``y_<name>``.
        direction: ``minimize`` or ``maximize``.
        reference: the worst acceptable value (hypervolume reference), or None.
        scale: ``log`` when the study normalises the objective in log space (an optional
            key of pareto.json's objectives); the plots then use a log axis.
    """

    name: str
    direction: str
    reference: float | None = None
    scale: str = "linear"

    @property
    def column(self) -> str:
        """The trials.parquet column: ``y_<name>``."""
        return f"y_{self.name}"

    @property
    def minimize(self) -> bool:
        return self.direction == "minimize"


@dataclass(frozen=True)
class Result:
    """A validated result directory.

    Attributes:
        path: the directory.
        objectives: in pareto.json order (1 or more).
        designs: pareto.json ``designs``, sorted by the first objective (each a dict).
        summary: summary.json as a dict.
        trials: trials.parquet as a pandas DataFrame, in evaluation order.
    """

    path: Path
    objectives: tuple[Objective, ...]
    designs: tuple[dict[str, Any], ...]
    summary: dict[str, Any]
    trials: Any


def load_result(result_dir: str | Path) -> Result:
    """Read and check the files of a result directory that the report uses.

    Args:
        result_dir: a folder written by ``deepflow search`` or ``deepflow run``.

    Returns:
        The validated :class:`Result`.

    Raises:
        ReportError: a missing folder or file, a file that is not JSON / Parquet, or content
            that does not follow docs/results.md; the message names the file and the key.
    """
    path = Path(result_dir)
    if not path.exists():
        raise ReportError(f"{path}: no such result directory.")
    if not path.is_dir():
        raise ReportError(f"{path}: not a directory; expected a result directory ({_DOC}).")
    pareto_file = path / "pareto.json"
    pareto = _read_json(pareto_file)
    objectives = _objectives(pareto, pareto_file)
    designs = _designs(pareto, pareto_file, objectives)
    summary_file = path / "summary.json"
    summary = _read_json(summary_file)
    _check_summary(summary, summary_file)
    trials = _read_trials(path / "trials.parquet", objectives)
    return Result(path, objectives, designs, summary, trials)


# --------------------------------------------------------------------------------- files
def _missing(file: Path) -> ReportError:
    return ReportError(
        f"{file}: no such file; a result directory holds pareto.json, summary.json and "
        f"trials.parquet ({_DOC})."
    )


def _read_json(file: Path) -> dict[str, Any]:
    if not file.is_file():
        raise _missing(file)
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"{file}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ReportError(f"{file}: cannot be read ({exc}).") from None
    if not isinstance(data, dict):
        raise ReportError(f"{file}: must hold a JSON object; got {type(data).__name__}.")
    return data


def _read_trials(file: Path, objectives: tuple[Objective, ...]) -> Any:
    if not file.is_file():
        raise _missing(file)
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ReportError(f"{file}: not a Parquet file ({exc}).") from None
    needed = [*REQUIRED_TRIAL_COLUMNS, *(o.column for o in objectives)]
    missing = [c for c in needed if c not in table.column_names]
    if missing:
        names = ", ".join(f"'{c}'" for c in missing)
        raise ReportError(f"{file}: missing column{'s' if len(missing) > 1 else ''} {names}.")
    types = {f.name: f.type for f in table.schema}
    for col in ("feasible", "pareto"):
        if not pa.types.is_boolean(types[col]):
            raise ReportError(f"{file}: column '{col}' must be bool; got {types[col]}.")
    for col in ("evaluation", "trial"):
        if not pa.types.is_integer(types[col]):
            raise ReportError(f"{file}: column '{col}' must be an integer; got {types[col]}.")
    for obj in objectives:
        typ = types[obj.column]
        if not (pa.types.is_floating(typ) or pa.types.is_integer(typ)):
            raise ReportError(f"{file}: column '{obj.column}' must be numeric; got {typ}.")
    return table.to_pandas()


# ---------------------------------------------------------------------------- pareto.json
def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _objectives(pareto: dict[str, Any], file: Path) -> tuple[Objective, ...]:
    raw = pareto.get("objectives")
    if not isinstance(raw, list) or not raw:
        raise ReportError(f"{file}: 'objectives' must be a non-empty list; got {raw!r}.")
    out: list[Objective] = []
    for i, item in enumerate(raw):
        where = f"{file}: objectives[{i}]"
        if not isinstance(item, dict):
            raise ReportError(f"{where} must be an object with name and direction; got {item!r}.")
        name, direction = item.get("name"), item.get("direction")
        if not isinstance(name, str) or not name:
            raise ReportError(f"{where}.name must be a non-empty string; got {name!r}.")
        if direction not in DIRECTIONS:
            raise ReportError(
                f"{where}.direction must be one of {', '.join(DIRECTIONS)}; got {direction!r}."
            )
        reference = item.get("reference")
        if reference is not None and not _is_number(reference):
            raise ReportError(f"{where}.reference must be a number; got {reference!r}.")
        if any(o.name == name for o in out):
            raise ReportError(f"{where}.name '{name}' is repeated.")
        scale = item.get("scale") or "linear"
        if scale not in ("linear", "log"):
            raise ReportError(f"{where}.scale must be linear or log; got {scale!r}.")
        ref = None if reference is None else float(reference)
        out.append(Objective(name, direction, ref, scale))
    return tuple(out)


_NUMBER_MAPS = ("outputs", "constraints", "breakdown_s", "area_breakdown_mm2", "power_breakdown_W",
                "memory_breakdown_B")  # fmt: skip


def _designs(
    pareto: dict[str, Any], file: Path, objectives: tuple[Objective, ...]
) -> tuple[dict[str, Any], ...]:
    raw = pareto.get("designs")
    if not isinstance(raw, list):
        raise ReportError(f"{file}: 'designs' must be a list; got {raw!r}.")
    for i, design in enumerate(raw):
        where = f"{file}: designs[{i}]"
        if not isinstance(design, dict):
            raise ReportError(f"{where} must be an object; got {type(design).__name__}.")
        trial = design.get("trial")
        if not isinstance(trial, int) or isinstance(trial, bool):
            raise ReportError(f"{where}.trial must be an integer; got {trial!r}.")
        values = design.get("objectives")
        if not isinstance(values, dict):
            raise ReportError(f"{where}.objectives must be an object; got {values!r}.")
        for obj in objectives:
            value = values.get(obj.name)
            if not (isinstance(value, int | float) and _is_number(value) and math.isfinite(value)):
                raise ReportError(
                    f"{where}.objectives.{obj.name} must be a finite number; got {value!r}."
                )
        for key in _NUMBER_MAPS:
            if key in design:
                _number_map(design[key], f"{where}.{key}", allow_none=key == "outputs")
        if "x" in design and not isinstance(design["x"], dict):
            raise ReportError(f"{where}.x must be an object; got {design['x']!r}.")
        if "config" in design and not isinstance(design["config"], dict):
            raise ReportError(f"{where}.config must be an object; got {design['config']!r}.")
        surrogate = design.get("surrogate")
        if surrogate is not None:
            if not isinstance(surrogate, dict):
                raise ReportError(f"{where}.surrogate must be an object; got {surrogate!r}.")
            for name, pred in surrogate.items():
                if not isinstance(pred, dict) or not _is_number(pred.get("mean")):
                    raise ReportError(
                        f"{where}.surrogate.{name} must be an object with a numeric mean "
                        f"(and std); got {pred!r}."
                    )
    return tuple(raw)


def _number_map(value: Any, where: str, *, allow_none: bool = False) -> None:
    """Check a mapping of names to numbers (with ``allow_none``, also strings and null)."""
    if not isinstance(value, Mapping):
        raise ReportError(f"{where} must be an object of numbers; got {value!r}.")
    for key, v in value.items():
        if allow_none and (v is None or isinstance(v, str | bool | dict | list)):
            continue
        if not _is_number(v):
            raise ReportError(f"{where}.{key} must be a number; got {v!r}.")


# --------------------------------------------------------------------------- summary.json
def _check_summary(summary: dict[str, Any], file: Path) -> None:
    if "hypervolume_history" not in summary:
        raise ReportError(f"{file}: missing key 'hypervolume_history' ({_DOC}).")
    check_history(summary["hypervolume_history"], f"{file}: hypervolume_history")
    surrogate = summary.get("surrogate")
    if surrogate is not None:
        if not isinstance(surrogate, dict):
            raise ReportError(f"{file}: surrogate must be an object or null; got {surrogate!r}.")
        held_out = surrogate.get("held_out", {})
        if not isinstance(held_out, dict):
            raise ReportError(f"{file}: surrogate.held_out must be an object; got {held_out!r}.")
        for target, metrics in held_out.items():
            _number_map(metrics, f"{file}: surrogate.held_out.{target}", allow_none=True)
        pareto_error = surrogate.get("pareto_error", {})
        if pareto_error is not None:
            _number_map(pareto_error, f"{file}: surrogate.pareto_error")
    if "benchmark" in summary:
        benchmark_histories(summary["benchmark"], f"{file}: benchmark")


def check_history(history: Any, where: str) -> list[tuple[int, float]]:
    """A hypervolume history as (evaluations, hypervolume) pairs; ReportError when malformed."""
    if not isinstance(history, list):
        raise ReportError(f"{where} must be a list; got {history!r}.")
    out: list[tuple[int, float]] = []
    for i, point in enumerate(history):
        ok = (
            isinstance(point, dict)
            and isinstance(point.get("evaluations"), int)
            and not isinstance(point.get("evaluations"), bool)
            and _is_number(point.get("hypervolume"))
        )
        if not ok:
            raise ReportError(
                f'{where}[{i}] must be {{"evaluations": int, "hypervolume": number}}; '
                f"got {point!r}."
            )
        out.append((point["evaluations"], float(point["hypervolume"])))
    return out


def benchmark_histories(
    benchmark: Any, where: str
) -> list[tuple[str, str, list[tuple[int, float]]]]:
    """Every strategy's hypervolume history in ``summary.json``'s optional ``benchmark`` key.

    Accepted shapes (docs/report.md): ``{strategy: [history points]}``,
    ``{strategy: {"hypervolume_history": [...]}}``, or a list of
    ``{"strategy": name, "seed": s (optional), "hypervolume_history": [...]}``.

    Returns:
        (strategy, line name, history) triples; a strategy run with several seeds gives one
        line per seed, named ``strategy (seed s)``.
    """
    out: list[tuple[str, str, list[tuple[int, float]]]] = []
    if isinstance(benchmark, dict):
        for name, entry in benchmark.items():
            history = entry.get("hypervolume_history") if isinstance(entry, dict) else entry
            out.append((str(name), str(name), check_history(history, f"{where}.{name}")))
    elif isinstance(benchmark, list):
        for i, entry in enumerate(benchmark):
            if not isinstance(entry, dict) or not isinstance(entry.get("strategy"), str):
                raise ReportError(
                    f"{where}[{i}] must be an object with 'strategy' and "
                    f"'hypervolume_history'; got {entry!r}."
                )
            history = check_history(
                entry.get("hypervolume_history"), f"{where}[{i}].hypervolume_history"
            )
            name = entry["strategy"]
            label = name if "seed" not in entry else f"{name} (seed {entry['seed']})"
            out.append((name, label, history))
    else:
        raise ReportError(f"{where} must be an object or a list; got {benchmark!r}.")
    return out

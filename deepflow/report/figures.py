"""Static PNG figures (matplotlib, Agg canvas; imported lazily) for papers and slides.

The same views, colours and scales as the interactive page (views.py, style.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from deepflow.report.results import Result
from deepflow.report.style import FEASIBLE_COLOR, INFEASIBLE_COLOR, axis_label, use_log
from deepflow.report.views import (
    BREAKDOWNS,
    Breakdown,
    Cloud,
    Front,
    HypervolumeLine,
    component_label,
    front_2d,
    pairs,
)

__all__ = ["write_figures"]

_DPI = 150
_MAX_LABELLED = 12  # Pareto designs labelled with their trial number in the pair plots


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _style(ax: Any) -> None:
    ax.grid(True, color="#e5e7eb", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=_DPI, facecolor="white")
    return path


def _cloud(ax: Any, points: Cloud, dims: tuple[int, int]) -> None:
    i, j = dims
    ok = points.feasible
    if ok.any():
        ax.scatter(
            points.values[ok, i],
            points.values[ok, j],
            s=10,
            color=FEASIBLE_COLOR,
            alpha=0.45,
            linewidths=0,
            label="evaluated, feasible",
        )
    if (~ok).any():
        ax.scatter(
            points.values[~ok, i],
            points.values[~ok, j],
            s=14,
            marker="x",
            color=INFEASIBLE_COLOR,
            alpha=0.5,
            linewidths=0.8,
            label="evaluated, infeasible",
        )


def _front_markers(ax: Any, pareto: Front, x: Any, y: Any, label: str = "Pareto designs") -> None:
    ax.scatter(
        x,
        y,
        s=46,
        marker="D",
        c=pareto.colors,
        edgecolors="#222",
        linewidths=0.7,
        zorder=3,
        label=label,
    )
    if len(pareto.trial) <= _MAX_LABELLED:
        for text, xi, yi in zip(pareto.labels, x, y, strict=True):
            ax.annotate(
                text, (xi, yi), textcoords="offset points", xytext=(5, 4), fontsize=7, color="#333"
            )


def _pair(
    result: Result, points: Cloud, pareto: Front, logs: list[bool], i: int, j: int, path: Path
) -> Path:
    oi, oj = result.objectives[i], result.objectives[j]
    fig = _figure(5.6, 4.4)
    ax = fig.add_subplot()
    _style(ax)
    _cloud(ax, points, (i, j))
    ok = points.feasible
    if ok.any():
        x, y = points.values[ok, i], points.values[ok, j]
        idx = front_2d(x, y, minimize_x=oi.minimize, minimize_y=oj.minimize)
        ax.step(
            x[idx],
            y[idx],
            where="post" if oi.minimize else "pre",
            color="#444",
            linestyle=":",
            linewidth=1.1,
            label="2-D front of the pair",
        )
    _front_markers(ax, pareto, pareto.values[:, i], pareto.values[:, j])
    ax.set_xscale("log" if logs[i] else "linear")
    ax.set_yscale("log" if logs[j] else "linear")
    ax.set_xlabel(axis_label(oi.name, oi.direction))
    ax.set_ylabel(axis_label(oj.name, oj.direction))
    ax.set_title(
        f"{axis_label(oj.name).split(' (')[0]} vs {axis_label(oi.name).split(' (')[0]}", fontsize=11
    )
    ax.legend(fontsize=7, frameon=False, loc="best")
    return _save(fig, path)


def _progress(result: Result, points: Cloud, pareto: Front, logs: list[bool], path: Path) -> Path:
    obj = result.objectives[0]
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot()
    _style(ax)
    ok = points.feasible
    ax.scatter(
        points.evaluation[ok],
        points.values[ok, 0],
        s=10,
        color=FEASIBLE_COLOR,
        alpha=0.6,
        label="evaluated, feasible",
    )
    if (~ok).any():
        ax.scatter(
            points.evaluation[~ok],
            points.values[~ok, 0],
            s=14,
            marker="x",
            color=INFEASIBLE_COLOR,
            alpha=0.6,
            label="evaluated, infeasible",
        )
    evaluation = dict(zip(points.trial.tolist(), points.evaluation.tolist(), strict=True))
    known = [k for k, t in enumerate(pareto.trial) if t in evaluation]
    if known:
        ax.scatter(
            [evaluation[pareto.trial[k]] for k in known],
            pareto.values[known, 0],
            s=46,
            marker="D",
            c=[pareto.colors[k] for k in known],
            edgecolors="#222",
            zorder=3,
            label="best designs",
        )
    ax.set_yscale("log" if logs[0] else "linear")
    ax.set_xlabel("oracle evaluation")
    ax.set_ylabel(axis_label(obj.name, obj.direction))
    ax.legend(fontsize=7, frameon=False)
    return _save(fig, path)


def _hypervolume(lines: list[HypervolumeLine], colors: dict[str, str], path: Path) -> Path:
    fig = _figure(6.4, 4.0)
    ax = fig.add_subplot()
    _style(ax)
    for line in lines:
        ax.step(
            line.evaluations,
            line.hypervolume,
            where="post",
            marker="o",
            markersize=3,
            linewidth=1.6,
            color=colors[line.strategy],
            label=line.name,
        )
    ax.set_xlabel("oracle evaluations")
    ax.set_ylabel("hypervolume (normalised) ↑")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title("Hypervolume vs oracle evaluations", fontsize=11)
    ax.legend(fontsize=8, frameon=False)
    return _save(fig, path)


def _breakdown(bd: Breakdown, pareto: Front, colors: dict[str, str], path: Path) -> Path:
    title, _, y_abs, _ = BREAKDOWNS[bd.key]
    totals = bd.values.sum(axis=1)
    percent = use_log(totals.tolist())
    values = 100 * bd.values / np.where(totals > 0, totals, 1.0)[:, None] if percent else bd.values
    fig = _figure(max(5.0, 1.2 + 0.55 * len(bd.designs)) + 2.2, 4.2)
    ax = fig.add_subplot()
    _style(ax)
    ax.grid(False, axis="x")
    x = np.arange(len(bd.designs))
    bottom = np.zeros(len(bd.designs))
    for j, comp in enumerate(bd.components):
        ax.bar(
            x,
            values[:, j],
            bottom=bottom,
            width=0.7,
            color=colors[comp],
            label=component_label(comp),
        )
        bottom += values[:, j]
    ax.set_xticks(x, [pareto.labels[i] for i in bd.designs], rotation=45 if len(x) > 8 else 0)
    for tick, i in zip(ax.get_xticklabels(), bd.designs, strict=True):
        tick.set_color(pareto.colors[i])
        tick.set_fontweight("bold")
    ax.set_xlabel("Pareto design (trial)")
    ax.set_ylabel("share (%)" if percent else y_abs)
    ax.set_title(f"{title} (Pareto designs)", fontsize=11)
    handles, names = ax.get_legend_handles_labels()  # top of the stack first, as drawn
    ax.legend(
        handles[::-1],
        names[::-1],
        fontsize=7,
        frameon=False,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    return _save(fig, path)


def _surrogate(result: Result, pareto: Front, path: Path) -> Path | None:
    objs = [
        o
        for o in result.objectives
        if any(o.name in (d.get("surrogate") or {}) for d in result.designs)
    ]
    if not objs:
        return None
    fig = _figure(3.6 * len(objs) + 0.4, 3.8)
    for n, obj in enumerate(objs, 1):
        ax = fig.add_subplot(1, len(objs), n)
        _style(ax)
        rows = [
            (i, d["objectives"][obj.name], d["surrogate"][obj.name])
            for i, d in enumerate(result.designs)
            if obj.name in (d.get("surrogate") or {})
        ]
        oracle = np.array([r[1] for r in rows], dtype=np.float64)
        mean = np.array([r[2]["mean"] for r in rows], dtype=np.float64)
        std = np.array([float(r[2].get("std") or 0.0) for r in rows], dtype=np.float64)
        lo, hi = min(oracle.min(), mean.min()), max(oracle.max(), mean.max())
        ax.plot([lo, hi], [lo, hi], color="#999", linestyle="--", linewidth=1)
        ax.errorbar(oracle, mean, yerr=1.96 * std, fmt="none", ecolor="#666", elinewidth=0.8)
        ax.scatter(
            oracle,
            mean,
            s=40,
            marker="D",
            c=[pareto.colors[r[0]] for r in rows],
            edgecolors="#222",
            linewidths=0.7,
            zorder=3,
        )
        if use_log([*oracle.tolist(), *mean.tolist()]):
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_title(axis_label(obj.name), fontsize=10)
        ax.set_xlabel("oracle")
        ax.set_ylabel("surrogate (mean ± 1.96 std)" if n == 1 else "")
    fig.suptitle("Surrogate vs oracle on the Pareto designs", fontsize=11)
    return _save(fig, path)


def write_figures(
    result: Result,
    folder: Path,
    *,
    points: Cloud,
    pareto: Front,
    logs: list[bool],
    lines: list[HypervolumeLine],
    breakdowns: list[Breakdown],
    strategy_colors: dict[str, str],
    colors: dict[str, str],
) -> list[Path]:
    """Write the PNG figures into ``folder`` (which must exist); return their paths.

    Files: ``pareto_<a>_vs_<b>.png`` for every pair of objectives (``progress.png`` with one
    objective), ``hypervolume.png``, ``breakdown_step_time.png``, ``breakdown_area.png``,
    ``breakdown_power.png`` and ``surrogate.png`` when the result has the data.
    """
    out = []
    for i, j in pairs(len(result.objectives)):
        name = f"pareto_{result.objectives[j].name}_vs_{result.objectives[i].name}.png"
        out.append(_pair(result, points, pareto, logs, i, j, folder / name))
    if len(result.objectives) == 1:
        out.append(_progress(result, points, pareto, logs, folder / "progress.png"))
    if lines:
        out.append(_hypervolume(lines, strategy_colors, folder / "hypervolume.png"))
    for bd in breakdowns:
        out.append(_breakdown(bd, pareto, colors, folder / f"{BREAKDOWNS[bd.key][3]}.png"))
    surrogate = _surrogate(result, pareto, folder / "surrogate.png")
    if surrogate is not None:
        out.append(surrogate)
    return out

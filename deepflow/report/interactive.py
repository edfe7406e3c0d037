"""The interactive plotly figures of the HTML report (plotly imported here, lazily).

Each function returns a ``plotly.graph_objects.Figure``; ``html.py`` puts them on the page.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from deepflow.report.results import Objective, Result
from deepflow.report.style import (
    FEASIBLE_COLOR,
    INFEASIBLE_COLOR,
    axis_label,
    split_unit,
    use_log,
)
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

__all__ = [
    "breakdown_figure",
    "hypervolume_figure",
    "pareto_3d_figure",
    "pareto_pairs_figure",
    "progress_figure",
    "surrogate_figure",
]

_FONT = dict(
    family="-apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif", size=13
)
_LAYOUT = dict(
    template="plotly_white",
    font=_FONT,
    margin=dict(l=70, r=30, t=60, b=60),
    legend=dict(bgcolor="rgba(255,255,255,0.8)"),
    hoverlabel=dict(font_size=12),
)
_PARETO_SIZE = 11


def _hover(objectives: tuple[Objective, ...], head: str, first: int = 1) -> str:
    """A hover template: ``head``, then every objective from ``customdata[first...]``."""
    lines = [head]
    for k, obj in enumerate(objectives):
        unit = split_unit(obj.name)[1]
        label = axis_label(obj.name).split(" (")[0]
        unit_text = f" {unit}" if unit and not obj.name.endswith("_per_s") else ""
        lines.append(f"{label}: %{{customdata[{first + k}]:.4g}}{unit_text}")
    return "<br>".join(lines) + "<extra></extra>"


def _cloud_data(points: Cloud, mask: Any) -> Any:
    return np.column_stack([points.trial[mask], points.evaluation[mask], points.values[mask]])


def _front_data(pareto: Front) -> Any:
    return np.column_stack([np.array(pareto.trial), pareto.values]) if pareto.trial else None


def _cloud_traces(
    go: Any, result: Result, points: Cloud, dims: list[int], *, three_d: bool, show_legend: bool
) -> list[Any]:
    """The faint evaluated designs: feasible grey dots, infeasible orange crosses."""
    traces = []
    scatter = go.Scatter3d if three_d else go.Scatter
    for feasible, name, color, symbol in (
        (True, "evaluated, feasible", FEASIBLE_COLOR, "circle"),
        (False, "evaluated, infeasible", INFEASIBLE_COLOR, "x"),
    ):
        mask = points.feasible == feasible
        if not mask.any():
            continue
        coords = dict(zip("xyz", (points.values[mask, d] for d in dims), strict=False))
        what = "feasible" if feasible else "infeasible"
        traces.append(
            scatter(
                **coords,
                mode="markers",
                name=name,
                legendgroup=name,
                showlegend=show_legend,
                marker=dict(
                    color=color,
                    size=3 if three_d else 6,
                    symbol=symbol,
                    opacity=0.35 if three_d else 0.45,
                    line=dict(width=0),
                ),
                customdata=_cloud_data(points, mask),
                hovertemplate=_hover(
                    result.objectives,
                    f"trial %{{customdata[0]:d}} ({what}, evaluation %{{customdata[1]:d}})",
                    first=2,
                ),
            )
        )
    return traces


def _front_trace(
    go: Any, result: Result, pareto: Front, dims: list[int], *, three_d: bool, show_legend: bool
) -> Any:
    scatter = go.Scatter3d if three_d else go.Scatter
    coords = dict(zip("xyz", (pareto.values[:, d] for d in dims), strict=False))
    return scatter(
        **coords,
        mode="markers",
        name="Pareto designs",
        legendgroup="pareto",
        showlegend=show_legend,
        text=pareto.labels,
        marker=dict(
            color=pareto.colors,
            size=7 if three_d else _PARETO_SIZE,
            symbol="diamond",
            line=dict(color="#222", width=1),
            opacity=1.0,
        ),
        customdata=_front_data(pareto),
        hovertemplate=_hover(result.objectives, "<b>Pareto design #%{customdata[0]:d}</b>"),
    )


def _axis(obj: Objective, log: bool, *, decades_only: bool = False) -> dict[str, Any]:
    axis: dict[str, Any] = dict(
        title=dict(text=axis_label(obj.name, obj.direction)),
        type="log" if log else "-",
        exponentformat="power" if log else "B",
    )
    if log and decades_only:  # 3-D scenes crowd the 2 and 5 labels between decades
        axis["dtick"] = 1
    return axis


def pareto_3d_figure(result: Result, points: Cloud, pareto: Front, logs: list[bool]) -> Any:
    """The first three objectives in 3-D: every evaluation faint, the Pareto designs bold."""
    import plotly.graph_objects as go

    dims = [0, 1, 2]
    fig = go.Figure(
        [
            *_cloud_traces(go, result, points, dims, three_d=True, show_legend=True),
            _front_trace(go, result, pareto, dims, three_d=True, show_legend=True),
        ]
    )
    names = [result.objectives[d].name for d in dims]
    scene = {
        f"{a}axis": _axis(result.objectives[d], logs[d], decades_only=True)
        for a, d in zip("xyz", dims, strict=True)
    }
    fig.update_layout(
        **_LAYOUT,
        height=640,
        title=dict(
            text=f"Pareto front: {', '.join(axis_label(n).split(' (')[0] for n in names)}"
            f" ({len(pareto.trial)} Pareto designs of {len(points.trial):,} evaluations)"
        ),
        scene=dict(**scene, aspectmode="cube"),
        scene_camera=dict(eye=dict(x=1.6, y=1.6, z=1.0)),
    )
    fig.update_layout(legend=dict(itemsizing="constant", x=0.02, y=0.95))
    return fig


def pareto_pairs_figure(result: Result, points: Cloud, pareto: Front, logs: list[bool]) -> Any:
    """Every pair of objectives: evaluations, that pair's own 2-D front, the Pareto designs."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pair_list = pairs(len(result.objectives))
    cols = min(3, len(pair_list))
    rows = math.ceil(len(pair_list) / cols)
    fig = make_subplots(rows=rows, cols=cols, horizontal_spacing=0.09, vertical_spacing=0.22 / rows)
    feasible = points.feasible
    for n, (i, j) in enumerate(pair_list):
        row, col = n // cols + 1, n % cols + 1
        first = n == 0
        for trace in _cloud_traces(go, result, points, [i, j], three_d=False, show_legend=first):
            fig.add_trace(trace, row=row, col=col)
        oi, oj = result.objectives[i], result.objectives[j]
        if feasible.any():
            x, y = points.values[feasible, i], points.values[feasible, j]
            idx = front_2d(x, y, minimize_x=oi.minimize, minimize_y=oj.minimize)
            fig.add_trace(
                go.Scatter(
                    x=x[idx],
                    y=y[idx],
                    mode="lines",
                    name="2-D front of the pair",
                    legendgroup="front2d",
                    showlegend=first,
                    hoverinfo="skip",
                    line=dict(
                        color="#444", width=1.2, dash="dot", shape="hv" if oi.minimize else "vh"
                    ),
                ),
                row=row,
                col=col,
            )
        fig.add_trace(
            _front_trace(go, result, pareto, [i, j], three_d=False, show_legend=first),
            row=row,
            col=col,
        )
        fig.update_xaxes(**_axis(oi, logs[i]), row=row, col=col)
        fig.update_yaxes(**_axis(oj, logs[j]), row=row, col=col)
    fig.update_layout(
        **_LAYOUT,
        height=430 * rows + 110,
        title=dict(text="Pairwise Pareto fronts (arrows: the better direction)"),
    )
    fig.update_layout(
        legend=dict(
            orientation="h",
            yanchor="top",
            y=-0.11 / rows,
            xanchor="center",
            x=0.5,
            bgcolor="rgba(0,0,0,0)",
            itemsizing="constant",
        ),
        margin=dict(b=110),
    )
    return fig


def progress_figure(result: Result, points: Cloud, pareto: Front, logs: list[bool]) -> Any:
    """One objective: its value at every oracle evaluation, the best designs highlighted."""
    import plotly.graph_objects as go

    obj = result.objectives[0]
    fig = go.Figure()
    for feasible, name, color in (
        (True, "evaluated, feasible", FEASIBLE_COLOR),
        (False, "evaluated, infeasible", INFEASIBLE_COLOR),
    ):
        mask = points.feasible == feasible
        if mask.any():
            fig.add_trace(
                go.Scatter(
                    x=points.evaluation[mask],
                    y=points.values[mask, 0],
                    mode="markers",
                    name=name,
                    marker=dict(
                        color=color, size=6, opacity=0.6, symbol="circle" if feasible else "x"
                    ),
                    customdata=_cloud_data(points, mask),
                    hovertemplate=_hover(
                        result.objectives,
                        "trial %{customdata[0]:d} (evaluation %{customdata[1]:d})",
                        first=2,
                    ),
                )
            )
    evaluations = dict(zip(points.trial.tolist(), points.evaluation.tolist(), strict=True))
    fig.add_trace(
        go.Scatter(
            x=[evaluations.get(t) for t in pareto.trial],
            y=pareto.values[:, 0],
            mode="markers",
            name="best designs",
            marker=dict(
                color=pareto.colors,
                size=_PARETO_SIZE,
                symbol="diamond",
                line=dict(color="#222", width=1),
            ),
            customdata=_front_data(pareto),
            hovertemplate=_hover(result.objectives, "<b>design #%{customdata[0]:d}</b>"),
        )
    )
    fig.update_layout(
        **_LAYOUT, height=460, title=dict(text=f"{axis_label(obj.name)} per oracle evaluation")
    )
    fig.update_xaxes(title_text="oracle evaluation")
    fig.update_yaxes(**_axis(obj, logs[0]))
    return fig


def hypervolume_figure(lines: list[HypervolumeLine], colors: dict[str, str]) -> Any:
    """Hypervolume (normalised objective space) against the number of oracle evaluations.

    Args:
        lines: one per strategy (and seed).
        colors: strategy -> colour (lines of one strategy share it).
    """
    import plotly.graph_objects as go

    fig = go.Figure()
    for line in lines:
        fig.add_trace(
            go.Scatter(
                x=line.evaluations,
                y=line.hypervolume,
                mode="lines+markers",
                name=line.name,
                legendgroup=line.strategy,
                line=dict(color=colors[line.strategy], width=2, shape="hv"),
                marker=dict(size=5),
                hovertemplate=f"{line.name}<br>%{{x:d}} evaluations<br>hypervolume %{{y:.4f}}"
                "<extra></extra>",
            )
        )
    fig.update_layout(
        **_LAYOUT, height=440, showlegend=True, title=dict(text="Hypervolume vs oracle evaluations")
    )
    fig.update_xaxes(title_text="oracle evaluations", rangemode="tozero")
    fig.update_yaxes(title_text="hypervolume (normalised objective space) ↑", rangemode="tozero")
    return fig


def _tick_labels(pareto: Front, designs: list[int]) -> list[str]:
    return [f"<span style='color:{pareto.colors[i]}'>■</span> {pareto.labels[i]}" for i in designs]


def breakdown_figure(bd: Breakdown, pareto: Front, colors: dict[str, str]) -> Any:
    """Stacked bars of one breakdown over the Pareto designs, absolute or as shares."""
    import plotly.graph_objects as go

    title, unit, y_abs, _ = BREAKDOWNS[bd.key]
    labels = [pareto.labels[i] for i in bd.designs]
    totals = bd.values.sum(axis=1)
    share = np.divide(
        100 * bd.values, totals[:, None], out=np.zeros_like(bd.values), where=totals[:, None] > 0
    )
    fig = go.Figure()
    for j, comp in enumerate(bd.components):
        fig.add_trace(
            go.Bar(
                x=labels,
                y=bd.values[:, j],
                name=component_label(comp),
                marker=dict(color=colors[comp], line=dict(width=0)),
                customdata=np.column_stack([share[:, j], totals]),
                hovertemplate=f"%{{x}} · {component_label(comp)}<br>%{{y:.4g}} {unit} "
                f"(%{{customdata[0]:.1f}} % of %{{customdata[1]:.4g}} {unit})"
                "<extra></extra>",
            )
        )
    percent = use_log(totals.tolist())  # totals across decades: shares read better
    fig.update_layout(
        **_LAYOUT,
        height=460,
        barmode="stack",
        barnorm="percent" if percent else "",
        title=dict(text=f"{title} (Pareto designs)"),
        xaxis=dict(
            title=dict(text="Pareto design (trial)"),
            tickmode="array",
            tickvals=labels,
            ticktext=_tick_labels(pareto, bd.designs),
            type="category",
        ),
        yaxis=dict(title=dict(text="share (%)" if percent else y_abs)),
        updatemenus=[
            dict(
                type="buttons",
                direction="right",
                x=1.0,
                xanchor="right",
                y=1.01,
                yanchor="bottom",
                active=1 if percent else 0,
                showactive=True,
                bgcolor="#f3f4f6",
                buttons=[
                    dict(
                        label="absolute",
                        method="relayout",
                        args=[{"barnorm": "", "yaxis.title.text": y_abs}],
                    ),
                    dict(
                        label="share",
                        method="relayout",
                        args=[{"barnorm": "percent", "yaxis.title.text": "share (%)"}],
                    ),
                ],
            )
        ],
    )
    return fig


def surrogate_figure(result: Result, pareto: Front) -> Any | None:
    """Surrogate prediction (mean ± 1.96 std) against the oracle on the Pareto designs.

    Returns None when no Pareto design carries a surrogate prediction.
    """
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    objs = [
        o
        for o in result.objectives
        if any(o.name in (d.get("surrogate") or {}) for d in result.designs)
    ]
    if not objs:
        return None
    fig = make_subplots(
        rows=1,
        cols=len(objs),
        horizontal_spacing=0.25 / len(objs),
        subplot_titles=[axis_label(o.name) for o in objs],
    )
    for n, obj in enumerate(objs, 1):
        rows = [
            (i, d["objectives"][obj.name], d["surrogate"][obj.name])
            for i, d in enumerate(result.designs)
            if obj.name in (d.get("surrogate") or {})
        ]
        oracle = np.array([r[1] for r in rows], dtype=np.float64)
        mean = np.array([r[2]["mean"] for r in rows], dtype=np.float64)
        std = np.array([float(r[2].get("std") or 0.0) for r in rows], dtype=np.float64)
        lo, hi = float(min(oracle.min(), mean.min())), float(max(oracle.max(), mean.max()))
        fig.add_trace(
            go.Scatter(
                x=[lo, hi],
                y=[lo, hi],
                mode="lines",
                name="surrogate = oracle",
                line=dict(color="#999", dash="dash", width=1),
                hoverinfo="skip",
                showlegend=n == 1,
                legendgroup="diag",
            ),
            row=1,
            col=n,
        )
        err = 100 * (mean - oracle) / np.where(oracle != 0, np.abs(oracle), 1.0)
        fig.add_trace(
            go.Scatter(
                x=oracle,
                y=mean,
                mode="markers",
                name="Pareto designs",
                showlegend=n == 1,
                legendgroup="pareto",
                error_y=dict(
                    type="data",
                    array=1.96 * std,
                    visible=bool(std.any()),
                    color="#666",
                    thickness=1,
                ),
                marker=dict(
                    color=[pareto.colors[r[0]] for r in rows],
                    size=_PARETO_SIZE,
                    symbol="diamond",
                    line=dict(color="#222", width=1),
                ),
                customdata=np.column_stack([[pareto.trial[r[0]] for r in rows], err, std]),
                hovertemplate="<b>design #%{customdata[0]:d}</b><br>oracle %{x:.4g}<br>surrogate "
                "%{y:.4g} ± %{customdata[2]:.3g}<br>error %{customdata[1]:+.2f} %"
                "<extra></extra>",
            ),
            row=1,
            col=n,
        )
        log = use_log([*oracle.tolist(), *mean.tolist()])
        fig.update_xaxes(title_text="oracle", type="log" if log else "-", row=1, col=n)
        fig.update_yaxes(
            title_text="surrogate (mean ± 1.96 std)", type="log" if log else "-", row=1, col=n
        )
    fig.update_layout(
        **_LAYOUT, height=430, title=dict(text="Surrogate vs oracle on the Pareto designs")
    )
    fig.update_layout(margin=dict(t=90))
    return fig

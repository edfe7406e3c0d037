"""The self-contained HTML report and ``write_report`` (plotly.js embedded once, no network)."""

from __future__ import annotations

import html
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from deepflow.errors import ReportError, StorageError
from deepflow.report.results import Result, load_result
from deepflow.report.style import axis_label, component_colors, fmt, split_unit
from deepflow.report.views import (
    BREAKDOWNS,
    Breakdown,
    Front,
    breakdown,
    cloud,
    design_table,
    front,
    hypervolume_lines,
    log_axes,
)

__all__ = ["FIGURE_IDS", "render_page", "write_report"]

#: The ids of the plot divs the page may hold, in page order (distinct from section ids).
FIGURE_IDS = (
    "fig-pareto-3d",
    "fig-pareto-pairs",
    "fig-progress",
    "fig-hypervolume",
    "fig-breakdown-step-time",
    "fig-breakdown-area",
    "fig-breakdown-power",
    "fig-breakdown-memory",
    "fig-surrogate",
)

_PLOT_CONFIG = {
    "displaylogo": False,
    "responsive": True,
    "toImageButtonOptions": {"format": "svg", "scale": 1},
}

_CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg-soft: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff; line-height: 1.45;
       font: 15px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1280px; margin: 0 auto; padding: 0 24px 48px; }
header { background: #0f172a; color: #f8fafc; padding: 22px 0 16px; }
header .inner { max-width: 1280px; margin: 0 auto; padding: 0 24px; }
header h1 { margin: 0 0 4px; font-size: 24px; font-weight: 600; }
header p { margin: 0; color: #cbd5e1; font-size: 14px; }
nav { position: sticky; top: 0; z-index: 10; background: rgba(255,255,255,0.95);
      border-bottom: 1px solid var(--line); }
nav .inner { max-width: 1280px; margin: 0 auto; padding: 8px 24px; display: flex; gap: 18px;
             flex-wrap: wrap; font-size: 14px; }
nav a { color: var(--muted); text-decoration: none; }
nav a:hover { color: var(--fg); }
h2 { font-size: 20px; margin: 36px 0 8px; padding-bottom: 6px;
     border-bottom: 1px solid var(--line); }
h3 { font-size: 16px; margin: 20px 0 6px; }
p.note { color: var(--muted); margin: 4px 0 12px; font-size: 14px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(170px, 1fr)); gap: 12px;
         margin: 20px 0 8px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px;
        background: var(--bg-soft); }
.card .v { font-size: 22px; font-weight: 600; }
.card .k { color: var(--muted); font-size: 13px; }
.figure { border: 1px solid var(--line); border-radius: 8px; margin: 14px 0; padding: 6px; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0 16px; }
th, td { border-bottom: 1px solid var(--line); padding: 5px 10px; text-align: right;
         white-space: nowrap; }
th { background: var(--bg-soft); font-weight: 600; position: sticky; top: 0; }
td.l, th.l { text-align: left; }
td.w { white-space: normal; min-width: 13em; }
tr:hover td { background: #fffbea; }
.sw { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
      border: 1px solid rgba(0,0,0,0.35); vertical-align: -1px; }
details { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; }
summary { cursor: pointer; padding: 7px 12px; background: var(--bg-soft); font-size: 14px; }
details pre { margin: 0; padding: 10px 14px; max-height: 520px; overflow: auto; font-size: 12px;
              background: #fff; }
footer { color: var(--muted); font-size: 12px; margin-top: 40px; border-top: 1px solid var(--line);
         padding-top: 10px; }
code { background: var(--bg-soft); padding: 1px 4px; border-radius: 4px; font-size: 90%; }
header code { background: rgba(255,255,255,0.14); color: #e2e8f0; }
"""


def write_report(
    result_dir: str | Path, out: str | Path | None = None, *, figures: bool = True
) -> Path:
    """Write the HTML report of a result directory (and its PNG figures).

    The page is self-contained (plotly.js inline; it opens without a network). Everything is
    read and checked first; the page and figures are then written to temporary files and
    renamed into place, so a rejected input or a failure leaves no half-written report.

    Args:
        result_dir: a folder of ``deepflow search`` / ``deepflow run`` (docs/results.md).
        out: the HTML file; default ``RESULT_DIR/report.html``. Its folder must exist.
        figures: also write matplotlib PNGs into ``RESULT_DIR/figures/``.

    Returns:
        The path of the HTML file.

    Raises:
        ReportError: a missing or malformed file of the result directory (the message names
            it and what is wrong), or an output path that cannot be written.

    Example:
        >>> write_report("results/gpt3-pathfinding")  # doctest: +SKIP
        PosixPath('results/gpt3-pathfinding/report.html')
    """
    result = load_result(result_dir)
    out_path = Path(out) if out is not None else result.path / "report.html"
    if out_path.is_dir():
        raise ReportError(f"{out_path}: is a directory; --out takes the HTML file to write.")
    if not out_path.parent.is_dir():
        raise ReportError(f"{out_path}: folder {out_path.parent} does not exist.")
    figure_dir = result.path / "figures"
    if figures and figure_dir.exists() and not figure_dir.is_dir():
        raise ReportError(f"{figure_dir}: exists and is not a folder; the PNG figures go there.")

    parts = _Parts(result)
    page = render_page(result, parts)
    tmp_html = out_path.with_name(f".{out_path.name}.tmp-{os.getpid()}")
    tmp_dir: Path | None = None
    try:
        tmp_html.write_text(page, encoding="utf-8")
        pngs: list[Path] = []
        if figures:
            from deepflow.report.figures import write_figures

            tmp_dir = Path(tempfile.mkdtemp(prefix=".figures-", dir=result.path))
            pngs = write_figures(
                result,
                tmp_dir,
                points=parts.points,
                pareto=parts.pareto,
                logs=parts.logs,
                lines=parts.lines,
                breakdowns=parts.breakdowns,
                strategy_colors=parts.strategy_colors,
                colors=parts.component_colors,
            )
            figure_dir.mkdir(exist_ok=True)
            for png in pngs:
                os.replace(png, figure_dir / png.name)
        os.replace(tmp_html, out_path)
    except OSError as exc:  # a disk or permission error: exit 1, not bad input
        where = exc.filename if exc.filename is not None else out_path
        raise StorageError(
            f"{where}: {exc.strerror or exc}; nothing of the report was written."
        ) from None
    finally:
        tmp_html.unlink(missing_ok=True)
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_path


class _Parts:
    """The views every renderer draws from, computed once."""

    def __init__(self, result: Result) -> None:
        self.points = cloud(result)
        self.pareto = front(result)
        self.logs = log_axes(result, self.points, self.pareto)
        self.lines = hypervolume_lines(result)
        self.breakdowns = [bd for key in BREAKDOWNS if (bd := breakdown(result, key))]
        names = [c for bd in self.breakdowns for c in bd.components]
        self.component_colors = component_colors(list(dict.fromkeys(names)))
        self.strategy_colors = component_colors(
            list(dict.fromkeys(line.strategy for line in self.lines))
        )


# ---------------------------------------------------------------------------------- page
def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _plot(fig: Any, div_id: str) -> str:
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=_PLOT_CONFIG)
    return f'<div class="figure">{body}</div>'


def _swatch(color: str) -> str:
    return f'<span class="sw" style="background:{_e(color)}"></span>'


_TEXT_COLUMNS = {"node / device", "DRAM", "mapping"}


#: Long text columns that wrap in their cell instead of widening the table past the page.
_WRAP_COLUMNS = ("mapping",)


def _table(
    headers: list[str], rows: list[list[str]], *, first_cells: list[str] | None = None
) -> str:
    """An HTML table; names and words left-aligned, numbers right; ``first_cells`` raw HTML."""
    left = [k == 0 or h in _TEXT_COLUMNS for k, h in enumerate(headers)]
    head = "".join(
        f'<th class="{"l" if left[k] else ""}">{_e(h)}</th>' for k, h in enumerate(headers)
    )
    body = []
    for r, row in enumerate(rows):
        cells = []
        for k, cell in enumerate(row):
            text = first_cells[r] if (k == 0 and first_cells) else _e(cell)
            wrap = " w" if headers[k] in _WRAP_COLUMNS else ""
            cells.append(f'<td class="{"l" if left[k] else ""}{wrap}">{text}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _cards(result: Result) -> str:
    s = result.summary
    items = [
        ("oracle evaluations", s.get("num_evaluations", len(result.trials))),
        ("feasible", s.get("num_feasible", int(result.trials["feasible"].sum()))),
        ("Pareto designs", s.get("num_pareto", len(result.designs))),
        ("hypervolume", s.get("hypervolume")),
        ("budget", s.get("budget")),
        ("strategy", s.get("strategy")),
    ]
    cards = [
        f'<div class="card"><div class="v">{_e(fmt(v))}</div><div class="k">{_e(k)}</div></div>'
        for k, v in items
        if v is not None
    ]
    out = f'<div class="cards">{"".join(cards)}</div>'
    timings = s.get("timings_s")
    if isinstance(timings, dict) and timings:
        stages = ", ".join(
            f"{_e(k)} {v:.1f} s" for k, v in timings.items() if isinstance(v, int | float)
        )
        out += f'<p class="note">Timings: {stages}.</p>'
    return out


def _objectives_note(result: Result) -> str:
    parts = []
    for obj in result.objectives:
        _, unit = split_unit(obj.name)
        ref = (
            f", reference {fmt(obj.reference)} {unit}".rstrip() if obj.reference is not None else ""
        )
        parts.append(f"<b>{_e(axis_label(obj.name))}</b> ({obj.direction}{_e(ref)})")
    return "Objectives: " + "; ".join(parts) + "."


def _front_section(result: Result, parts: _Parts) -> str:
    from deepflow.report import interactive as ia

    k = len(result.objectives)
    out = [
        '<section id="front"><h2>Pareto front</h2>',
        f'<p class="note">{_objectives_note(result)} Grey dots: every oracle evaluation of '
        "the search (feasible); orange crosses: infeasible designs; diamonds: the final "
        "Pareto designs, re-verified by the oracle, one colour per design throughout the "
        "report. Hover a point for its trial number and values.</p>",
    ]
    args = (result, parts.points, parts.pareto, parts.logs)
    if k >= 3:
        if k > 3:
            out.append(
                '<p class="note">3-D view of the first three objectives; the pairs '
                "below show all of them.</p>"
            )
        out.append(_plot(ia.pareto_3d_figure(*args), "fig-pareto-3d"))
    if k >= 2:
        out.append(
            '<p class="note">Each pair of objectives; the dotted staircase is the 2-D '
            "front of that pair alone (feasible evaluations).</p>"
        )
        out.append(_plot(ia.pareto_pairs_figure(*args), "fig-pareto-pairs"))
    else:
        out.append(_plot(ia.progress_figure(*args), "fig-progress"))
    out.append("</section>")
    return "".join(out)


def _hypervolume_section(result: Result, parts: _Parts) -> str:
    from deepflow.report import interactive as ia

    out = ['<section id="hypervolume"><h2>Hypervolume</h2>']
    if parts.lines:
        out.append(
            '<p class="note">Hypervolume of the feasible designs found so far, in the '
            "objective space normalised by the study's ideal and reference values "
            "(larger is better; docs/results.md).</p>"
        )
        out.append(
            _plot(ia.hypervolume_figure(parts.lines, parts.strategy_colors), "fig-hypervolume")
        )
    else:
        out.append('<p class="note">summary.json records no hypervolume history.</p>')
    out.append("</section>")
    return "".join(out)


def _designs_section(result: Result, pareto: Front) -> str:
    out = ['<section id="designs"><h2>Pareto designs</h2>']
    if not result.designs:
        out.append(
            '<p class="note">pareto.json holds no designs (no feasible design was '
            "found).</p></section>"
        )
        return "".join(out)
    headers, rows = design_table(result)
    first = [
        f"{_swatch(c)}{_e(label)}" for c, label in zip(pareto.colors, pareto.labels, strict=True)
    ]
    out.append(
        f'<p class="note">{len(rows)} designs, sorted by '
        f"{_e(axis_label(result.objectives[0].name))}; values from the oracle.</p>"
    )
    out.append(_table(headers, rows, first_cells=first))
    out.append("</section>")
    return "".join(out)


def _breakdown_section(parts: _Parts) -> str:
    from deepflow.report import interactive as ia

    if not parts.breakdowns:
        return ""
    out = [
        '<section id="breakdowns"><h2>Breakdowns of the Pareto designs</h2>',
        '<p class="note">Stacked by component; the buttons switch between absolute values '
        "and shares of the total.</p>",
    ]
    bd: Breakdown
    for bd in parts.breakdowns:
        div_id = "fig-" + BREAKDOWNS[bd.key][3].replace("_", "-")
        out.append(_plot(ia.breakdown_figure(bd, parts.pareto, parts.component_colors), div_id))
    out.append("</section>")
    return "".join(out)


def _surrogate_section(result: Result, parts: _Parts) -> str:
    from deepflow.report import interactive as ia

    surrogate = result.summary.get("surrogate")
    if surrogate is None:
        return ""
    kind = surrogate.get("kind", "surrogate")
    out = [
        '<section id="surrogate"><h2>Surrogate accuracy</h2>',
        f'<p class="note">Surrogate <code>{_e(kind)}</code>. Held-out metrics from the fit; '
        "then the surrogate's prediction against the oracle on the final Pareto designs."
        "</p>",
    ]
    held_out = surrogate.get("held_out") or {}
    if held_out:
        metrics = list(dict.fromkeys(m for v in held_out.values() for m in v))
        rows = []
        for target, values in held_out.items():
            row = [target]
            for m in metrics:
                v = values.get(m)
                row.append("–" if v is None else f"{100 * v:.2f} %" if m == "mape" else fmt(v))
            rows.append(row)
        out.append("<h3>Held-out test set</h3>")
        out.append(_table(["target", *(_METRIC_NAMES.get(m, m) for m in metrics)], rows))
    pareto_error = surrogate.get("pareto_error") or {}
    if pareto_error:
        out.append("<h3>Mean relative error on the Pareto designs</h3>")
        out.append(
            _table(
                ["objective", "surrogate vs oracle"],
                [[axis_label(k), f"{100 * v:.2f} %"] for k, v in pareto_error.items()],
            )
        )
    fig = ia.surrogate_figure(result, parts.pareto)
    if fig is not None:
        out.append(_plot(fig, "fig-surrogate"))
    out.append("</section>")
    return "".join(out)


_METRIC_NAMES = {
    "mape": "MAPE",
    "r2": "R²",
    "spearman": "Spearman ρ",
    "coverage_95": "95 % coverage",
    "coverage95": "95 % coverage",
}


def _configs_section(result: Result, pareto: Front) -> str:
    import yaml

    if not result.designs:
        return ""
    evaluable = all(d.get("scenario") for d in result.designs)
    note = (
        "The scenario of each design: save it as a YAML file and run <code>deepflow "
        "evaluate FILE.yaml</code> to reproduce its oracle values."
        if evaluable
        else "The resolved scenario of each design (SI units, as <code>deepflow show</code> "
        "prints it; this result folder predates the evaluate-able scenario)."
    )
    out = ['<section id="configs"><h2>Configurations of the Pareto designs</h2>',
           f'<p class="note">{note}</p>']  # fmt: skip
    for design, color, label in zip(result.designs, pareto.colors, pareto.labels, strict=True):
        values = ", ".join(
            f"{axis_label(o.name).split(' (')[0]} {fmt(design['objectives'][o.name])}"
            f" {split_unit(o.name)[1]}".rstrip()
            for o in result.objectives
        )
        blocks = []
        if design.get("x"):  # as comments: the block stays one scenario YAML
            variables = yaml.safe_dump(design["x"], sort_keys=False).splitlines()
            blocks.append("# design variables:\n" + "".join(f"#   {v}\n" for v in variables))
        config = design.get("scenario") or design.get("config")
        if config:
            blocks.append(yaml.safe_dump(config, sort_keys=False, width=100))
        text = "".join(blocks) or "# pareto.json holds no config for this design\n"
        out.append(
            f"<details><summary>{_swatch(color)}<b>{_e(label)}</b> — {_e(values)}"
            f"</summary><pre>{_e(text)}</pre></details>"
        )
    out.append("</section>")
    return "".join(out)


def render_page(result: Result, parts: _Parts | None = None) -> str:
    """The report as one HTML string (plotly.js inline)."""
    from plotly.offline import get_plotlyjs

    parts = parts or _Parts(result)
    s = result.summary
    study = s.get("study") or result.path.name
    sub = [_e(s["description"])] if isinstance(s.get("description"), str) else []
    sub.append(f"result directory <code>{_e(result.path)}</code>")
    for key in ("strategy", "seed", "budget"):
        if s.get(key) is not None:
            sub.append(f"{key} {_e(s[key])}")
    versions = s.get("versions") if isinstance(s.get("versions"), dict) else {}
    sections = [
        _front_section(result, parts),
        _hypervolume_section(result, parts),
        _designs_section(result, parts.pareto),
        _breakdown_section(parts),
        _surrogate_section(result, parts),
        _configs_section(result, parts.pareto),
    ]
    nav = [
        ("front", "Pareto front"),
        ("hypervolume", "Hypervolume"),
        ("designs", "Designs"),
        ("breakdowns", "Breakdowns"),
        ("surrogate", "Surrogate"),
        ("configs", "Configs"),
    ]
    links = "".join(
        f'<a href="#{i}">{t}</a>'
        for i, t in nav
        if any(f'<section id="{i}">' in sec for sec in sections)
    )
    from deepflow import __version__

    footer = f"Generated by deepflow {_e(__version__)}"
    if versions:
        footer += " from a run of " + ", ".join(f"{_e(k)} {_e(v)}" for k, v in versions.items())
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>deepflow report: {_e(study)}</title>
<style>{_CSS}</style>
<script type="text/javascript">window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<header><div class="inner"><h1>Pathfinding report: {_e(study)}</h1>
<p>{" · ".join(sub)}</p></div></header>
<nav><div class="inner">{links}</div></nav>
<main>
{_cards(result)}
{"".join(sections)}
<footer>{footer}.</footer>
</main>
</body>
</html>
"""

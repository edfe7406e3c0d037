"""The HTML report and PNG figures of a result directory (docs/results.md, docs/report.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.errors import ConfigError, ReportError
from deepflow.report import load_result, write_report
from deepflow.report.style import axis_label, design_colors, fmt, use_log
from deepflow.report.views import front_2d, hypervolume_lines, mapping_text

runner = CliRunner()
PLOT_DIV = re.compile(r'<div id="([\w-]+)" class="plotly-graph-div"')


def _plot_ids(page: str) -> list[str]:
    return PLOT_DIV.findall(page)


# ------------------------------------------------------------------------ the page (CLI)
def test_cli_writes_report_and_figures(rendered: tuple[Any, Path]) -> None:
    result, folder = rendered
    assert result.exit_code == 0, result.output
    assert f"wrote {folder / 'report.html'}" in result.stdout
    assert sorted(p.name for p in (folder / "figures").iterdir()) == [
        "breakdown_area.png",
        "breakdown_memory.png",
        "breakdown_power.png",
        "breakdown_step_time.png",
        "hypervolume.png",
        "pareto_area_mm2_vs_step_time_s.png",
        "pareto_power_W_vs_area_mm2.png",
        "pareto_power_W_vs_step_time_s.png",
        "surrogate.png",
    ]
    for png in (folder / "figures").iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size > 10_000
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_page_has_one_plot_div_per_figure(rendered: tuple[Any, Path]) -> None:
    page = (rendered[1] / "report.html").read_text(encoding="utf-8")
    assert _plot_ids(page) == [
        "fig-pareto-3d",
        "fig-pareto-pairs",
        "fig-hypervolume",
        "fig-breakdown-step-time",
        "fig-breakdown-area",
        "fig-breakdown-power",
        "fig-breakdown-memory",
        "fig-surrogate",
    ]


def test_page_is_self_contained(rendered: tuple[Any, Path]) -> None:
    from plotly.offline import get_plotlyjs

    page = (rendered[1] / "report.html").read_text(encoding="utf-8")
    assert page.count(get_plotlyjs()[:300]) == 1  # plotly.js inline, once
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=\"?https?:", page)


def test_page_tables_and_configs(rendered: tuple[Any, Path]) -> None:
    folder = rendered[1]
    page = (folder / "report.html").read_text(encoding="utf-8")
    pareto = json.loads((folder / "pareto.json").read_text())
    designs = pareto["designs"]
    assert page.count("<details>") == len(designs)
    for d in designs:
        assert f"#{d['trial']}</td>" in page or f"#{d['trial']}</b>" in page
    # Table headers with units and directions; mapping, memory and cost columns.
    for header in (
        "step time (s) ↓",
        "area (mm²) ↓",
        "power (W) ↓",
        "node / device",
        "memory used / capacity (GiB)",
        "mapping",
        "energy per step (J)",
        "energy per step, per operation (J)",
        "device cost (USD)",
        "MFU (%)",
    ):
        assert f">{header}</th>" in page, header
    assert ">die area (mm²)</th>" not in page  # the area objective is the die area
    assert '<td class="l w">TP' in page  # the mapping wraps in its cell, within the page
    assert "TP" in page and "ZeRO-1" in page
    assert "tensor_parallel: " in page  # the YAML config
    # Surrogate: held-out metrics and the error on the front.
    assert ">MAPE</th>" in page and ">95 % coverage</th>" in page
    assert "Mean relative error on the Pareto designs" in page


def test_design_colours_are_shared_by_table_and_plots(rendered: tuple[Any, Path]) -> None:
    page = (rendered[1] / "report.html").read_text(encoding="utf-8")
    num = len(json.loads((rendered[1] / "pareto.json").read_text())["designs"])
    for color in design_colors(num):
        assert f'class="sw" style="background:{color}"' in page  # table swatch
        assert f'"{color}"' in page  # the plots' marker colours


# ------------------------------------------------------------------- objective counts
def test_two_objectives_no_3d(make_result: Callable[..., Path]) -> None:
    folder = make_result(
        objectives=("step_time_s", "tokens_per_s"), surrogate=False, benchmark=False
    )
    page = write_report(folder, figures=False).read_text(encoding="utf-8")
    assert _plot_ids(page) == [
        "fig-pareto-pairs",
        "fig-hypervolume",
        "fig-breakdown-step-time",
        "fig-breakdown-area",
        "fig-breakdown-power",
        "fig-breakdown-memory",
    ]
    assert "tokens/s ↑" in page  # the maximised objective's direction
    assert 'id="surrogate"' not in page
    assert not (folder / "figures").exists()


def test_four_objectives_3d_of_first_three_and_all_pairs(
    make_result: Callable[..., Path],
) -> None:
    objectives = ("step_time_s", "area_mm2", "power_W", "energy_per_step_J")
    folder = make_result(objectives=objectives)
    page = write_report(folder, figures=False).read_text(encoding="utf-8")
    assert _plot_ids(page)[:2] == ["fig-pareto-3d", "fig-pareto-pairs"]
    assert '"xaxis6"' in page and '"xaxis7"' not in page  # 6 pairs
    assert "energy per step (J) ↓" in page
    assert not (folder / "figures").exists()


def test_one_objective_progress(make_result: Callable[..., Path]) -> None:
    folder = make_result(objectives=("step_time_s",), surrogate=False)
    page = write_report(folder, figures=False).read_text(encoding="utf-8")
    assert _plot_ids(page)[:2] == ["fig-progress", "fig-hypervolume"]


def test_out_option_and_empty_front(make_result: Callable[..., Path], tmp_path: Path) -> None:
    folder = make_result(objectives=("step_time_s", "power_W"))
    pareto = json.loads((folder / "pareto.json").read_text())
    pareto["designs"] = []
    (folder / "pareto.json").write_text(json.dumps(pareto))
    out = tmp_path / "elsewhere.html"
    result = runner.invoke(app, ["report", str(folder), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    assert "pareto.json holds no designs" in page
    assert not (folder / "report.html").exists()
    assert sorted(p.name for p in (folder / "figures").iterdir()) == [
        "hypervolume.png",
        "pareto_power_W_vs_step_time_s.png",
    ]


# ------------------------------------------------------------------------------ errors
def _error(folder: Path) -> str:
    with pytest.raises(ReportError) as info:
        write_report(folder)
    return str(info.value)


def _nothing_written(folder: Path, before: set[str]) -> None:
    assert {p.name for p in folder.iterdir()} == before


def test_missing_pareto_json(result_dir: Path) -> None:
    (result_dir / "pareto.json").unlink()
    before = {p.name for p in result_dir.iterdir()}
    assert _error(result_dir) == (
        f"{result_dir}/pareto.json: no such file; a result directory holds pareto.json, "
        "summary.json and trials.parquet (docs/results.md)."
    )
    _nothing_written(result_dir, before)


def test_bad_json(result_dir: Path) -> None:
    (result_dir / "summary.json").write_text('{"study": "x",\n "hypervolume": }')
    assert _error(result_dir) == (
        f"{result_dir}/summary.json: not valid JSON: Expecting value at line 2, column 17."
    )


def test_missing_columns(result_dir: Path) -> None:
    trials = pd.read_parquet(result_dir / "trials.parquet")
    trials.drop(columns=["pareto", "y_power_W"]).to_parquet(result_dir / "trials.parquet")
    before = {p.name for p in result_dir.iterdir()}
    assert _error(result_dir) == (
        f"{result_dir}/trials.parquet: missing columns 'pareto', 'y_power_W'."
    )
    _nothing_written(result_dir, before)


def test_not_parquet(result_dir: Path) -> None:
    (result_dir / "trials.parquet").write_text("not parquet")
    assert _error(result_dir).startswith(f"{result_dir}/trials.parquet: not a Parquet file (")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda p: p.update(objectives=[]), "'objectives' must be a non-empty list; got []."),
        (
            lambda p: p["objectives"][0].update(direction="min"),
            "objectives[0].direction must be one of minimize, maximize; got 'min'.",
        ),
        (
            lambda p: p["designs"][0]["objectives"].pop("area_mm2"),
            "designs[0].objectives.area_mm2 must be a finite number; got None.",
        ),
        (
            lambda p: p["designs"][1].update(breakdown_s={"gemm": "fast"}),
            "designs[1].breakdown_s.gemm must be a number; got 'fast'.",
        ),
    ],
)
def test_malformed_pareto(
    result_dir: Path, edit: Callable[[dict[str, Any]], Any], message: str
) -> None:
    path = result_dir / "pareto.json"
    pareto = json.loads(path.read_text())
    edit(pareto)
    path.write_text(json.dumps(pareto))
    assert _error(result_dir) == f"{path}: {message}"


def test_malformed_history(result_dir: Path) -> None:
    path = result_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary["hypervolume_history"][2] = {"evaluations": "24", "hypervolume": 0.3}
    path.write_text(json.dumps(summary))
    assert _error(result_dir) == (
        f'{path}: hypervolume_history[2] must be {{"evaluations": int, "hypervolume": '
        "number}; got {'evaluations': '24', 'hypervolume': 0.3}."
    )


def test_missing_directory_and_bad_out(tmp_path: Path, result_dir: Path) -> None:
    assert _error(tmp_path / "nope") == f"{tmp_path / 'nope'}: no such result directory."
    with pytest.raises(ReportError, match=r"folder .* does not exist"):
        write_report(result_dir, tmp_path / "no" / "report.html")
    assert issubclass(ReportError, ConfigError)  # bad input: exit code 2


def test_cli_bad_input_exit_2_writes_nothing(result_dir: Path) -> None:
    (result_dir / "pareto.json").write_text("[1, 2]")
    before = {p.name for p in result_dir.iterdir()}
    result = runner.invoke(app, ["report", str(result_dir)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"error: {result_dir}/pareto.json: must hold a JSON object; got list."
    )
    _nothing_written(result_dir, before)


# ------------------------------------------------------------------------------ pieces
def test_front_2d_respects_directions() -> None:
    x = np.array([1.0, 2.0, 3.0, 4.0])
    y = np.array([4.0, 1.0, 3.0, 5.0])
    assert front_2d(x, y, minimize_x=True, minimize_y=True).tolist() == [0, 1]
    assert front_2d(x, y, minimize_x=True, minimize_y=False).tolist() == [0, 3]
    assert front_2d(x, y, minimize_x=False, minimize_y=True).tolist() == [1, 2, 3]


def test_labels_numbers_and_scales() -> None:
    assert axis_label("step_time_s", "minimize") == "step time (s) ↓"
    assert axis_label("area_mm2") == "area (mm²)"
    assert axis_label("tokens_per_s", "maximize") == "tokens/s ↑"
    assert axis_label("hbm_bandwidth_Bps") == "HBM bandwidth (B/s)"
    assert axis_label("mfu") == "MFU"
    assert fmt(1.5e7) == "1.5e7" and fmt(21.3456) == "21.35" and fmt(None) == "–"
    assert use_log([1.0, 500.0]) and not use_log([1.0, 20.0]) and not use_log([0.0, 1e4])
    assert len(set(design_colors(30))) > 5


def test_mapping_text_from_config_or_x() -> None:
    config = {
        "config": {
            "mapping": {
                "tensor_parallel": 8,
                "pipeline_parallel": 4,
                "data_parallel": 32,
                "micro_batch_size": 1,
                "context_parallel": 2,
                "sequence_parallel": True,
                "activation_recompute": "full",
                "zero_stage": 0,
            }
        }
    }
    assert mapping_text(config) == "TP8 PP4 DP32 CP2 mb1 SP full recompute"
    assert mapping_text({"x": {"x_tensor_parallel": 2, "x_zero_stage": 3}}) == "TP2 ZeRO-3"


def test_benchmark_list_with_seeds(result_dir: Path) -> None:
    path = result_dir / "summary.json"
    summary = json.loads(path.read_text())
    history = summary["hypervolume_history"]
    summary["benchmark"] = [
        {"strategy": "tpe", "seed": s, "hypervolume_history": history} for s in (0, 1)
    ]
    path.write_text(json.dumps(summary))
    lines = hypervolume_lines(load_result(result_dir))
    assert [(line.strategy, line.name) for line in lines] == [
        ("botorch", "botorch"),
        ("tpe", "tpe (seed 0)"),
        ("tpe", "tpe (seed 1)"),
    ]


def test_log_axis_when_the_study_normalises_in_log_space(result_dir: Path) -> None:
    from deepflow.report.views import cloud, front, log_axes

    path = result_dir / "pareto.json"
    pareto = json.loads(path.read_text())
    result = load_result(result_dir)
    assert log_axes(result, cloud(result), front(result)) == [True, False, False]
    pareto["objectives"][1]["scale"] = "log"
    path.write_text(json.dumps(pareto))
    result = load_result(result_dir)
    assert log_axes(result, cloud(result), front(result)) == [True, True, False]


def test_the_config_block_of_a_design_is_an_evaluable_scenario(tmp_path: Path) -> None:
    """Save a Pareto design's config block from the report; `deepflow evaluate` reproduces it."""
    import html

    import yaml

    from tests.conftest import REPO

    study = tmp_path / "small.yaml"
    study.write_text(yaml.safe_dump({
        "name": "small", "space": str(REPO / "configs/spaces/llm-pathfinding.yaml"),
        "objectives": [{"name": "step_time_s", "scale": "log"}, "area_mm2", "power_W"],
        "search": {"strategy": "random", "budget": 8, "batch_size": 4, "initial_points": 4},
    }))  # fmt: skip
    out = tmp_path / "res"
    assert runner.invoke(app, ["search", str(study), "--out", str(out)]).exit_code == 0
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    section = page[page.index('<section id="configs">') :]
    assert "reproduce its oracle values" in section
    found = re.search(r"<pre>(.*?)</pre>", section, re.S)
    assert found is not None
    block = html.unescape(found.group(1))
    scenario = tmp_path / "design.yaml"
    scenario.write_text(block, encoding="utf-8")
    result = runner.invoke(app, ["evaluate", str(scenario), "--json"])
    assert result.exit_code == 0, result.output
    design = json.loads((out / "pareto.json").read_text())["designs"][0]
    evaluated = json.loads(result.stdout)
    assert evaluated["step_time_s"] == design["objectives"]["step_time_s"]
    assert evaluated["feasible"] == design["feasible"]

"""`deepflow search` on the real oracle: result files, verification, resume, errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.datasets.io import oracle_version

REPO = Path(__file__).resolve().parents[2]
SPACE = str(REPO / "configs" / "spaces" / "llm-pathfinding.yaml")


@pytest.fixture
def study(write_yaml: Callable[..., Path]) -> Path:
    return write_yaml({
        "name": "small",
        "space": SPACE,
        "objectives": [{"name": "step_time_s", "scale": "log"}, "area_mm2", "power_W"],
        "constraints": [{"name": "energy_per_step_J", "max": 5.0e7}],
        "search": {"strategy": "random", "budget": 12, "batch_size": 4, "initial_points": 4},
    }, "small.yaml")  # fmt: skip


def test_search_writes_verified_results_and_resumes(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    runner = CliRunner()
    result = runner.invoke(app, ["search", str(study), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["num_evaluations"] == 12
    assert summary["verification_max_relative_difference"] < 1e-9
    assert summary["versions"]["oracle"] == oracle_version() != ""
    assert {p.name for p in out.iterdir()} >= {
        "trials.parquet",
        "pareto.json",
        "pareto.yaml",
        "summary.json",
        "study.yaml",
        "optuna.db",
    }
    trials = pd.read_parquet(out / "trials.parquet")
    assert trials["evaluation"].tolist() == list(range(12))
    assert {
        "x_technology",
        "y_step_time_s",
        "c_memory_excess_B",
        "feasible",
        "pareto",
        "source",
        "strategy",
        "round",
        "trial",
    } <= set(trials.columns)
    pareto = json.loads((out / "pareto.json").read_text())
    assert [o["name"] for o in pareto["objectives"]] == ["step_time_s", "area_mm2", "power_W"]
    assert len(pareto["designs"]) == int(trials["pareto"].sum()) >= 1
    for d in pareto["designs"]:
        assert d["feasible"]
        assert sum(d["breakdown_s"].values()) == pytest.approx(d["objectives"]["step_time_s"])
        assert d["outputs"]["energy_per_step_J"] <= 5.0e7
        assert set(d["config"]) >= {"system", "workload", "mapping"}
        assert set(d["area_breakdown_mm2"]) >= {"core", "l2"}
        assert set(d["power_breakdown_W"]) >= {"core", "dram"}
        row = trials[trials["trial"] == d["trial"]].iloc[0]
        assert row["y_step_time_s"] == pytest.approx(d["objectives"]["step_time_s"], rel=1e-12)
    # Running it again resumes: nothing new to evaluate, same front.
    again = runner.invoke(app, ["search", str(study), "--out", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout[again.stdout.index("{") :])["num_evaluations"] == 12
    more = runner.invoke(app, ["search", str(study), "--out", str(out), "--budget", "16"])
    assert more.exit_code == 0, more.output
    assert len(pd.read_parquet(out / "trials.parquet")) == 16
    assert "Pareto designs of 'small'" in more.stdout


def test_search_bad_input_exits_2_and_writes_nothing(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    result = CliRunner().invoke(app, ["search", str(study), "--out", str(out),
                                      "--strategy", "nsga3"])  # fmt: skip
    assert result.exit_code == 2
    assert (
        "search.strategy must be one of: botorch, nsga2, tpe, gp, random, surrogate, gradient; got "
        "'nsga3' (did you mean 'nsga2'?)." in result.output
    )
    assert not out.exists()
    missing = CliRunner().invoke(app, ["search", str(tmp_path / "nope.yaml"), "--out", str(out)])
    assert missing.exit_code == 2
    assert "nope.yaml: no such file." in missing.output
    assert not out.exists()


def test_search_other_settings_on_same_folder_exits_2(study: Path, tmp_path: Path) -> None:
    out = tmp_path / "res"
    runner = CliRunner()
    assert runner.invoke(app, ["search", str(study), "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["search", str(study), "--out", str(out), "--seed", "4"])
    assert result.exit_code == 2
    assert "study 'small' was run with different settings (seed)" in result.output


def test_run_searches_verifies_and_reports(write_yaml: Callable[..., Path],
                                           tmp_path: Path) -> None:  # fmt: skip
    study = write_yaml({
        "name": "tiny",
        "space": SPACE,
        "search": {"strategy": "surrogate", "budget": 12, "batch_size": 4, "initial_points": 8},
        "surrogate": {"model": "gbt", "num_samples": 256, "inner_budget": 50, "pool_size": 500},
    }, "tiny.yaml")  # fmt: skip
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"report: {out / 'report.html'}" in result.output
    assert "Pareto designs of 'tiny'" in result.output
    assert (out / "dataset.parquet").exists() and (out / "report.html").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["surrogate"]["kind"] == "gbt"
    assert summary["surrogate"]["num_dataset_rows"] == 256
    assert set(summary["surrogate"]["held_out"]) == {"y_step_time_s", "y_area_mm2", "y_power_W"}
    assert {"sample", "search", "verify", "report"} <= set(summary["timings_s"])
    trials = pd.read_parquet(out / "trials.parquet")
    assert (trials["source"] == "search").sum() == 4 and (trials["round"] == 1).sum() == 4
    # Running it again (make run is idempotent) evaluates nothing and keeps the scores.
    again = CliRunner().invoke(app, ["run", str(study), "--out", str(out)])
    assert again.exit_code == 0, again.output
    rerun = json.loads((out / "summary.json").read_text())
    assert rerun["num_evaluations"] == 12
    assert rerun["surrogate"]["held_out"] == summary["surrogate"]["held_out"]


def test_storage_holding_other_settings_leaves_no_folder(study: Path, tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    runner = CliRunner()
    first = runner.invoke(app, ["search", str(study), "--out", str(tmp_path / "a"),
                                "--storage", storage])  # fmt: skip
    assert first.exit_code == 0, first.output
    assert not (tmp_path / "a" / "optuna.db").exists()  # the study lives in the given storage
    out = tmp_path / "b"
    result = runner.invoke(app, ["search", str(study), "--out", str(out), "--storage", storage,
                                 "--strategy", "nsga2"])  # fmt: skip
    assert result.exit_code == 2
    assert "study 'small' was run with different settings (strategy)" in result.output
    assert not out.exists()


def test_a_serving_study_runs_end_to_end_with_verified_designs(
    write_yaml: Callable[..., Path], tmp_path: Path
) -> None:
    # the default inference study's space and objectives, on a small budget
    study = write_yaml({
        "name": "serving",
        "space": str(REPO / "configs" / "spaces" / "inference-pathfinding.yaml"),
        "objectives": [{"name": "tokens_per_J", "direction": "maximize", "scale": "log"},
                       "area_mm2"],
        "constraints": [{"name": "tpot_s", "max": 0.05}, {"name": "ttft_s", "max": 2.0}],
        "search": {"strategy": "surrogate", "budget": 12, "batch_size": 4, "initial_points": 8},
        "surrogate": {"model": "gbt", "num_samples": 256, "inner_budget": 50, "pool_size": 500},
    }, "serving.yaml")  # fmt: skip
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["run", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "TPOT (ms)" in result.output and (out / "report.html").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verification_max_relative_difference"] < 1e-9
    pareto = json.loads((out / "pareto.json").read_text())
    assert pareto["designs"]
    for design in pareto["designs"]:
        assert design["config"]["workload"]["kind"] == "inference"
        assert design["outputs"]["tpot_s"] <= 0.05 and design["outputs"]["ttft_s"] <= 2.0


def test_another_strategy_than_the_studys_starts_without_its_prescreen() -> None:
    from deepflow.cli import _search_options

    path = Path(__file__).resolve().parents[2] / "configs" / "studies" / "default.yaml"
    own = _search_options(path, None, None, None).search
    assert own.prescreen_evaluations > 0 and own.initial_points == 0
    other = _search_options(path, "botorch", 24, None).search
    assert other.strategy == "botorch" and other.budget == 24
    assert other.prescreen_evaluations == 0 and other.initial_points == 16
    same = _search_options(path, "surrogate", None, None).search
    assert same.prescreen_evaluations == own.prescreen_evaluations

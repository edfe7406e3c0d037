"""CLI conventions: ``python -m deepflow``, ``-h``, shell completion, scenario presets by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from tests.conftest import REPO

runner = CliRunner()


def test_short_help_is_the_long_help() -> None:
    short, long = runner.invoke(app, ["-h"]), runner.invoke(app, ["--help"])
    assert short.exit_code == long.exit_code == 0
    assert short.stdout == long.stdout
    assert (
        runner.invoke(app, ["sample", "-h"]).stdout
        == runner.invoke(app, ["sample", "--help"]).stdout
    )


def test_shell_completion_is_offered() -> None:
    out = runner.invoke(app, ["--help"]).stdout
    assert "--install-completion" in out and "--show-completion" in out


def test_python_dash_m_deepflow(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "deepflow", "--version", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) == {"version", "contract_version"}


def test_scenario_preset_by_name() -> None:
    by_name = runner.invoke(app, ["show", "gpt3-175b-a100", "--json"])
    by_path = runner.invoke(app, ["show", str(REPO / "configs/scenarios/gpt3-175b-a100.yaml"),
                                  "--json"])  # fmt: skip
    assert by_name.exit_code == 0, by_name.stderr
    assert json.loads(by_name.stdout)["system"] == json.loads(by_path.stdout)["system"]


def test_unknown_scenario_preset_names_the_closest() -> None:
    result = runner.invoke(app, ["evaluate", "gpt3-175b-a10"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: gpt3-175b-a10: no such file or scenario preset; did you mean 'gpt3-175b-a100'? "
        "Available: "
    )


def test_sample_json_and_chunk_rows_leave_the_file_unchanged(tmp_path: Path) -> None:
    """--chunk-rows sets the unit of work and progress, not the file: the same bytes."""
    space = str(REPO / "configs/spaces/mapping-spec.yaml")
    paths = {}
    for rows in ("37", "4096"):
        out = tmp_path / f"d{rows}.parquet"
        args = ["sample", space, "--num-samples", "200", "--workers", "1", "--chunk-rows", rows]
        result = runner.invoke(app, [*args, "--out", str(out), "--json"])
        assert result.exit_code == 0, result.stderr
        data = json.loads(result.stdout)
        assert data["path"] == str(out) and data["num_rows"] == 200
        assert data["num_chunks"] == -(-200 // int(rows))
        assert 0 <= data["num_feasible"] <= 200 and data["resumed_rows"] == 0
        paths[rows] = out
    assert paths["37"].read_bytes() == paths["4096"].read_bytes()
    bad = runner.invoke(app, ["sample", space, "--num-samples", "8", "--chunk-rows", "0",
                              "--out", str(tmp_path / "x.parquet")])  # fmt: skip
    assert bad.exit_code == 2 and "--chunk-rows" in bad.output


def test_progress_moves_once_per_chunk_of_default_size(tmp_path: Path) -> None:
    from deepflow.datasets import sample
    from deepflow.datasets.engine import DEFAULT_CHUNK_ROWS

    calls: list[tuple[int, int]] = []
    n = 2 * DEFAULT_CHUNK_ROWS + 5
    space = REPO / "configs/spaces/mapping-spec.yaml"  # its chunk_size is 65,536
    sample(space, num_samples=n, out=tmp_path / "d.parquet", workers=1,
           progress=lambda done, total: calls.append((done, total)))  # fmt: skip
    assert calls == [(0, n), (DEFAULT_CHUNK_ROWS, n), (2 * DEFAULT_CHUNK_ROWS, n), (n, n)]


@pytest.mark.slow
def test_run_and_report_print_json(write_yaml: Callable[..., Path], tmp_path: Path) -> None:
    study = write_yaml({
        "name": "tiny",
        "space": str(REPO / "configs/spaces/llm-pathfinding.yaml"),
        "search": {"strategy": "surrogate", "budget": 8, "batch_size": 4, "initial_points": 4},
        "surrogate": {"model": "gbt", "num_samples": 64, "inner_budget": 20, "pool_size": 100},
    }, "tiny.yaml")  # fmt: skip
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(study), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["report"] == str(out / "report.html") and data["out_dir"] == str(out)
    assert data["num_evaluations"] == 8 and "hypervolume" in data
    shown = runner.invoke(app, ["report", str(out), "--json"])
    assert shown.exit_code == 0, shown.output
    report = json.loads(shown.stdout)
    assert report["report"] == str(out / "report.html")
    assert report["figures"] and all(Path(f).is_file() for f in report["figures"])

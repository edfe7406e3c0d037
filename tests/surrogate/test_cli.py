"""deepflow fit / query: output, exit codes and exact error messages."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from deepflow.cli import app

runner = CliRunner()


def test_fit_then_query(mapping_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "surr"
    result = runner.invoke(app, ["fit", str(mapping_data), "--surrogate", "mlp", "--targets",
                                 "y_step_time_s,y_energy_per_step_J", "--out", str(out),
                                 "--seed", "1", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert set(report["metrics"]) == {"y_step_time_s", "y_energy_per_step_J"}
    assert (out / "metadata.json").is_file()
    human = runner.invoke(app, ["query", str(out), str(mapping_data)])
    assert human.exit_code == 0, human.stderr
    assert "mlp surrogate: 300 points" in human.stdout
    result = runner.invoke(app, ["query", str(out), str(mapping_data), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["surrogate"] == "mlp" and len(data["predictions"]) == 300
    row = data["predictions"][0]
    assert row["y_step_time_s_lo"] <= row["y_step_time_s"] <= row["y_step_time_s_hi"]
    assert 0.0 <= row["p_feasible"] <= 1.0


def test_fit_human_output(mapping_data: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["fit", str(mapping_data), "--surrogate", "gbt", "--targets",
                                 "y_step_time_s", "--out", str(tmp_path / "g")])  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "MAPE" in result.stdout and "95 % coverage" in result.stdout


def test_fit_errors(mapping_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "x"
    result = runner.invoke(app, ["fit", str(tmp_path / "none.parquet"), "--out", str(out)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'none.parquet'}: no such file.\n"
    result = runner.invoke(app, ["fit", str(mapping_data), "--surrogate", "svm", "--out",
                                 str(out)])  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr == "error: unknown surrogate 'svm'. Valid: gbt, gp, mlp, svgp.\n"
    result = runner.invoke(app, ["fit", str(mapping_data), "--targets", "y_nope", "--out",
                                 str(out)])  # fmt: skip
    assert result.exit_code == 2
    assert result.stderr.startswith("error: unknown target column 'y_nope'. Valid: y_step_time_s")
    assert not out.exists()


def test_query_bad_dir(mapping_data: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["query", str(tmp_path / "none"), str(mapping_data)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {tmp_path / 'none'}: no such surrogate directory.\n"
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["query", str(tmp_path / "empty"), str(mapping_data)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {tmp_path / 'empty'}: not a saved surrogate (no metadata.json).\n"
    )


def test_query_refuses_points_from_another_space(
    mapping_data: Path, other_space_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "g"
    fitted = runner.invoke(app, ["fit", str(mapping_data), "--surrogate", "gbt", "--targets",
                                 "y_step_time_s", "--out", str(out)])  # fmt: skip
    assert fitted.exit_code == 0, fitted.stderr
    result = runner.invoke(app, ["query", str(out), str(other_space_data)])
    assert result.exit_code == 2
    assert "the surrogate was fitted on design space" in result.stderr
    assert result.stderr.endswith("refit on data from this space.\n")

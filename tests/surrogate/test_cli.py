"""deepflow fit / query: output, exit codes and exact error messages."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
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


@pytest.fixture(scope="module")
def gbt_dir(mapping_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A boosting surrogate of y_step_time_s fitted with the CLI."""
    out = tmp_path_factory.mktemp("gbt") / "g"
    fitted = runner.invoke(app, ["fit", str(mapping_data), "--surrogate", "gbt", "--targets",
                                 "y_step_time_s", "--out", str(out)])  # fmt: skip
    assert fitted.exit_code == 0, fitted.stderr
    return out


def test_query_refuses_points_from_another_space(other_space_data: Path, gbt_dir: Path) -> None:
    out = gbt_dir
    result = runner.invoke(app, ["query", str(out), str(other_space_data)])
    assert result.exit_code == 2
    assert "the surrogate was fitted on design space" in result.stderr
    assert result.stderr.endswith("refit on data from this space.\n")


def test_query_yaml_points(mapping_data: Path, gbt_dir: Path, tmp_path: Path) -> None:
    import pandas as pd
    import yaml

    out = gbt_dir
    rows = pd.read_parquet(mapping_data).iloc[:2]
    points = [{c.removeprefix("x_"): v.item() if hasattr(v, "item") else v
               for c, v in row.items() if c.startswith("x_")}
              for _, row in rows.iterrows()]  # fmt: skip
    points[1] = {f"x_{k}": v for k, v in points[1].items()}  # x_ column names work too
    path = tmp_path / "points.yaml"
    path.write_text(yaml.safe_dump(points), encoding="utf-8")
    result = runner.invoke(app, ["query", str(out), str(path), "--json"])
    assert result.exit_code == 0, result.stderr
    parquet = runner.invoke(app, ["query", str(out), str(mapping_data), "--json"])
    assert json.loads(result.stdout)["predictions"] == json.loads(parquet.stdout)["predictions"][:2]
    points[0]["pipeline_parallel"] = 17
    path.write_text(yaml.safe_dump(points), encoding="utf-8")
    result = runner.invoke(app, ["query", str(out), str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: points[0].pipeline_parallel must be an integer in [1, 16]; got 17.\n"
    )


def _points(mapping_data: Path, n: int) -> list[dict[str, Any]]:
    import pandas as pd

    rows = pd.read_parquet(mapping_data).iloc[:n]
    return [{c.removeprefix("x_"): v.item() if hasattr(v, "item") else v
             for c, v in row.items() if c.startswith("x_")}
            for _, row in rows.iterrows()]  # fmt: skip


def test_query_refuses_an_impossible_mapping(mapping_data: Path, gbt_dir: Path,
                                            tmp_path: Path) -> None:  # fmt: skip
    import yaml

    point = _points(mapping_data, 1)[0]
    point.update(num_nodes=8, tensor_parallel=8, pipeline_parallel=16, context_parallel=4,
                 data_parallel=1)  # fmt: skip
    path = tmp_path / "points.yaml"
    path.write_text(yaml.safe_dump([point]), encoding="utf-8")
    result = runner.invoke(app, ["query", str(gbt_dir), str(path)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {path}: points[0] is an impossible mapping: tensor_parallel 8 × "
        "pipeline_parallel 16 × context_parallel 4 × data_parallel 1 = 512 devices, but the "
        "system has 64.\n"
    )
    point.update(pipeline_parallel=1, context_parallel=1, data_parallel=8, micro_batch_size=4,
                 virtual_pipeline_stages=1)  # fmt: skip
    path.write_text(yaml.safe_dump([point]), encoding="utf-8")
    result = runner.invoke(app, ["query", str(gbt_dir), str(path)])
    assert result.exit_code == 0, result.stderr


def test_query_checks_parquet_points_as_yaml_points(mapping_data: Path, gbt_dir: Path,
                                                    tmp_path: Path) -> None:  # fmt: skip
    import pandas as pd

    df = pd.read_parquet(mapping_data).iloc[:3].copy()
    df.attrs = {}
    df.loc[df.index[1], "x_pipeline_parallel"] = 17
    bad = tmp_path / "bad.parquet"
    df.to_parquet(bad)
    result = runner.invoke(app, ["query", str(gbt_dir), str(bad)])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {bad}: rows[1].x_pipeline_parallel must be an integer in [1, 16]; got 17.\n"
    )
    empty = tmp_path / "empty.parquet"
    df.iloc[:0].to_parquet(empty)
    result = runner.invoke(app, ["query", str(gbt_dir), str(empty)])
    assert result.exit_code == 2
    assert result.stderr == f"error: {empty}: holds no rows; give at least one point.\n"


def test_query_table_fits_80_columns(mapping_data: Path, gbt_dir: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, ["query", str(gbt_dir), str(mapping_data)])
    assert result.exit_code == 0, result.stderr
    table = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert max(len(line) for line in table) <= 80 and "…" not in result.stdout
    header = next(line for line in table if line.startswith("┃"))
    assert "step s" in header and "step s 95 %" in header and "P(feasible)" in header
    row = next(line for line in table if line.startswith("│"))
    assert re.search(r"\[\d[\d.e+-]*, \d[\d.e+-]*\]", row)

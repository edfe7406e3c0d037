"""The space travels in a sidecar: datasets saved again by pandas, polars or duckdb (which
drop deepflow's Parquet metadata) still load, with the sidecar or --space, and fit."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.datasets import load, sample
from deepflow.datasets.io import sidecar_path
from deepflow.errors import ConfigError
from tests.conftest import REPO

SPACE = REPO / "configs" / "spaces" / "mapping-spec.yaml"
runner = CliRunner()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sidecar") / "d.parquet"
    sample(SPACE, num_samples=120, out=out, workers=1)
    return out


def _resaved(kind: str, src: Path, dst: Path) -> None:
    """``src``'s feasible rows saved to ``dst`` by pandas, polars or duckdb."""
    if kind == "pandas":
        df = pd.read_parquet(src)
        df[df["feasible"]].to_parquet(dst)  # keeps the filtered index: __index_level_0__
    elif kind == "polars":
        pl = pytest.importorskip("polars")
        pl.read_parquet(src).filter(pl.col("feasible")).write_parquet(dst)
    else:
        duckdb = pytest.importorskip("duckdb")
        duckdb.sql(f"COPY (SELECT * FROM '{src}' WHERE feasible ORDER BY sample_index) "
                   f"TO '{dst}' (FORMAT parquet)")  # fmt: skip


def test_sample_writes_the_space_beside_the_file(dataset: Path) -> None:
    sidecar = sidecar_path(dataset)
    assert sidecar.name == "d.parquet.space.yaml"
    assert sidecar.read_text(encoding="utf-8") == SPACE.read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", ["pandas", "polars", "duckdb"])
def test_resaved_dataset_loads_with_the_sidecar_or_space(dataset: Path, tmp_path: Path,
                                                         kind: str) -> None:  # fmt: skip
    original = load(dataset)
    feasible = original[original["feasible"]].reset_index(drop=True)
    moved = tmp_path / "filtered.parquet"
    _resaved(kind, dataset, moved)
    for space in (sidecar_path(dataset), SPACE):
        df = load(moved, space=space)
        pd.testing.assert_frame_equal(df.reset_index(drop=True), feasible, check_dtype=False)
        meta = df.attrs["deepflow"]
        assert meta["space_sha256"] == original.attrs["deepflow"]["space_sha256"]
        assert meta["variables"] == original.attrs["deepflow"]["variables"]
        assert meta["oracle_version"] == original.attrs["deepflow"]["oracle_version"]
    # Saved again under its own name, the file finds its sidecar by itself.
    sidecar_path(moved).write_bytes(sidecar_path(dataset).read_bytes())
    assert len(load(moved)) == len(feasible)


def test_resaved_dataset_without_a_space_names_the_way_out(dataset: Path,
                                                           tmp_path: Path) -> None:  # fmt: skip
    moved = tmp_path / "filtered.parquet"
    _resaved("pandas", dataset, moved)
    with pytest.raises(ConfigError, match=re.escape(
            f"{moved}: not a deepflow dataset: file metadata lacks deepflow.space_yaml and "
            "filtered.parquet.space.yaml is not next to it; give the design space (--space "
            "FILE: the sidecar of the original file or the space YAML).")):  # fmt: skip
        load(moved)
    with pytest.raises(
        ConfigError,
        match=re.escape(f"{tmp_path / 'none.yaml'}: no such file (the design space of {moved})."),
    ):
        load(moved, space=tmp_path / "none.yaml")
    other = tmp_path / "other.yaml"
    other.write_text(SPACE.read_text(encoding="utf-8") + "\n# another space\n", "utf-8")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(moved))}: its rows come from "
                       r"design space [0-9a-f]{12}, but .*other\.yaml is space [0-9a-f]{12}; "
                       r"give the space the rows were sampled from\.$"):  # fmt: skip
        load(moved, space=other)


def test_fit_on_a_dataset_resaved_by_pandas(dataset: Path, tmp_path: Path) -> None:
    moved = tmp_path / "all.parquet"
    pd.read_parquet(dataset).to_parquet(moved)
    out = tmp_path / "model"
    args = ["fit", str(moved), "--surrogate", "gbt", "--targets", "y_step_time_s", "--out",
            str(out), "--json"]  # fmt: skip
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--space FILE" in refused.stderr
    result = runner.invoke(app, [*args, "--space", str(sidecar_path(dataset))])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["num_train"] == 96
    saved = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    assert saved["space_sha256"] == load(dataset).attrs["deepflow"]["space_sha256"]

"""Labelled sweeps: Parquet per the contract, determinism, validity, resume after kill -9,
Ray = local, load round trip, and the CLI's exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import scenario_from_mapping
from deepflow.datasets import arrays, load, load_space, read_metadata, sample
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one
from tests.conftest import REPO

runner = CliRunner()
SPACES = REPO / "configs" / "spaces"


def _row_hashes(df: pd.DataFrame) -> np.ndarray:
    return pd.util.hash_pandas_object(df, index=False).to_numpy()


@pytest.fixture
def design_file(design_space: dict[str, Any], write_yaml: Callable[..., Path]) -> Path:
    return write_yaml(design_space, name="design.yaml")


@pytest.fixture
def mapping_file(mapping_space: dict[str, Any], write_yaml: Callable[..., Path]) -> Path:
    return write_yaml(mapping_space, name="mapping.yaml")


def test_parquet_follows_the_contract(design_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    result = sample(design_file, num_samples=150, out=out, seed=7)
    assert result.num_rows == 150 and result.num_chunks == 3
    assert not (tmp_path / "d.parquet.parts").exists()
    df = load(out)
    cols = list(df.columns)
    assert cols[0] == "sample_index" and df["sample_index"].tolist() == list(range(150))
    for col in ("x_technology", "x_die_area_mm2", "x_tdp_W", "x_area_split_core",
                "x_area_split_other", "x_tensor_parallel", "x_data_parallel",
                "x_activation_recompute", "y_step_time_s", "y_tokens_per_s", "y_mfu",
                "y_area_mm2", "y_power_W", "y_energy_per_step_J", "y_memory_per_device_B",
                "y_breakdown_gemm_s", "y_die_cost_usd", "c_memory_excess_B", "c_area_excess_mm2",
                "c_power_excess_W", "c_perimeter_excess", "c_reticle_excess_mm2", "feasible",
                "oracle_version", "space_sha256", "seed"):  # fmt: skip
        assert col in cols, col
    assert all(c.startswith(("x_", "y_", "c_")) for c in cols[1:-4])
    assert df["feasible"].dtype == bool and 0 < df["feasible"].sum() < 150
    assert (df["seed"] == 7).all()
    assert set(df["x_technology"]) == {"n7", "n5"}
    assert df["x_die_area_mm2"].between(600, 850).all()
    assert np.allclose(df.filter(like="x_area_split_").sum(axis=1), 1.0)
    # feasible <=> every constraint column <= 0 (with the oracle's rounding tolerances)
    tol = {"c_memory_excess_B": 0.0, "c_area_excess_mm2": 1e-9, "c_power_excess_W": 1e-9,
           "c_perimeter_excess": 1e-12, "c_reticle_excess_mm2": 0.0}  # fmt: skip
    ok = np.logical_and.reduce([df[c] <= t for c, t in tol.items()])
    assert np.array_equal(ok, df["feasible"].to_numpy())
    meta = read_metadata(out)
    assert meta["space_yaml"] == design_file.read_text(encoding="utf-8")
    assert meta["space_sha256"] == df["space_sha256"].iloc[0] == load_space(design_file).sha256
    assert meta["seed"] == 7 and meta["num_samples"] == 150 and meta["sampler"] == "sobol"
    assert {"numpy", "scipy", "pandas", "pyarrow", "deepflow", "python"} <= set(meta["versions"])
    assert meta["oracle_version"] == df["oracle_version"].iloc[0]
    parquet = pq.ParquetFile(out)
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"


def test_same_seed_same_dataset_for_any_worker_count_and_chunking(
    design_file: Path, tmp_path: Path
) -> None:
    a = sample(design_file, num_samples=200, out=tmp_path / "a.parquet", workers=1)
    b = sample(design_file, num_samples=200, out=tmp_path / "b.parquet", workers=2,
               chunk_size=33)  # fmt: skip
    c = sample(design_file, num_samples=200, out=tmp_path / "c.parquet", seed=1)
    da, db, dc = load(a.path), load(b.path), load(c.path)
    pd.testing.assert_frame_equal(da, db)
    assert not da["x_die_area_mm2"].equals(dc["x_die_area_mm2"])


def test_sampled_mappings_are_valid_and_rows_match_evaluate_one(
    mapping_file: Path, tmp_path: Path
) -> None:
    out = tmp_path / "m.parquet"
    sample(mapping_file, num_samples=300, out=out, seed=3)
    df = load(out)
    devices = 8 * df["x_num_nodes"]
    dp = df["x_data_parallel"]
    assert (df["x_tensor_parallel"] * df["x_pipeline_parallel"] * dp == devices).all()
    assert (8 % df["x_tensor_parallel"] == 0).all()  # llama3-8b: 8 KV heads
    assert (64 % (dp * df["x_micro_batch_size"]) == 0).all()
    assert not (df["x_sequence_parallel"] & (df["x_tensor_parallel"] == 1)).any()
    assert df["x_num_nodes"].nunique() == 2 and df["x_tensor_parallel"].nunique() == 4
    for i in (0, 17, 101, 299):
        row = df.iloc[i]
        scenario = scenario_from_mapping({
            "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100",
                       "devices_per_node": 8, "num_nodes": int(row["x_num_nodes"])},
            "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
            "mapping": {"data_parallel": int(row["x_data_parallel"]),
                        "tensor_parallel": int(row["x_tensor_parallel"]),
                        "pipeline_parallel": int(row["x_pipeline_parallel"]),
                        "micro_batch_size": int(row["x_micro_batch_size"]),
                        "sequence_parallel": bool(row["x_sequence_parallel"]),
                        "zero_stage": int(row["x_zero_stage"])},
        })  # the loader accepts it: a valid scenario  # fmt: skip
        one = evaluate_one(scenario)
        assert row["y_step_time_s"] == pytest.approx(one["step_time_s"], rel=1e-9)
        assert row["y_memory_per_device_B"] == pytest.approx(one["memory_per_device_B"], rel=1e-9)
        assert row["feasible"] == one["feasible"]


def test_mappings_are_drawn_uniformly_over_valid_combinations(
    mapping_space: dict[str, Any], write_yaml: Callable[..., Path], tmp_path: Path
) -> None:
    mapping_space["sampler"] = "grid"
    mapping_space["variables"] = {k: v for k, v in mapping_space["variables"].items()
                                  if k in ("tensor_parallel", "pipeline_parallel")}  # fmt: skip
    space = load_space(write_yaml(mapping_space, name="grid.yaml"))
    valid = space.mapping_tables[(8, 0, 64)]
    assert space.grid_size() == len(valid)  # one grid level per valid combination
    out = tmp_path / "g.parquet"
    sample(space, num_samples=len(valid), out=out)
    df = load(out)
    drawn = sorted(zip(df["x_tensor_parallel"], df["x_pipeline_parallel"], strict=True))
    assert drawn == sorted((int(r[0]), int(r[1])) for r in valid)


def test_default_spaces_sample(tmp_path: Path) -> None:
    for name, n in (("mapping-spec", 64), ("llm-pathfinding", 64), ("lstm-paper", 3)):
        out = tmp_path / f"{name}.parquet"
        result = sample(SPACES / f"{name}.yaml", num_samples=n, out=out)
        df = load(out)
        assert len(df) == n and np.isfinite(df["y_step_time_s"]).all(), name
        assert result.num_feasible == int(df["feasible"].sum())
    lstm = load(tmp_path / "lstm-paper.parquet")
    assert "c_area_excess_mm2" in lstm and "y_breakdown_forward_compute_s" in lstm
    llm = load(tmp_path / "llm-pathfinding.parquet")
    assert set(llm["x_technology"]) <= {"n7", "n5", "n3"} and llm["feasible"].any()


def test_load_round_trip_and_arrays(design_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    sample(design_file, num_samples=40, out=out)
    df = load(out)
    data = arrays(df, targets=["y_step_time_s", "c_memory_excess_B"])
    assert data.X.shape == (40, len(data.x_names)) and data.Y.shape == (40, 2)
    assert "x_technology" in data.x_names  # categorical -> index of the declared choice
    tech = data.X[:, data.x_names.index("x_technology")]
    assert np.array_equal(tech, (df["x_technology"] == "n5").to_numpy(dtype=float))
    assert data.X.dtype == np.float64 and np.isfinite(data.X).all()
    feasible = arrays(df, feasible_only=True)
    assert feasible.X.shape[0] == int(df["feasible"].sum())
    with pytest.raises(ConfigError, match=r"^unknown target column 'y_step'\. Valid: "):
        arrays(df, targets=["y_step"])


def test_load_rejects_files_that_are_not_datasets(tmp_path: Path) -> None:
    plain = tmp_path / "plain.parquet"
    pd.DataFrame({"a": [1, 2]}).to_parquet(plain)
    lacks = (rf"^{plain}: not a deepflow dataset: file metadata lacks deepflow.space_yaml and "
             r"plain.parquet.space.yaml is not next to it; give the design space \(--space "
             r"FILE: the sidecar of the original file or the space YAML\)\.$")  # fmt: skip
    with pytest.raises(ConfigError, match=lacks):
        load(plain)
    text = tmp_path / "t.parquet"
    text.write_text("not parquet", encoding="utf-8")
    with pytest.raises(ConfigError, match=rf"^{text}: not a Parquet file"):
        load(text)
    with pytest.raises(ConfigError, match=rf"^{tmp_path / 'no.parquet'}: no such file\.$"):
        load(tmp_path / "no.parquet")


# ------------------------------------------------------------------------------ the CLI
def _sample_args(space: Path, out: Path, *extra: str) -> list[str]:
    return ["sample", str(space), "--num-samples", "120", "--out", str(out), *extra]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"die_area_mm2": {"type": "normal"}}, "variables.die_area_mm2.type must be one of"),
        ({"die_area_mm2": {"type": "continuous", "low": 9, "high": 1}}, "the range is empty"),
        ({"area_split": {"type": "simplex", "parts": {"core": [0.6, 1], "l2": [0.5, 1]}}},
         "lower bounds sum to 1.1 > 1; the parts cannot sum to 1."),
        ({"technology": {"type": "categorical", "choices": ["n9"]}},
         "variables.technology.choices[0] names an unknown technology preset 'n9'"),
        ({"die_area": 700}, "unknown key 'variables.die_area'; did you mean 'die_area_mm2'?"),
    ],
)  # fmt: skip
def test_cli_bad_space_exits_2_and_writes_nothing(
    design_space: dict[str, Any], write_yaml: Callable[..., Path], tmp_path: Path,
    edit: dict[str, Any], message: str,
) -> None:  # fmt: skip
    design_space["variables"].update(edit)
    space = write_yaml(design_space, name="bad.yaml")
    out = tmp_path / "out.parquet"
    result = runner.invoke(app, _sample_args(space, out))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {space}: ") and message in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_cli_bad_options_exit_2(design_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    cases = [
        (["--num-samples", "0"], "error: --num-samples must be an integer >= 1; got 0."),
        (["--backend", "dask"], "error: --backend must be one of: local, ray; got 'dask'."),
        (["--address", "ray://x:10001"], "error: --address joins a Ray cluster; it needs "
         "--backend ray."),
        (["--workers", "0"], "error: --workers must be an integer >= 1; got 0."),
        (["--seed", "-1"], "error: --seed must be an integer >= 0; got -1."),
    ]  # fmt: skip
    for extra, message in cases:
        args = ["sample", str(design_file), "--num-samples", "10", "--out", str(out), *extra]
        if extra[0] == "--num-samples":
            args = ["sample", str(design_file), "--out", str(out), *extra]
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and result.stderr.strip() == message, result.output
    result = runner.invoke(app, _sample_args(design_file, tmp_path / "no" / "o.parquet"))
    assert result.exit_code == 2 and "folder" in result.stderr
    assert not out.exists()


def test_cli_sample_writes_and_reports(design_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "ok.parquet"
    result = runner.invoke(app, _sample_args(design_file, out, "--workers", "1", "--seed", "2"))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("wrote 120 rows (") and str(out) in result.stdout
    assert "rows/s" in result.stdout
    assert len(load(out)) == 120


def test_leftover_parts_need_resume_and_the_same_inputs(design_file: Path,
                                                        tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "r.parquet"
    parts = tmp_path / "r.parquet.parts"
    parts.mkdir()
    result = runner.invoke(app, _sample_args(design_file, out))
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"error: {parts} holds an interrupted run; pass --resume "
                                     "to continue it, or delete it.")  # fmt: skip
    (parts / "manifest.json").write_text(json.dumps({"seed": 5}), encoding="utf-8")
    result = runner.invoke(app, _sample_args(design_file, out, "--resume"))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {parts / 'manifest.json'}: cannot resume: ")
    assert not out.exists()


def _deepflow(*args: str) -> list[str]:
    return [sys.executable, "-c", "from deepflow.cli import main; main()", *args]


def test_kill_9_then_resume_equals_an_uninterrupted_run(
    design_space: dict[str, Any], write_yaml: Callable[..., Path], tmp_path: Path
) -> None:
    design_space["chunk_size"] = 16
    space = write_yaml(design_space, name="kill.yaml")
    n = 1600  # 100 chunks: seconds of work, killed after the first chunk lands
    out = tmp_path / "k.parquet"
    manifest = tmp_path / "k.parquet.parts" / "manifest.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = _deepflow("sample", str(space), "--num-samples", str(n), "--out", str(out),
                     "--workers", "1", "--seed", "5")  # fmt: skip
    proc = subprocess.Popen(args, env=env, cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if manifest.is_file() and json.loads(manifest.read_text())["chunks"]:
                break
            time.sleep(0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # kill -9 the run (its own process group)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    done = json.loads(manifest.read_text())["chunks"]
    assert 1 <= len(done) < n // 16 and not out.exists()

    resumed = subprocess.run([*args, "--resume"], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "kept from the interrupted run" in resumed.stdout
    assert not manifest.parent.exists()

    reference = tmp_path / "ref.parquet"
    sample(space, num_samples=n, out=reference, seed=5, chunk_size=400)
    a, b = load(out), load(reference)
    assert len(a) == n and a["sample_index"].is_unique
    assert np.array_equal(_row_hashes(a), _row_hashes(b))
    pd.testing.assert_frame_equal(a, b)


def test_ray_backend_equals_local(
    mapping_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dist]')")
    # Another cluster on this machine (RAY_ADDRESS, or anyone's `ray start`) is not joined:
    # without --address the run starts its own (nothing listens at this address).
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    local = sample(mapping_file, num_samples=400, out=tmp_path / "l.parquet", workers=1)
    distributed = sample(mapping_file, num_samples=400, out=tmp_path / "r.parquet",
                         backend="ray", workers=2)  # fmt: skip
    pd.testing.assert_frame_equal(load(local.path), load(distributed.path))
    assert read_metadata(local.path)["space_yaml"] == read_metadata(distributed.path)["space_yaml"]


def test_resume_of_a_finished_run_changes_nothing(mapping_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "f.parquet"
    sample(mapping_file, num_samples=50, out=out)
    before = out.stat().st_mtime_ns
    again = sample(mapping_file, num_samples=50, out=out, resume=True)
    assert again.resumed_rows == 50 and out.stat().st_mtime_ns == before
    other = sample(mapping_file, num_samples=50, out=out, resume=True, seed=9)
    assert other.resumed_rows == 0 and load(out)["seed"].eq(9).all()

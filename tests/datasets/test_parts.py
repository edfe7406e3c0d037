"""The parts layout: a folder (local or a pyarrow URI) of the workers' Parquet parts, no
assembly; the rows of the file layout, read by deepflow, pandas, polars and duckdb; resumable;
clear errors."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.datasets import load, sample
from deepflow.datasets.parts import Location
from deepflow.errors import ConfigError, StorageError
from tests.conftest import REPO

SPACE = str(REPO / "configs" / "spaces" / "mapping-spec.yaml")
runner = CliRunner()
PARTS = [f"chunk-{i:06d}.parquet" for i in range(5)]


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """300 rows in the file layout (seed 0)."""
    out = tmp_path_factory.mktemp("file") / "f.parquet"
    sample(SPACE, num_samples=300, out=out, workers=1, chunk_size=64)
    return load(out)


def _same(df: Any, single: Any) -> None:
    pd.testing.assert_frame_equal(df, single)
    assert df.attrs["deepflow"] == single.attrs["deepflow"]


def test_the_parts_hold_the_rows_of_the_file_layout(single: Any, tmp_path: Path) -> None:
    out = tmp_path / "p.parquet"
    result = sample(SPACE, num_samples=300, out=out, workers=2, chunk_size=64, layout="parts")
    assert result.num_rows == 300 and result.num_feasible == int(single["feasible"].sum())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.parquet"]  # no lock, no sidecar
    assert sorted(p.name for p in out.iterdir()) == ["_deepflow.json", *PARTS]
    manifest = json.loads((out / "_deepflow.json").read_text())
    assert manifest["complete"] and manifest["num_chunks"] == 5 and manifest["seed"] == 0
    _same(load(out), single)
    # Other readers take the folder as one table (they skip the _-prefixed manifest).
    import duckdb
    import polars as pl

    x = [c for c in single.columns if c.startswith(("x_", "y_"))]
    pd.testing.assert_frame_equal(pd.read_parquet(out)[x], single[x])
    glob = str(out / "*.parquet")
    pd.testing.assert_frame_equal(pl.read_parquet(glob).to_pandas()[x], single[x])
    frame = duckdb.sql(f"SELECT * FROM read_parquet('{glob}') ORDER BY sample_index").df()
    pd.testing.assert_frame_equal(frame[x], single[x])
    fitted = runner.invoke(app, ["fit", str(out), "--surrogate", "gbt", "--targets",
                                 "y_step_time_s", "--out", str(tmp_path / "m")])  # fmt: skip
    assert fitted.exit_code == 0, fitted.output


def test_ray_workers_write_the_parts_to_a_uri(single: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dist]')")
    written: list[str] = []
    real = Location.write

    def spy(self: Location, name: str, data: bytes) -> None:
        written.append(name)
        real(self, name, data)

    monkeypatch.setattr(Location, "write", spy)
    uri = (tmp_path / "r.parquet").as_uri()
    assert uri.startswith("file:///")
    result = sample(SPACE, num_samples=300, out=uri, backend="ray", workers=2, chunk_size=64,
                    layout="parts")  # fmt: skip
    assert result.path == uri
    assert set(written) == {"_deepflow.json"}  # the driver wrote the manifest, no part
    assert sorted(p.name for p in (tmp_path / "r.parquet").iterdir()) == ["_deepflow.json",
                                                                          *PARTS]  # fmt: skip
    _same(load(uri), single)


def _full_disk_at(monkeypatch: pytest.MonkeyPatch, part: str) -> list[str]:
    """Writing ``part`` fails as on a full disk (after putting down a temporary)."""
    real = Location.write
    tmps: list[str] = []

    def write(self: Location, name: str, data: bytes) -> None:
        if name == part:
            tmp = self.path(f".{name}.tmp-{socket.gethostname()}-{os.getpid()}")
            tmps.append(tmp)
            raise OSError(28, "No space left on device", tmp)
        real(self, name, data)

    monkeypatch.setattr(Location, "write", write)
    return tmps


def test_an_interrupted_run_is_refused_by_readers_and_resumes(
    single: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.parquet"
    with monkeypatch.context() as patch:
        tmps = _full_disk_at(patch, PARTS[2])
        with pytest.raises(StorageError) as err:
            sample(SPACE, num_samples=300, out=out, workers=1, chunk_size=64, layout="parts")
    (tmp,) = tmps
    assert str(err.value) == (
        f"{tmp}: No space left on device; 2 finished chunk(s) are kept in {out} for --resume "
        "(delete it to start over)."
    )
    assert sorted(p.name for p in out.iterdir()) == ["_deepflow.json", *PARTS[:2]]
    with pytest.raises(ConfigError) as refused:
        load(out)
    assert str(refused.value) == (
        f"{out}: holds an interrupted run (2 of 5 parts written); run deepflow sample again "
        "with --resume to finish it."
    )
    args = ["sample", SPACE, "--num-samples", "300", "--out", str(out), "--layout", "parts",
            "--chunk-rows", "64", "--workers", "1"]  # fmt: skip
    again = runner.invoke(app, args)
    assert again.exit_code == 2
    assert again.stderr == (
        f"error: {out} holds an interrupted run; pass --resume to continue it, or delete it.\n"
    )
    other = runner.invoke(app, [*args, "--resume", "--seed", "1"])
    assert other.exit_code == 2
    assert other.stderr == (
        f"error: {out / '_deepflow.json'}: cannot resume: seed was 0, now 1; delete {out} or "
        "run with the same inputs.\n"
    )
    resumed = runner.invoke(app, [*args, "--resume", "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["resumed_rows"] == 128
    _same(load(out), single)
    finished = runner.invoke(app, args)
    assert finished.exit_code == 2
    assert finished.stderr == (
        f"error: {out} holds a finished dataset; delete it to sample again (--resume keeps it "
        "when the inputs are the same).\n"
    )


def test_a_full_disk_before_any_part_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "p.parquet"
    tmps = _full_disk_at(monkeypatch, PARTS[0])
    args = ["--layout", "parts", "--chunk-rows", "64", "--workers", "1"]
    result = runner.invoke(app, ["sample", SPACE, "--num-samples", "300", "--out", str(out),
                                 *args])  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == f"error: {tmps[0]}: No space left on device."
    assert list(tmp_path.iterdir()) == []


def test_bad_parts_outputs_are_one_line(tmp_path: Path) -> None:
    def run(out: str, *extra: str) -> Any:
        return runner.invoke(app, ["sample", SPACE, "--num-samples", "8", "--out", out,
                                   "--workers", "1", *extra])  # fmt: skip

    uri = (tmp_path / "u.parquet").as_uri()
    cases = {
        (uri,): f"error: --out {uri}: a URI takes the parts layout (--layout parts); the file "
        "layout writes one local file.",
        ("nosuch://bucket/d.parquet", "--layout", "parts"): "error: nosuch://bucket/d.parquet: "
        "not a filesystem URI pyarrow opens (",
    }
    for args, message in cases.items():
        result = run(*args)
        assert result.exit_code == 2, result.output
        assert result.stderr.startswith(message), result.stderr
    busy = tmp_path / "busy.parquet"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    result = run(str(busy), "--layout", "parts")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {busy}: a folder that holds no deepflow dataset; give a new or empty folder.\n"
    )
    taken = tmp_path / "taken.parquet"
    taken.write_text("x")
    result = run(str(taken), "--layout", "parts")
    assert result.stderr == f"error: {taken}: is a file; the parts layout writes a folder.\n"
    result = run(str(tmp_path / "x.parquet"), "--layout", "rows")
    assert result.stderr == "error: --layout must be one of: file, parts; got 'rows'.\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy.parquet", "taken.parquet"]


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Any:
    """An S3-compatible server in this process (moto) with a bucket ``sweeps``; yields the
    query part of its URIs (credentials in the environment, as pyarrow and Ray workers read
    them)."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "deepflow")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.client("s3", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
    client.create_bucket(Bucket="sweeps")
    try:
        yield client, f"endpoint_override={host}:{port}&scheme=http&region=us-east-1"
    finally:
        server.stop()


def test_the_parts_go_to_s3(single: Any, s3: Any) -> None:
    """In this process and from Ray tasks, through pyarrow's S3 filesystem: the rows of the
    file layout, resumable, refused when finished, no temporary left."""
    client, query = s3
    backends: list[dict[str, Any]] = [{"workers": 1}]
    try:
        import ray  # noqa: F401

        backends.append({"backend": "ray", "workers": 2})
    except ImportError:  # pragma: no cover - the dist extra
        pass
    for i, how in enumerate(backends):
        uri = f"s3://sweeps/run{i}/d.parquet?{query}"
        result = sample(SPACE, num_samples=300, out=uri, chunk_size=64, layout="parts", **how)
        assert result.num_feasible == int(single["feasible"].sum())
        _same(load(uri), single)
        with pytest.raises(ConfigError, match=r" holds a finished dataset; delete it"):
            sample(SPACE, num_samples=300, out=uri, chunk_size=64, layout="parts", **how)
        again = sample(SPACE, num_samples=300, out=uri, chunk_size=64, layout="parts",
                       resume=True, **how)  # fmt: skip
        assert again.resumed_rows == 300
        listed = client.list_objects_v2(Bucket="sweeps", Prefix=f"run{i}/d.parquet/")
        names = {o["Key"].rsplit("/", 1)[1] for o in listed["Contents"]} - {""}
        assert names == {"_deepflow.json", *PARTS}  # no temporary left behind

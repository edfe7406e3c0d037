"""The Ray backend: workers write their part files; start-up failures are one line and leave
no parts folder behind."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from deepflow.cli import app
from tests.conftest import REPO

SPACE = str(REPO / "configs" / "spaces" / "mapping-spec.yaml")
runner = CliRunner()


@pytest.fixture
def ray_init(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Replace ``ray.init`` by one that raises what it is given (no cluster is started)."""
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dist]')")

    def install(exc: BaseException) -> None:
        def init(*args: object, **kwargs: object) -> None:
            raise exc

        monkeypatch.setattr(ray, "init", init)

    return install


def _sample(out: Path, *extra: str) -> Any:
    return runner.invoke(app, ["sample", SPACE, "--num-samples", "16", "--out", str(out),
                               "--backend", "ray", "--workers", "1", *extra])  # fmt: skip


def test_an_existing_cluster_without_address(ray_init: Any, tmp_path: Path) -> None:
    # What ray.init(num_cpus=...) raises when `ray start` already runs on the machine.
    ray_init(ValueError("When connecting to an existing cluster, num_cpus and num_gpus must "
                        "not be provided."))  # fmt: skip
    result = _sample(tmp_path / "d.parquet")
    assert result.exit_code == 2
    assert result.stderr.endswith(
        "error: --backend ray: a Ray cluster is already running on this machine; join it with "
        "--address auto (its nodes need this deepflow installed), or stop it (ray stop) to "
        "sample on a private one.\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no d.parquet.parts/ to block


def test_an_address_where_no_cluster_answers(ray_init: Any, tmp_path: Path) -> None:
    ray_init(ConnectionError("Could not find any running Ray instance.\nmore"))
    result = _sample(tmp_path / "d.parquet", "--address", "10.0.0.9:6379")
    assert result.exit_code == 2
    assert result.stderr.endswith(
        "error: --address 10.0.0.9:6379: no Ray cluster answers there (Could not find any "
        "running Ray instance.).\n"
    )
    assert not re.search(r"Traceback", result.output)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_ray_workers_write_the_parts_and_the_file_is_the_local_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dist]')")
    import deepflow.datasets.engine as engine
    from deepflow.datasets import sample

    written: list[str] = []
    real = engine.write_atomic

    def spy(path: Path, data: bytes) -> None:
        written.append(Path(path).name)
        real(path, data)

    monkeypatch.setattr(engine, "write_atomic", spy)
    sample(SPACE, num_samples=300, out=tmp_path / "l.parquet", workers=1, chunk_size=64)
    assert sum(name.startswith("chunk-") for name in written) == 5  # the driver wrote them
    written.clear()
    sample(SPACE, num_samples=300, out=tmp_path / "r.parquet", backend="ray", workers=2,
           chunk_size=64)  # fmt: skip
    assert written and not any(name.startswith("chunk-") for name in written), written
    assert (tmp_path / "l.parquet").read_bytes() == (tmp_path / "r.parquet").read_bytes()
    assert not (tmp_path / "r.parquet.parts").exists()

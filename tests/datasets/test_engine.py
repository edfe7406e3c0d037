"""The local backend's workers: a chunk from drawn points equals the chunk drawn in place,
and labelling imports neither scipy (Sobol') nor pandas (start-up time per worker)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from deepflow.datasets import load_space
from deepflow.datasets.engine import _Job, compute_chunk
from deepflow.datasets.io import oracle_version
from deepflow.datasets.label import cube_rows, label_rows
from tests.conftest import REPO


def _job(path: Path, num_samples: int) -> _Job:
    space = load_space(path)
    return _Job(text=space.text, file=space.file, base_dir=space.base_dir, seed=5,
                num_samples=num_samples, oracle_version=oracle_version(),
                config_path="")  # fmt: skip


def test_chunk_from_drawn_points_equals_the_chunk_drawn_in_the_worker(
    design_space: dict[str, Any], write_yaml: Callable[..., Path]
) -> None:
    path = write_yaml(design_space, name="design.yaml")
    space = load_space(path)
    job = _job(path, 300)
    u = cube_rows(space, seed=5, start=100, stop=164, num_samples=300)
    index, given = compute_chunk(job, 3, 100, 164, u)
    _, drawn = compute_chunk(job, 3, 100, 164)
    assert index == 3 and given == drawn
    expected = label_rows(space, seed=5, start=100, stop=164, num_samples=300,
                          oracle_version=job.oracle_version)  # fmt: skip
    assert pq.read_table(pa.BufferReader(given)).equals(expected)


def test_labelling_imports_neither_scipy_nor_pandas(tmp_path: Path) -> None:
    # A worker given its points needs neither; the driver needs scipy's Sobol' engine only.
    script = f"""
import sys
from deepflow.datasets.engine import _Job, compute_chunk
from deepflow.datasets.space import load_space
from deepflow.oracle.version import oracle_version
space = load_space({str(REPO / "configs" / "spaces" / "llm-pathfinding.yaml")!r})
job = _Job(text=space.text, file=space.file, base_dir=space.base_dir, seed=0,
           num_samples=64, oracle_version=oracle_version(), config_path="")
import numpy as np
compute_chunk(job, 0, 0, 64, np.random.default_rng(0).random((64, space.num_dims)))
print(sorted(m for m in ("scipy", "pandas", "torch") if m in sys.modules))
from deepflow.datasets import sample
sample(space, num_samples=64, chunk_size=32, out={str(tmp_path / "d.parquet")!r})
print(sorted(m for m in ("pandas", "torch") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, cwd=REPO)  # fmt: skip
    assert out.stdout.split() == ["[]", "[]"], out.stdout + out.stderr


def test_a_worker_with_another_oracle_refuses(tmp_path: Path) -> None:
    import socket

    from deepflow.errors import DeepflowError

    space = REPO / "configs" / "spaces" / "mapping-spec.yaml"
    job = _Job(text=space.read_text(encoding="utf-8"), file=str(space), base_dir=str(space.parent),
               seed=0, num_samples=8, oracle_version="0.0.0+elsewhere", config_path="")  # fmt: skip
    with pytest.raises(DeepflowError, match=re.escape(
            f"a worker on {socket.gethostname()} runs oracle {oracle_version()}, the driver "
            "0.0.0+elsewhere; install the same deepflow and calibration files on every node "
            "(DEEPFLOW_CONFIG_PATH as on the driver).")):  # fmt: skip
        compute_chunk(job, 0, 0, 8)
    ok = dataclasses.replace(job, oracle_version=oracle_version())
    index, data = compute_chunk(ok, 0, 0, 8)
    assert index == 0 and data[:4] == b"PAR1"

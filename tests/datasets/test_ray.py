"""The Ray backend: workers write their part files; start-up failures are one line and leave
no parts folder behind."""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Iterator
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


def _pids_of(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (this test's Ray temp folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry.name))
    return found


@pytest.fixture
def ray_cluster(tmp_path: Path) -> Iterator[tuple[int, str, dict[str, str]]]:
    """A real local cluster (``ray start --head``, 2 CPUs): (port, its temp folder, env).
    Its processes (found by the temp folder in their command line) are killed afterwards."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import tempfile

    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dist]')")
    ray_dir = tempfile.mkdtemp(prefix="dfray", dir="/tmp")  # Ray's socket paths must be short
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    try:
        subprocess.run([str(Path(sys.executable).with_name("ray")), "start", "--head", "--port",
                        str(port), "--temp-dir", ray_dir, "--num-cpus", "2",
                        "--include-dashboard", "false", "--disable-usage-stats"], env=env,
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        yield port, ray_dir, env
    finally:
        import psutil

        for pid in _pids_of(ray_dir):
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(pid).children(recursive=True):
                    child.kill()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_dir, ignore_errors=True)  # Ray's session logs


def _wait_for_a_chunk(parts: Path, run: Any) -> None:
    import json
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and run.poll() is None:
        manifest = parts / "manifest.json"
        if manifest.is_file() and json.loads(manifest.read_text())["chunks"]:
            return
        time.sleep(0.1)
    assert run.poll() is None, run.communicate()


@pytest.mark.slow
def test_a_killed_worker_changes_nothing(ray_cluster: tuple[int, str, dict[str, str]],
                                         tmp_path: Path) -> None:  # fmt: skip
    """On a `ray start --head` cluster joined with --address: a worker killed mid-run is
    replaced (Ray retries its task), and the file is the local backend's, byte for byte."""
    import subprocess
    import sys

    import psutil

    from deepflow.datasets import sample

    port, ray_dir, env = ray_cluster
    out = tmp_path / "r.parquet"
    args = [sys.executable, "-m", "deepflow", "sample", "llm-pathfinding", "--num-samples",
            "300000", "--chunk-rows", "2048"]  # fmt: skip
    run = subprocess.Popen([*args, "--out", str(out), "--backend", "ray", "--address",
                            f"127.0.0.1:{port}"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_a_chunk(tmp_path / "r.parquet.parts", run)
    raylets = [pid for pid in _pids_of(ray_dir)
               if b"raylet" in Path(f"/proc/{pid}/cmdline").read_bytes()]  # fmt: skip
    workers = [c for pid in raylets for c in psutil.Process(pid).children(recursive=True)
               if "compute_chunk_to" in " ".join(c.cmdline())]  # fmt: skip
    assert workers, "no busy Ray worker found"
    workers[0].kill()
    _, stderr = run.communicate(timeout=600)
    assert run.returncode == 0, stderr
    sample("llm-pathfinding", num_samples=300000, out=tmp_path / "l.parquet", workers=2,
           chunk_size=2048)  # fmt: skip
    assert out.read_bytes() == (tmp_path / "l.parquet").read_bytes()


@pytest.mark.slow
def test_a_lost_head_stops_the_run_with_the_resume_hint(tmp_path: Path) -> None:
    """A real cluster (ray start --head); its head killed mid-run: one line within seconds
    (Ray alone waits a minute and exits without a word), the chunks kept, --resume finishes."""
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys
    import tempfile
    import time

    pytest.importorskip("ray", reason="ray is not installed (pip install -e '.[dist]')")
    ray_dir = tempfile.mkdtemp(prefix="dfray", dir="/tmp")  # Ray's socket paths must be short
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
    ray_bin = Path(sys.executable).with_name("ray")
    out = tmp_path / "d.parquet"
    try:
        subprocess.run([str(ray_bin), "start", "--head", "--port", str(port), "--temp-dir",
                        ray_dir, "--num-cpus", "2", "--include-dashboard", "false",
                        "--disable-usage-stats"], env=env, check=True, capture_output=True,
                       timeout=120)  # fmt: skip
        args = [sys.executable, "-m", "deepflow", "sample", "llm-pathfinding", "--num-samples",
                "1000000", "--chunk-rows", "2048", "--out", str(out)]  # fmt: skip
        run = subprocess.Popen([*args, "--backend", "ray", "--address", f"127.0.0.1:{port}"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)  # fmt: skip
        manifest = out.with_name("d.parquet.parts") / "manifest.json"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and run.poll() is None:
            if manifest.is_file() and json.loads(manifest.read_text())["chunks"]:
                break
            time.sleep(0.2)
        assert run.poll() is None, run.communicate()
        for pid in _pids_of(ray_dir):  # the head: its GCS and raylet
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"gcs_server" in cmdline or b"raylet" in cmdline:
                os.kill(pid, signal.SIGKILL)
        killed = time.monotonic()
        _, stderr = run.communicate(timeout=90)
        assert time.monotonic() - killed < 45
        assert run.returncode == 1
        head = (
            f":{port} stopped answering; the finished chunks are kept in {out}.parts: run "
            "again with --resume once a cluster is up."
        )
        assert head in stderr.splitlines()[-1] and "Traceback" not in stderr
        assert stderr.splitlines()[-1].startswith("error: the Ray head at ")
        kept = json.loads(manifest.read_text())["chunks"]
        assert kept
    finally:
        for pid in _pids_of(ray_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(ray_dir, ignore_errors=True)  # Ray's session logs
    resumed = subprocess.run([*args, "--workers", "2", "--resume", "--json"], env=env,
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["resumed_rows"] == sum(c["rows"] for c in kept.values())
    assert result["num_rows"] == 1000000 and not out.with_name("d.parquet.parts").exists()

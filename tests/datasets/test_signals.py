"""A killed ``deepflow sample`` leaves no process behind: its loky workers and the pools'
resource trackers end with it (SIGKILL: the workers notice their parent is gone; SIGTERM: the
run unwinds and shuts its pool down, removing its lock)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc (Linux)")


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (psutil where installed, else /proc)."""
    try:
        import psutil
    except ImportError:
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.add(int(entry.name))
        return found
    try:
        return {c.pid for c in psutil.Process(pid).children()}
    except psutil.NoSuchProcess:
        return set()


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (an exited process not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_killed_sample_leaves_no_child_process(tmp_path: Path, signum: int) -> None:
    out = tmp_path / "big.parquet"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    space = REPO / "configs" / "spaces" / "llm-pathfinding.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deepflow.cli", "sample", str(space), "--num-samples", "400000",
         "--out", str(out), "--workers", "2"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        kids: set[int] = set()
        while time.monotonic() < deadline and proc.poll() is None:
            kids = {k for k in _children(proc.pid) if _running(k)}
            if len(kids) >= 3:  # two workers and at least one resource tracker
                break
            time.sleep(0.2)
        assert len(kids) >= 3, "the pool did not start"
        time.sleep(1.0)  # the workers are computing chunks
        kids |= _children(proc.pid)
        proc.send_signal(signum)
        assert proc.wait(timeout=60) == (-signum if signum == signal.SIGKILL else 128 + signum)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and any(_running(k) for k in kids):
            time.sleep(0.2)
        assert [k for k in kids if _running(k)] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if signum == signal.SIGTERM:
        assert not (tmp_path / "big.parquet.lock").exists()
    assert not out.exists()

"""The dependency split: the core installs and runs without torch; the ml extra brings it.

``BLOCK_ML`` makes ``import torch`` (botorch, gpytorch) fail in a subprocess as it would where
the ml extra is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import REPO

ML = ("torch", "botorch", "gpytorch")
BLOCK_ML = f"""
import sys
class _Block:
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in {ML!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, _Block())
"""


def run_cli(args: list[str], *, cwd: Path, block_ml: bool = False,
            check_modules: bool = False) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``deepflow ARGS`` in a fresh interpreter; ``check_modules`` prints the ml modules that
    were imported, on the last line of stdout."""
    code = (
        (BLOCK_ML if block_ml else "")
        + f"""
import sys
sys.argv = ["deepflow", *{args!r}]
from deepflow.cli import main
try:
    main()
finally:
    if {check_modules!r}:
        print(sorted(m for m in sys.modules if m.split(".")[0] in {ML!r}))
"""
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def _core_requirements() -> list[Requirement]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return [Requirement(r) for r in data["project"]["dependencies"]]


def test_core_dependency_tree_has_no_torch() -> None:
    """Every distribution the core requires, transitively (installed metadata, no extras)."""
    seen: set[str] = set()
    todo = _core_requirements()
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        for sub in metadata.requires(req.name) or []:
            todo.append(Requirement(sub))
    assert "optuna" in seen and "pyarrow" in seen
    assert not seen & {"torch", "botorch", "gpytorch", "linear-operator", "ray"}, sorted(seen)


def test_ml_extra_holds_torch_botorch_gpytorch() -> None:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    extras = data["project"]["optional-dependencies"]
    assert {Requirement(r).name for r in extras["ml"]} >= set(ML)
    assert {"dev", "dist", "ml", "postgres"} <= set(extras)
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "-e '.[dev,dist,ml,postgres]'" in makefile


def test_random_search_imports_no_torch(tmp_path: Path) -> None:
    proc = run_cli(["search", "default", "--strategy", "random", "--budget", "6", "--out",
                    "res", "--json"], cwd=tmp_path, check_modules=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "[]"


def test_surrogate_without_torch_names_the_extra(tmp_path: Path) -> None:
    from deepflow.datasets import sample

    data = tmp_path / "d.parquet"
    sample(REPO / "configs/spaces/mapping-spec.yaml", num_samples=20, out=data, workers=1)
    proc = run_cli(["fit", str(data), "--out", "m"], cwd=tmp_path, block_ml=True)
    assert proc.returncode == 1
    assert proc.stderr == (
        "error: this needs torch, which is not installed; install the ml extra: "
        "pip install 'deepflow[ml]' (CPU torch first: README, 'Installing').\n"
    )
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_core_commands_run_without_torch(tmp_path: Path) -> None:
    """Where torch cannot be imported: evaluate, sample, an Optuna search and the report."""
    for args in (["evaluate", "gpt3-175b-a100"],
                 ["sample", "mapping-spec", "--num-samples", "32", "--workers", "1", "--out",
                  "d.parquet"],
                 ["search", "default", "--strategy", "tpe", "--budget", "6", "--out", "res"],
                 ["report", "res"]):  # fmt: skip
        proc = run_cli(args, cwd=tmp_path, block_ml=True)
        assert proc.returncode == 0, (args, proc.stderr)
    assert (tmp_path / "res" / "report.html").is_file()

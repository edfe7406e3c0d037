"""The wheel works anywhere: built from a copy of the source, installed into a fresh venv
without the checkout on the path, and run from a temporary folder.

The fresh venv reaches the dependencies through a ``.pth`` file naming this interpreter's
``site-packages`` (no download); the wheel itself is installed with ``pip --target`` into the
venv's own ``site-packages``, which comes first on its path, so ``import deepflow`` and the
presets resolve to the installed copy.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel and a venv (about 10 s), then runs the CLI

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("deepflow", "configs", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:  # fmt: skip
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A wheel built from a copy of the sources and installed into a fresh venv."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, src / name)
    dist = root / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(dist), str(src)], cwd=root)  # fmt: skip
    (wheel,) = dist.glob("deepflow-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                      "['purelib'])"], cwd=root).stdout.strip())  # fmt: skip
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz-deepflow-test-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
          str(site), str(wheel)], cwd=root)  # fmt: skip
    work = root / "work"
    work.mkdir()
    return {"wheel": wheel, "python": python, "script": site / "bin" / "deepflow",
            "site": site, "work": work}  # fmt: skip


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEEPFLOW_CONFIG_PATH")}
    return {**env, **extra}


def test_wheel_carries_presets_calibration_and_measurements(installed: dict[str, Path]) -> None:
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for kind in ("devices", "networks", "models", "technologies", "frameworks", "scenarios",
                 "spaces", "studies"):  # fmt: skip
        shipped = {Path(n).stem for n in names if n.startswith(f"deepflow/configs/{kind}/")}
        assert shipped == {p.stem for p in (REPO / "configs" / kind).glob("*.yaml")}, kind
    for name in ("frameworks", "kernels", "network"):
        assert f"deepflow/configs/calibration/{name}.yaml" in names
    assert "deepflow/data/measurements_public.json" in names
    assert "deepflow/__main__.py" in names


def test_installed_wheel_runs_from_any_folder(installed: dict[str, Path]) -> None:
    """show, evaluate, validate, sample, search --strategy random: from a temporary folder,
    with the installed package and its built-in presets (not the checkout's)."""
    work, script, site = installed["work"], str(installed["script"]), installed["site"]
    where = _run([str(installed["python"]), "-c", "import deepflow, deepflow.config as c; "
                  "print(deepflow.__file__); print(c.builtin_config_dir())"],
                 cwd=work, env=_env()).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(site) for p in where), where

    shown = json.loads(_run([script, "show", "gpt3-175b-a100", "--json"], cwd=work,
                            env=_env()).stdout)  # fmt: skip
    assert shown["system"]["device"]["name"] == "a100-sxm4-80gb"
    result = json.loads(_run([script, "evaluate", "gpt3-175b-a100", "--json"], cwd=work,
                             env=_env()).stdout)  # fmt: skip
    assert result["step_time_s"] > 0
    report = json.loads(_run([script, "validate", "--json"], cwd=work, env=_env()).stdout)
    assert len(report["cases"]) > 100
    _run([script, "sample", "llm-pathfinding", "--num-samples", "32", "--workers", "1",
          "--out", "d.parquet"], cwd=work, env=_env())  # fmt: skip
    assert (work / "d.parquet").is_file()
    summary = json.loads(_run([script, "search", "default", "--strategy", "random",
                               "--budget", "6", "--out", "res", "--json"], cwd=work,
                              env=_env()).stdout)  # fmt: skip
    assert summary["num_evaluations"] == 6
    again = _run([str(installed["python"]), "-m", "deepflow", "--version"], cwd=work, env=_env())
    assert again.stdout.startswith("deepflow ")


def test_installed_wheel_reads_user_presets_first(installed: dict[str, Path]) -> None:
    """DEEPFLOW_CONFIG_PATH overrides a built-in preset and adds new ones."""
    work = installed["work"]
    user = work / "user-configs"
    (user / "scenarios").mkdir(parents=True)
    builtin = installed["site"] / "deepflow" / "configs" / "scenarios" / "gpt3-175b-a100.yaml"
    text = builtin.read_text(encoding="utf-8")
    (user / "scenarios" / "mine.yaml").write_text(text, encoding="utf-8")
    out = _run([str(installed["script"]), "show", "mine", "--json"], cwd=work,
               env=_env(DEEPFLOW_CONFIG_PATH=str(user))).stdout  # fmt: skip
    assert json.loads(out)["system"]["device"]["name"] == "a100-sxm4-80gb"

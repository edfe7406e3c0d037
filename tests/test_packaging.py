"""The wheel works anywhere: built from a copy of the source, installed into a fresh venv
without the checkout on the path, and run from a temporary folder.

The fresh venv reaches the dependencies through a ``.pth`` file naming this interpreter's
``site-packages`` (no download); the wheel itself is installed with ``pip --target`` into the
venv's own ``site-packages``, which comes first on its path, so ``import deepflow`` and the
presets resolve to the installed copy. The core install (no extra) is a second fresh venv
whose ``.pth`` names a folder holding only the core's dependency tree, as the wheel's metadata
declares it (what ``pip install deepflow`` resolves, read offline from the installed
distributions): torch and the other extras are absent there, not blocked.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

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
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
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
    # The console script's first line names the interpreter pip ran with (this one, whose
    # path finds the checkout): it is run by the fresh venv's interpreter instead.
    return {"wheel": wheel, "python": python, "cli": [str(python), str(site / "bin" / "deepflow")],
            "site": site, "work": work}  # fmt: skip


#: Distributions of the extras (ml, dist, postgres) the core must run without.
EXTRAS_ONLY = ("torch", "botorch", "gpytorch", "linear-operator", "safetensors", "onnx", "ray",
               "psycopg")  # fmt: skip


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


def _core_closure(wheel: Path) -> dict[str, metadata.Distribution]:
    """The distributions ``pip install deepflow`` (no extra) resolves to: the wheel's
    requirements without an ``extra`` marker and theirs, recursively, as installed here."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode("utf-8")
    todo = [line.split(":", 1)[1].strip() for line in text.splitlines()
            if line.startswith("Requires-Dist:")]  # fmt: skip
    found: dict[str, metadata.Distribution] = {}
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue  # an extra's requirement, or one for another platform
        if _name(req.name) in found:
            continue
        dist = metadata.distribution(req.name)
        found[_name(req.name)] = dist
        todo += dist.requires or []
    return found


def _site_of(dists: dict[str, metadata.Distribution], to: Path) -> Path:
    """A site-packages folder holding only ``dists``: a link per top-level entry they
    installed (packages, modules, ``.dist-info``), nothing of any other distribution."""
    to.mkdir()
    for dist in dists.values():
        for file in dist.files or []:
            top = Path(file).parts[0]
            source = Path(str(dist.locate_file(top)))
            if top == ".." or top.endswith(".pth") or (to / top).exists():
                continue
            (to / top).symlink_to(source, target_is_directory=source.is_dir())
    return to


@pytest.fixture(scope="module")
def core_only(installed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
              ) -> dict[str, Any]:  # fmt: skip
    """The wheel in a fresh venv that holds only the core's dependency closure (no extra)."""
    root = tmp_path_factory.mktemp("core")
    deps = _site_of(_core_closure(installed["wheel"]), root / "deps")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                      "['purelib'])"], cwd=root).stdout.strip())  # fmt: skip
    (site / "zz-deepflow-core-deps.pth").write_text(f"{deps}\n")
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
          str(site), str(installed["wheel"])], cwd=root)  # fmt: skip
    work = root / "work"
    work.mkdir()
    return {"python": python, "cli": [str(python), str(site / "bin" / "deepflow")], "work": work}


def test_the_core_has_no_extra_in_its_dependency_tree(installed: dict[str, Any]) -> None:
    closure = _core_closure(installed["wheel"])
    assert {"numpy", "pandas", "pyarrow", "optuna", "typer"} <= set(closure)
    assert not set(closure) & {_name(n) for n in EXTRAS_ONLY}, sorted(closure)


def test_the_core_alone_runs_the_core_commands(core_only: dict[str, Any]) -> None:
    """show, evaluate, validate, sample and search --strategy random with only the core's
    dependencies installed (torch and the other extras absent, not blocked); fit names the
    extra it needs."""
    python, cli, work = str(core_only["python"]), core_only["cli"], core_only["work"]
    missing = _run([python, "-c", "import importlib.util as u; print([m for m in ('torch', "
                    "'botorch', 'ray', 'safetensors') if u.find_spec(m)])"], cwd=work,
                   env=_env()).stdout.strip()  # fmt: skip
    assert missing == "[]"
    for args in (["show", "lstm-v100-crossflow", "--json"], ["evaluate", "gpt3-175b-a100"],
                 ["validate", "--json"]):  # fmt: skip
        _run([*cli, *args], cwd=work, env=_env())
    _run([*cli, "sample", "mapping-spec", "--num-samples", "64", "--workers", "1", "--out",
          "d.parquet"], cwd=work, env=_env())  # fmt: skip
    summary = json.loads(_run([*cli, "search", "default", "--strategy", "random",
                               "--budget", "6", "--out", "res", "--json"], cwd=work,
                              env=_env()).stdout)  # fmt: skip
    assert summary["num_evaluations"] == 6
    fit = subprocess.run(
        [*cli, "fit", "d.parquet", "--surrogate", "mlp", "--out", "m"],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fit.returncode == 1, fit.stderr
    assert fit.stderr == (
        "error: this needs torch, which is not installed; install the ml extra: pip install "
        "'deepflow[ml]' (CPU torch first: README, 'Installing').\n"
    )
    assert not (work / "m").exists()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEEPFLOW_CONFIG_PATH")}
    return {**env, **extra}


def test_wheel_carries_presets_calibration_and_measurements(installed: dict[str, Any]) -> None:
    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    for kind in ("devices", "networks", "models", "technologies", "frameworks", "scenarios",
                 "spaces", "studies"):  # fmt: skip
        shipped = {Path(n).stem for n in names if n.startswith(f"deepflow/configs/{kind}/")}
        assert shipped == {p.stem for p in (REPO / "configs" / kind).glob("*.yaml")}, kind
    for name in ("frameworks", "kernels", "network"):
        assert f"deepflow/configs/calibration/{name}.yaml" in names
    assert "deepflow/data/measurements_public.json" in names
    assert "deepflow/__main__.py" in names


def test_installed_wheel_runs_from_any_folder(installed: dict[str, Any]) -> None:
    """show, evaluate, validate, sample, search --strategy random: from a temporary folder,
    with the installed package and its built-in presets (not the checkout's)."""
    work, cli, site = installed["work"], installed["cli"], installed["site"]
    where = _run([str(installed["python"]), "-c", "import deepflow, deepflow.config as c; "
                  "print(deepflow.__file__); print(c.builtin_config_dir())"],
                 cwd=work, env=_env()).stdout.split()  # fmt: skip
    assert all(Path(p).is_relative_to(site) for p in where), where

    shown = json.loads(_run([*cli, "show", "gpt3-175b-a100", "--json"], cwd=work,
                            env=_env()).stdout)  # fmt: skip
    assert shown["system"]["device"]["name"] == "a100-sxm4-80gb"
    result = json.loads(_run([*cli, "evaluate", "gpt3-175b-a100", "--json"], cwd=work,
                             env=_env()).stdout)  # fmt: skip
    assert result["step_time_s"] > 0
    report = json.loads(_run([*cli, "validate", "--json"], cwd=work, env=_env()).stdout)
    assert len(report["cases"]) > 100
    _run([*cli, "sample", "llm-pathfinding", "--num-samples", "32", "--workers", "1",
          "--out", "d.parquet"], cwd=work, env=_env())  # fmt: skip
    assert (work / "d.parquet").is_file()
    summary = json.loads(_run([*cli, "search", "default", "--strategy", "random",
                               "--budget", "6", "--out", "res", "--json"], cwd=work,
                              env=_env()).stdout)  # fmt: skip
    assert summary["num_evaluations"] == 6
    again = _run([str(installed["python"]), "-m", "deepflow", "--version"], cwd=work, env=_env())
    assert again.stdout.startswith("deepflow ")


def test_installed_wheel_reads_user_presets_first(installed: dict[str, Any]) -> None:
    """DEEPFLOW_CONFIG_PATH overrides a built-in preset and adds new ones."""
    work = installed["work"]
    user = work / "user-configs"
    (user / "scenarios").mkdir(parents=True)
    builtin = installed["site"] / "deepflow" / "configs" / "scenarios" / "gpt3-175b-a100.yaml"
    text = builtin.read_text(encoding="utf-8")
    (user / "scenarios" / "mine.yaml").write_text(text, encoding="utf-8")
    out = _run([*installed["cli"], "show", "mine", "--json"], cwd=work,
               env=_env(DEEPFLOW_CONFIG_PATH=str(user))).stdout  # fmt: skip
    assert json.loads(out)["system"]["device"]["name"] == "a100-sxm4-80gb"

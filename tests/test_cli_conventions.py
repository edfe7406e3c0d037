"""CLI conventions: ``python -m deepflow``, ``-h``, shell completion, scenario presets by name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from deepflow.cli import app
from tests.conftest import REPO

runner = CliRunner()


def test_short_help_is_the_long_help() -> None:
    short, long = runner.invoke(app, ["-h"]), runner.invoke(app, ["--help"])
    assert short.exit_code == long.exit_code == 0
    assert short.stdout == long.stdout
    assert (
        runner.invoke(app, ["sample", "-h"]).stdout
        == runner.invoke(app, ["sample", "--help"]).stdout
    )


def test_shell_completion_is_offered() -> None:
    out = runner.invoke(app, ["--help"]).stdout
    assert "--install-completion" in out and "--show-completion" in out


def test_python_dash_m_deepflow(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "deepflow", "--version", "--json"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) == {"version", "contract_version"}


def test_scenario_preset_by_name() -> None:
    by_name = runner.invoke(app, ["show", "gpt3-175b-a100", "--json"])
    by_path = runner.invoke(app, ["show", str(REPO / "configs/scenarios/gpt3-175b-a100.yaml"),
                                  "--json"])  # fmt: skip
    assert by_name.exit_code == 0, by_name.stderr
    assert json.loads(by_name.stdout)["system"] == json.loads(by_path.stdout)["system"]


def test_unknown_scenario_preset_names_the_closest() -> None:
    result = runner.invoke(app, ["evaluate", "gpt3-175b-a10"])
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: gpt3-175b-a10: no such file or scenario preset; did you mean 'gpt3-175b-a100'? "
        "Available: "
    )

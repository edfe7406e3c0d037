"""The CLI shell: version, help, show (human and JSON), and a light import."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.testing import CliRunner

from deepflow import CONTRACT_VERSION, __version__
from deepflow.cli import app
from tests.conftest import REPO

runner = CliRunner()
EXAMPLE = REPO / "configs" / "scenarios" / "gpt3-175b-a100.yaml"


def test_version_json() -> None:
    result = runner.invoke(app, ["--version", "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {
        "version": __version__,
        "contract_version": CONTRACT_VERSION,
    }


def test_version_plain() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.startswith(f"deepflow {__version__}")


def test_help_lists_show() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "show" in result.stdout


def test_show_json_is_resolved_and_in_si_units() -> None:
    result = runner.invoke(app, ["show", str(EXAMPLE), "--json"])
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    device = data["system"]["device"]
    assert device["name"] == "a100-sxm4-80gb"
    assert device["peak_flops"]["bf16"] == 312e12  # A100 datasheet: 312 TFLOPS dense BF16
    assert device["hbm_capacity_B"] == 80 * 2**30
    assert data["workload"]["model"]["hidden_size"] == 12288
    assert data["mapping"]["tensor_parallel"] == 8
    assert data["derived"]["num_devices"] == 1536


def test_show_human_output_is_yaml() -> None:
    import yaml

    result = runner.invoke(app, ["show", str(EXAMPLE)])
    assert result.exit_code == 0
    assert yaml.safe_load(result.stdout)["system"]["network"]["name"] == "dgx-a100"


def test_cli_import_stays_light() -> None:
    code = "import sys, deepflow.cli; sys.exit('torch' in sys.modules or 'botorch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_console_script_exit_code_on_bad_input(tmp_path: object) -> None:
    exe = REPO / ".venv" / "bin" / "deepflow"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "deepflow.cli"]
    proc = subprocess.run([*cmd, "show", "does-not-exist.yaml"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr == "error: does-not-exist.yaml: no such file.\n"
    assert proc.stdout == ""


def test_evaluate_prints_a_serving_workloads_latencies() -> None:
    # a serving scenario's human output names what serving is judged by; a training one does not
    serving = REPO / "configs" / "scenarios" / "llama3-70b-serving-h100-poisson.yaml"
    result = runner.invoke(app, ["evaluate", str(serving)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "serving: TTFT " in result.stdout and " ms, request " in result.stdout
    assert "tokens/J" in result.stdout and "per M tokens" in result.stdout
    plain = runner.invoke(app, ["evaluate", str(EXAMPLE)], env={"COLUMNS": "200"})
    assert plain.exit_code == 0 and "serving:" not in plain.stdout


def test_disaggregated_pools_are_printed_by_evaluate_and_best_mapping() -> None:
    pools = REPO / "configs" / "scenarios" / "llama3-70b-serving-h100-disaggregated.yaml"
    result = runner.invoke(app, ["evaluate", str(pools)], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "requests in flight a decode replica" in result.stdout
    assert "pools: 4 prefill × TP 1, 1 decode × TP 4; each prompt's KV cache sent in " in (
        result.stdout)  # fmt: skip
    ranked = runner.invoke(app, ["best-mapping", str(pools), "--top", "40"],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert ranked.exit_code == 0
    assert "prefill DP" in ranked.stdout and "prefill TP" in ranked.stdout
    # a co-located row shows no pools
    assert any(line.rstrip(" │").endswith("-") for line in ranked.stdout.splitlines())
    slo = runner.invoke(app, ["best-mapping", str(pools), "--max-tpot-ms", "20"],
                        env={"COLUMNS": "200"})  # fmt: skip
    assert slo.exit_code == 0 and " within TPOT ≤ 20 ms" in slo.stdout
    bad = runner.invoke(app, ["best-mapping", str(pools), "--max-tpot-ms", "0"])
    assert bad.exit_code == 2 and "--max-tpot-ms must be > 0; got 0." in bad.output

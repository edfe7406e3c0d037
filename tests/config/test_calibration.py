"""Calibration files: one lookup rule (DEEPFLOW_CONFIG_PATH, then built-in), and the oracle
version hashes exactly the files in use."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from deepflow.config import load_scenario
from deepflow.config.calibration import (
    CALIBRATION_FILES,
    calibration_files,
    calibration_from,
    calibration_path,
    current_calibration,
    kernel_calibration,
)
from deepflow.config.loader import builtin_config_dir
from deepflow.datasets.io import oracle_version
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.workloads.transformer import ops
from tests.conftest import REPO

SCENARIO = REPO / "configs" / "scenarios" / "gpt3-175b-a100.yaml"


def test_builtin_files_are_used_without_an_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPFLOW_CONFIG_PATH", raising=False)
    builtin = builtin_config_dir() / "calibration"
    assert calibration_files() == tuple(builtin / f"{n}.yaml" for n in CALIBRATION_FILES)
    assert all(p.is_file() for p in calibration_files())


def test_override_changes_the_model_and_the_oracle_version(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("DEEPFLOW_CONFIG_PATH", raising=False)
    before_version = oracle_version()
    before = evaluate_one(load_scenario(SCENARIO))["step_time_s"]
    folder = tmp_path / "calibration"
    folder.mkdir()
    shutil.copy(calibration_path("kernels"), folder / "kernels.yaml")
    data = yaml.safe_load((folder / "kernels.yaml").read_text())
    ampere = data["families"]["ampere"]
    ampere["training_sustained_fraction"] = ampere["training_sustained_fraction"] / 2
    (folder / "kernels.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("DEEPFLOW_CONFIG_PATH", str(tmp_path))
    ops.clear_memos()
    try:
        assert calibration_path("kernels") == folder / "kernels.yaml"
        assert calibration_path("network") == builtin_config_dir() / "calibration" / "network.yaml"
        assert kernel_calibration("ampere").training_sustained_fraction == pytest.approx(
            ampere["training_sustained_fraction"]
        )
        assert oracle_version() != before_version
        assert evaluate_one(load_scenario(SCENARIO))["step_time_s"] > before
    finally:
        ops.clear_memos()
    monkeypatch.delenv("DEEPFLOW_CONFIG_PATH")
    assert oracle_version() == before_version


def test_calibration_is_an_explicit_input(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DEEPFLOW_CONFIG_PATH", raising=False)
    data = yaml.safe_load(calibration_path("kernels").read_text())
    data["families"]["ampere"]["training_sustained_fraction"] /= 2
    kernels = tmp_path / "kernels.yaml"
    kernels.write_text(yaml.safe_dump(data))
    slower = calibration_from(
        (calibration_path("frameworks"), kernels, calibration_path("network"))
    )
    assert slower.files[1] == kernels and current_calibration().files == calibration_files()
    scenario = load_scenario(SCENARIO)
    before = evaluate_one(scenario)["step_time_s"]
    assert evaluate_one(scenario, calibration=slower)["step_time_s"] > before
    assert evaluate_one(scenario)["step_time_s"] == before  # the default is untouched
    table = evaluate_table(scenario, {}, calibration=slower)
    assert table["step_time_s"][0] == evaluate_one(scenario, calibration=slower)["step_time_s"]


def test_a_frameworks_file_without_the_serving_entry_names_it(tmp_path: Path) -> None:
    data = yaml.safe_load(calibration_path("frameworks").read_text())
    assert data["tensorrt_llm_pytorch"]["host_us_per_request"] > 0
    del data["tensorrt_llm_pytorch"]
    frameworks = tmp_path / "frameworks.yaml"
    frameworks.write_text(yaml.safe_dump(data))
    calibration = calibration_from(
        (frameworks, calibration_path("kernels"), calibration_path("network"))
    )
    message = r"frameworks.yaml: tensorrt_llm_pytorch must be a mapping; got null \(empty\)\."
    with pytest.raises(ConfigError, match=message):
        _ = calibration.serving


def test_the_rowwise_float8_cast_efficiency_is_range_checked(tmp_path: Path) -> None:
    data = yaml.safe_load(calibration_path("frameworks").read_text())
    assert 0 < current_calibration().float8.rowwise_cast_efficiency < 1
    data["torchao_float8_rowwise"]["cast_efficiency"] = 1.5
    frameworks = tmp_path / "frameworks.yaml"
    frameworks.write_text(yaml.safe_dump(data))
    bad = calibration_from((frameworks, calibration_path("kernels"), calibration_path("network")))
    with pytest.raises(ConfigError, match=r"frameworks.yaml: torchao_float8_rowwise\."
                       r"cast_efficiency must be a number > 0 and <= 1; got 1\.5\."):  # fmt: skip
        _ = bad.float8


def test_memory_reserves_are_per_device_family(tmp_path: Path) -> None:
    # PyTorch on CUDA holds a context, NCCL buffers, workspaces and cached blocks; XLA on TPU
    # none of them (configs/calibration/frameworks.yaml, memory_by_family)
    cal = current_calibration()
    gpu, tpu = cal.memory_of("hopper"), cal.memory_of("tpu")
    assert gpu == cal.memory and gpu.cuda_context_B > 0 and gpu.fragmentation > 0
    assert (tpu.workspace_B, tpu.fragmentation, tpu.cuda_context_B, tpu.nccl_buffers_B) == (
        0.0, 0.0, 0.0, 0.0)  # fmt: skip
    data = yaml.safe_load(calibration_path("frameworks").read_text())
    data["memory_by_family"] = {"tpu-v9": {"cuda_context_MiB": 0}}
    frameworks = tmp_path / "frameworks.yaml"
    frameworks.write_text(yaml.safe_dump(data))
    bad = calibration_from((frameworks, calibration_path("kernels"), calibration_path("network")))
    family = r"unknown key 'memory_by_family.tpu-v9'; did you mean 'tpu'\? Valid keys: ampere"
    with pytest.raises(ConfigError, match=family):
        _ = bad.memory_of("tpu")
    data["memory_by_family"] = {"tpu": {"context_MiB": 0}}
    frameworks.write_text(yaml.safe_dump(data))
    bad = calibration_from((frameworks, calibration_path("kernels"), calibration_path("network")))
    name = r"unknown key 'memory_by_family.tpu.context_MiB'; did you mean 'cuda_context_MiB'"
    with pytest.raises(ConfigError, match=name):
        _ = bad.memory_of("tpu")


def test_the_dense_overlap_exponent_is_zero_or_at_least_one(tmp_path: Path) -> None:
    data = yaml.safe_load(calibration_path("kernels").read_text())
    data["families"]["hopper"]["gemm_overlap_exponent_dense"] = 0.5
    kernels = tmp_path / "kernels.yaml"
    kernels.write_text(yaml.safe_dump(data))
    calibration = calibration_from(
        (calibration_path("frameworks"), kernels, calibration_path("network"))
    )
    message = ("kernels.yaml: families.hopper.gemm_overlap_exponent_dense must be 0 (as "
               "gemm_overlap_exponent) or >= 1; got 0.5.")  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape(message)):
        calibration.kernel("hopper")
    # 0 (the default) reads as the family's gemm_overlap_exponent
    data["families"]["hopper"]["gemm_overlap_exponent_dense"] = 0
    kernels.write_text(yaml.safe_dump(data))
    calibration = calibration_from(
        (calibration_path("frameworks"), kernels, calibration_path("network"))
    )
    from deepflow.config import load_device
    from deepflow.oracle.hardware import device_caps

    caps = device_caps(load_device("h100-sxm5-80gb"), "fp8", calibration=calibration)
    assert caps.gemm_overlap_exponent_dense == caps.gemm_overlap_exponent


@pytest.mark.parametrize(
    ("key", "value", "rule"),
    [
        ("grouped_gemm_efficiency", 1.2, "> 0 and <= 1"),
        ("grouped_gemm_efficiency_fp4", 1.2, ">= 0 and <= 1"),
        ("gemm_overlap_exponent", 0.5, ">= 1"),
    ],
)
def test_the_grouped_gemm_constants_are_range_checked(
    tmp_path: Path, key: str, value: float, rule: str
) -> None:
    data = yaml.safe_load(calibration_path("kernels").read_text())
    data["families"]["hopper"][key] = value
    kernels = tmp_path / "kernels.yaml"
    kernels.write_text(yaml.safe_dump(data))
    calibration = calibration_from(
        (calibration_path("frameworks"), kernels, calibration_path("network"))
    )
    message = f"kernels.yaml: families.hopper.{key} must be a number {rule}; got {value}."
    with pytest.raises(ConfigError, match=re.escape(message)):
        calibration.kernel("hopper")

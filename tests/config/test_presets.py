"""Presets: every one loads, the contract's names exist, every number cites its source."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deepflow.config import list_presets, load_device, load_model, load_network
from deepflow.config.loader import builtin_config_dir

CONFIGS = builtin_config_dir()

CONTRACT_DEVICES = [
    "v100-sxm2-32gb", "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb",
    "b200", "gb200", "gb300", "tpu-v4", "tpu-v5e", "tpu-v5p",
]  # fmt: skip
CONTRACT_NETWORKS = [
    "dgx-v100", "dgx-a100", "dgx-h100", "dgx-b200", "gb200-nvl72", "tpu-v4-pod", "tpu-v5e-pod",
    "tpu-v5p-pod", "waferscale-20xv100",
]  # fmt: skip
CONTRACT_MODELS = [
    "gpt3-175b", "megatron-1t", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
    "lstm-lm-paper", "gemm-example",
]  # fmt: skip

SPEC_DEVICES = [n for n in list_presets("devices") if n in CONTRACT_DEVICES]


def test_contract_presets_exist() -> None:
    assert set(CONTRACT_DEVICES) <= set(list_presets("devices"))
    assert set(CONTRACT_NETWORKS) <= set(list_presets("networks"))
    assert set(CONTRACT_MODELS) <= set(list_presets("models"))


@pytest.mark.parametrize("name", SPEC_DEVICES)
def test_spec_device_loads_with_contract_keys(name: str) -> None:
    d = load_device(name)
    assert d.mode == "spec"
    assert d.peak_flops and all(v > 0 for v in d.peak_flops.values())
    assert {"fp16", "bf16"} & set(d.peak_flops), "a training device needs a 16-bit peak"
    assert d.hbm_capacity_B > 0 and d.hbm_bandwidth_Bps > 0 and d.clock_Hz > 0


@pytest.mark.parametrize("name", list_presets("networks"))
def test_network_loads(name: str) -> None:
    n = load_network(name)
    assert n.scale_up.domain_size >= 1
    assert n.scale_up.bandwidth_Bps >= n.scale_out.bandwidth_Bps


@pytest.mark.parametrize("name", list_presets("models"))
def test_model_loads(name: str) -> None:
    assert load_model(name).name == name


def test_gpt3_parameters_match_the_paper() -> None:
    # Brown et al. 2020, Table 2.1: 175.0 B parameters; 12·l·h²(1 + 13/(12h)) + (V + s)·h
    # (Narayanan et al. 2021, §5.1) gives 174.6 B with V = 51200.
    m = load_model("gpt3-175b")
    h, layers = m.hidden_size, m.num_layers
    params = 12 * layers * h**2 * (1 + 13 / (12 * h)) + (m.vocab_size + m.seq_length) * h
    assert params == pytest.approx(175e9, rel=0.01)


# --------------------------------------------------------------------- source comments
_UNIT = {"TFLOPS": 1.0, "PFLOPS": 1000.0, "TOPS": 1.0, "GB/s": 1.0, "TB/s": 1000.0}
_QUOTED = re.compile(r"(\d+(?:\.\d+)?)\s*(TFLOPS|PFLOPS|TOPS|GB/s|TB/s)")
_LINE = re.compile(r"^(\s*)([A-Za-z0-9_]+):\s*([-+0-9.eE]+)\s*(?:#(.*))?$")


def _checked_lines(path: Path) -> list[tuple[str, float, str]]:
    """(key, value, comment) for each peak_dense_TFLOPS entry and the hbm_bandwidth_GBps line."""
    out = []
    in_peak = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if re.match(r"^peak_dense_TFLOPS:\s*(#.*)?$", line):
            in_peak = True
            continue
        if in_peak and not line.startswith((" ", "\t")):
            in_peak = False
        match = _LINE.match(line)
        if not match:
            continue
        indent, name, value, comment = match.groups()
        if (in_peak and indent) or name == "hbm_bandwidth_GBps":
            label = f"peak_dense_TFLOPS.{name}" if in_peak else name
            out.append((label, float(value), comment or ""))
    return out


@pytest.mark.parametrize("name", SPEC_DEVICES)
def test_peak_flops_and_hbm_bandwidth_match_their_source_comment(name: str) -> None:
    path = CONFIGS / "devices" / f"{name}.yaml"
    lines = _checked_lines(path)
    device = load_device(name)
    assert len(lines) == len(device.peak_flops) + 1
    for label, value, comment in lines:
        quoted = [float(n) * _UNIT[u] for n, u in _QUOTED.findall(comment)]
        assert quoted, f"{path}: {label} has no '<number> <unit>' in its source comment"
        assert any(abs(q - value) <= 0.01 * value for q in quoted), (
            f"{path}: {label} = {value} but its comment says {comment.strip()!r}"
        )
        assert re.search(r"\[[A-Za-z0-9-]+\]", comment), f"{path}: {label} cites no [TAG]"
    for precision, flops in device.peak_flops.items():
        assert any(
            lbl == f"peak_dense_TFLOPS.{precision}" and v * 1e12 == flops for lbl, v, _ in lines
        )


@pytest.mark.parametrize(
    "path",
    sorted((CONFIGS / "devices").glob("*.yaml")) + sorted((CONFIGS / "networks").glob("*.yaml")),
    ids=lambda p: p.stem,
)
def test_every_number_has_a_source_comment(path: Path) -> None:
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _LINE.match(line)
        if match and match.group(2) not in ("num_dies",):
            assert match.group(4), f"{path}: '{line.strip()}' has no source comment"

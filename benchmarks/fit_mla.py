"""Fit a device family's latent attention decode efficiency to FlashMLA's published rates.

Run: .venv/bin/python benchmarks/fit_mla.py

One number per family (docs/model.md §D7): the compute-bound rate of the newest latent decode
kernel (FlashMLA's 2025-04-22 kernel, which SGLang and vLLM ship) over the family's 16-bit peak
at its sustained fraction (the clocks a whole job holds: the deep dive's H800 throttles to ~1600
MHz). The data are ``benchmarks/data/flashmla_h800.json`` (the README's first-release rates
and the deep dive's); the memory-bound rate is printed against the family's HBM efficiency, which
it checks rather than sets. Prints the fit; ``configs/calibration/kernels.yaml`` holds it as
``attention_efficiency_mla`` (tests/oracle/test_latent_attention.py checks they agree).
"""

from __future__ import annotations

import json
from pathlib import Path

from deepflow.config.calibration import current_calibration
from deepflow.config.loader import load_device
from deepflow.oracle.hardware import device_caps

DATA = Path(__file__).resolve().parent / "data" / "flashmla_h800.json"


def fit() -> dict[str, float]:
    """The family's efficiency from each published compute-bound rate, by case id, and the
    one the calibration takes (``newest``: the last case's)."""
    cases = json.loads(DATA.read_text())
    # H800 SXM5: H100 SXM5's compute and HBM3 (its NVLink is narrower), the same family
    caps = device_caps(load_device("h100-sxm5-80gb"), "bf16", calibration=current_calibration())
    sustained = caps.peak_flops * caps.training_sustained_fraction
    out = {c["id"]: c["measured"]["compute_bound_flops_per_s"] / sustained for c in cases}
    out["newest"] = out[cases[-1]["id"]]
    memory = [c["measured"]["memory_bound_bytes_per_s"] for c in cases
              if "memory_bound_bytes_per_s" in c["measured"]]  # fmt: skip
    out["memory_bound_over_hbm"] = memory[0] / (caps.hbm_bandwidth_Bps * caps.hbm_efficiency)
    return out


def main() -> None:
    result = fit()
    for key, value in result.items():
        print(f"{key:45s} {value:.3f}")
    print(f"hopper  attention_efficiency_mla = {result['newest']:.3f}")


if __name__ == "__main__":
    main()

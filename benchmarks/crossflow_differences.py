"""Our numbers next to the original CrossFlow's golden outputs (docs/crossflow-differences.md).

Run: .venv/bin/python benchmarks/crossflow_differences.py [GOLDEN_DIR]
GOLDEN_DIR holds the original's outputs (nanocad-lab/DeepFlow run at commit e8fc755, as
docs/crossflow-differences.md describes); they are not shipped in this repository.
Prints the markdown table the document embeds.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from deepflow.config import load_device, load_scenario, scenario_from_mapping
from deepflow.oracle.evaluate import evaluate_one
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.kernels import gemm_one

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "configs" / "scenarios"


def golden(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / f"{name}.json").read_text())


def fmt_s(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale or unit == "µs":
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds:.4g} s"  # pragma: no cover


def rows(folder: Path) -> list[tuple[str, str, str, str]]:
    out = []
    a100 = device_caps(load_device("a100-sxm4-80gb"), "fp16")
    h100 = device_caps(load_device("h100-sxm5-80gb"), "fp16")
    v100 = device_caps(load_device("v100-crossflow"), "fp16")

    g = golden(folder, "gemm_a100_80GB")["outputs"]["time_s"]
    ours = evaluate_one(load_scenario(SCENARIOS / "gemm-a100.yaml"))["step_time_s"]
    out.append(("gemm_a100_80GB (524288×128×8)", fmt_s(g), fmt_s(ours), "G1"))
    g = golden(folder, "gemm_H100_SXM5_80GB")["outputs"]["time_s"]
    out.append(("gemm_H100_SXM5_80GB", fmt_s(g), fmt_s(gemm_one(h100, 524288, 8, 128)), "G1"))
    wafer = evaluate_one(load_scenario(SCENARIOS / "gemm-waferscale-rc20.yaml"))["step_time_s"]
    for name in ("gemm_waferscale20v100_HEAD", "gemm_waferscale20v100_RC_kp1_20"):
        g = golden(folder, name)["outputs"]["time_s"]
        out.append((f"{name} (RC, kp1 = 20)", fmt_s(g), fmt_s(wafer), "G2"))

    sweep = golden(folder, "gemm_shape_sweep")["configs"]
    for label, caps in (("a100", a100), ("v100", v100)):
        key = next(k for k in sweep if k.startswith(label))
        ratios = [gemm_one(caps, r["M"], r["N"], r["K"]) / r["time_s"] for r in sweep[key]["rows"]]
        out.append((
            f"gemm_shape_sweep, {label} (15 shapes)",
            "1 (reference)",
            f"ours/theirs median {statistics.median(ratios):.2f}, "
            f"range {min(ratios):.2f}–{max(ratios):.2f}",
            "G3",
        ))  # fmt: skip

    lstm_wafer = evaluate_one(load_scenario(SCENARIOS / "lstm-waferscale-rc20.yaml"))
    g = golden(folder, "lstm_waferscale20v100_HEAD")["outputs"]["step_time_s"]
    out.append(("lstm_waferscale20v100_HEAD", f"{g:.3g} s", fmt_s(lstm_wafer["step_time_s"]),
                "L1"))  # fmt: skip
    g = golden(folder, "lstm_waferscale20v100_fixed")["outputs"]["step_time_s"]
    out.append(("lstm_waferscale20v100_fixed", fmt_s(g), fmt_s(lstm_wafer["step_time_s"]), "L2"))
    g = golden(folder, "lstm_v100_single")["outputs"]["step_time_s"]
    ours = evaluate_one(load_scenario(SCENARIOS / "lstm-v100-crossflow.yaml"))["step_time_s"]
    out.append(("lstm_v100_single", fmt_s(g), fmt_s(ours), "L3"))

    for name, caps, split in (("llm_a100_80GB_runperf", a100, 1),
                              ("llm_waferscale20v100_HEAD_runperf", v100, 20)):  # fmt: skip
        case = golden(folder, name)["outputs"]
        theirs = 3 * sum(x["time_s"] for x in case["per_gemm_forward"])
        ours = 3 * sum(gemm_one(caps, -(-x["M"] // split), x["N"], x["K"])
                       for x in case["per_gemm_forward"])  # fmt: skip
        out.append((f"{name} (GEMM sum × 3)", fmt_s(theirs), fmt_s(ours), "T1"))

    g = golden(folder, "llm_a100_80GB_llmtest_graph")["outputs"]["step_time_s"]
    llm = {
        "system": {"device": "a100-sxm4-80gb", "network": "dgx-a100", "devices_per_node": 1},
        "workload": {
            "model": {"kind": "transformer", "num_layers": 1, "hidden_size": 8192,
                      "num_attention_heads": 64, "ffn_hidden_size": 32768, "seq_length": 8,
                      "vocab_size": 800000},
            "global_batch_size": 1024, "precision": "fp16",
        },
        "mapping": {"micro_batch_size": 1024, "activation_recompute": "none", "zero_stage": 0},
    }  # fmt: skip
    ours = evaluate_one(scenario_from_mapping(llm))["step_time_s"]
    out.append(("llm_a100_80GB_llmtest_graph (1 layer, V = 800k)", fmt_s(g), fmt_s(ours), "T2"))
    return out


def main() -> None:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "reference" / (
        "crossflow-golden")  # fmt: skip
    print("| golden case | CrossFlow (theirs) | deepflow (ours) | why |")
    print("|---|---|---|---|")
    for case, theirs, ours, why in rows(folder):
        print(f"| {case} | {theirs} | {ours} | [{why}](#{why.lower()}) |")


if __name__ == "__main__":
    main()

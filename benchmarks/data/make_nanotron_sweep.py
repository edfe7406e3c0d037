"""Transcribe nanotron's Ultra-Scale Playbook benchmark sweep into the case schema.

Run: .venv/bin/python benchmarks/data/make_nanotron_sweep.py CSV [--out FILE]

CSV is the sweep's own results file, ``bench_final2_mfu2.csv`` (4,104 rows, one per run of
nanotron's ``scripts/scaling_benchmarks.py`` on Hugging Face's H100 cluster, Dec 2024 - Feb
2025), as published at
https://github.com/eyao600/Rapid-LLM/blob/d6e2fc37d54a3f1dcd9b9eded96c9739392e3da6/validation_scripts/huggingface_data/bench_final2_mfu2.csv
(md5 b8ce66b7e277591916cb4477dc5b92fc). It writes ``generalisation_memory_nanotron.json``
beside this script: a generalisation check (never calibration input, README.md):

* group ``nanotron_sweep_memory``: every run with status ``Success`` whose configuration is
  not one of the 26 best-configuration cells shipped in ``deepflow/data/measurements_memory.json``
  (those are the same runs), its ``Mem Res (GB)`` as the measured peak: nanotron's
  ``torch.cuda.max_memory_reserved() / 1024**3`` on world rank 0 (``log_throughput``), which
  is what the README figure plots (its 26 cells equal this column);
* group ``nanotron_sweep_oom``: every run with status ``OOM`` (it ran out of memory), as
  ``measured.out_of_memory: true``: the oracle should call it infeasible.

Runs with pipeline parallelism from before the sweep's pipeline fix (``after_pp_fix`` false)
are left out, and so are job ids the file gives to more than one configuration. Model shapes
are the script's ``model_configs`` (layers, hidden, heads, intermediate): 1B (16, 2048, 32,
8192), 3B (28, 3072, 32, 8192), 8B (32, 4096, 32, 14336), 70B (80, 8192, 64, 28672), 405B
(126, 16384, 128, 53248); heads, kv heads, vocabulary and tied embeddings as each row states.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parents[1] / "deepflow" / "data" / "measurements_memory.json"
URL = ("https://github.com/eyao600/Rapid-LLM/blob/d6e2fc37d54a3f1dcd9b9eded96c9739392e3da6/"
       "validation_scripts/huggingface_data/bench_final2_mfu2.csv")  # fmt: skip
#: nanotron scripts/scaling_benchmarks.py model_configs: hidden -> (layers, heads, ffn).
SHAPES = {2048: (16, 32, 8192), 3072: (28, 32, 8192), 4096: (32, 32, 14336),
          8192: (80, 64, 28672), 16384: (126, 128, 53248)}  # fmt: skip
SOURCE = {
    "title": "nanotron Ultra-Scale Playbook benchmark sweep (bench_final2_mfu2.csv)",
    "url": URL,
    "verification": "benchmarks/data/make_nanotron_sweep.py; benchmarks/data/README.md",
}  # fmt: skip
HARDWARE = {
    "accelerator": "NVIDIA H100 80GB HBM3 (SXM)",
    "memory_gb": 80,
    "peak_dense_tflops": {"bf16 tensor": 989},
    "gpus_per_node": 8,
    "system": "Hugging Face 'hopper-prod' SLURM cluster",
    "inferred": ["H100 80GB SXM: the sweep script's partition 'hopper-prod'; the file does "
                 "not name the GPU"],
}  # fmt: skip
TRAINING_INFERRED = [
    "no recompute, fused AdamW, flash attention, no dropout: the sweep's "
    "base config (benchmarks/data/README.md)"
]


def _shipped_cells() -> set[tuple[int, ...]]:
    cases = json.loads(SHIPPED.read_text(encoding="utf-8"))
    return {(c["training"]["dp"], c["training"]["tp"], c["training"]["pp"],
             c["training"]["micro_batch_size"], c["training"]["grad_accum"],
             c["model"]["hidden"], c["training"]["zero_stage"])
            for c in cases if str(c["group"]).startswith("nanotron")}  # fmt: skip


def _case(row: dict[str, str]) -> dict[str, Any]:
    hidden = int(row["hidden_size"])
    layers, heads, ffn = SHAPES[hidden]
    if (layers, heads) != (int(row["num_layers"]), int(row["num_heads"])):
        raise ValueError(f"job {row['job_id']}: shape differs from the script's {hidden}")
    kv = int(float(row["num_kv_heads"])) if row["num_kv_heads"] else heads
    dp, tp, pp = int(row["dp"]), int(row["tp"]), int(row["pp"])
    mbs, accum, gbs = int(row["mbs"]), int(float(row["batch_accum"])), int(float(row["gbs"]))
    zero = int(row["zero_stage"])
    location = f"row of job_id {row['job_id']}, name {row['name']}"
    case: dict[str, Any] = {
        "id": f"nanotron_sweep_{row['job_id']}_{row['name']}",
        "category": "peak_memory",
        "source": {**SOURCE, "location": location},
        "hardware": HARDWARE,
        "model": {
            "type": "Llama-style decoder (nanotron LlamaForTraining: RMSNorm, SwiGLU, RoPE)",
            "layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv,
            "num_query_groups": kv, "ffn_hidden": ffn, "seq_len": int(row["seq_len"]),
            "vocab": int(row["vocab_size"]), "activation": "swiglu", "norm": "rmsnorm",
            "tied_embeddings": row["tie_word_embeddings"] == "True",
            "attention": "flash-attn (nanotron Llama CoreAttention)", "dropout": 0.0,
            "inferred": ["ffn_hidden: the sweep script's model_configs"],
        },
        "training": {
            "framework": "nanotron v0.5 (HF), PyTorch",
            "num_gpus": dp * tp * pp, "global_batch_size": gbs, "micro_batch_size": mbs,
            "grad_accum": accum, "global_batch_tokens": gbs * int(row["seq_len"]),
            "precision": "bf16 mixed precision (fp32 gradient accumulation, fp32 master + "
                         "AdamW states)",
            "tp": tp, "pp": pp, "dp": dp, "cp": 1, "sp": tp > 1, "ep": 1,
            "zero_stage": zero, "distributed_optimizer": zero == 1,
            "activation_recompute": "none", "flash_attention": True, "dropout": 0.0,
            "tp_mode": "REDUCE_SCATTER (sequence-parallel style) with async TP linear comm",
            "optimizer": "AdamW (torch fused), accumulate_grad_in_fp32=True",
            "inferred": TRAINING_INFERRED,
        },
        "inputs_complete": False,
    }  # fmt: skip
    if row["status"] == "Success":
        case["group"] = "nanotron_sweep_memory"
        case["measured"] = {
            "peak_memory_gib": float(row["Mem Res (GB)"]),
            "memory_kind": "reserved",
            "memory_kind_note": "'Mem Res (GB)' = torch.cuda.max_memory_reserved() / 1024**3 "
                                "(nanotron src/nanotron/helpers.py log_throughput)",
            "rank_measured": "world rank 0 (first pipeline stage)",
        }  # fmt: skip
    else:
        case["group"] = "nanotron_sweep_oom"
        case["measured"] = {"out_of_memory": True, "status_stated_by_source": "OOM"}
    return case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path, help="bench_final2_mfu2.csv (see the docstring)")
    parser.add_argument("--out", type=Path, default=HERE / "generalisation_memory_nanotron.json")
    args = parser.parse_args()
    with args.csv.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    names_of = Counter(r["job_id"] for r in rows)
    shipped = _shipped_cells()
    cases = []
    for row in rows:
        if row["status"] not in ("Success", "OOM") or names_of[row["job_id"]] > 1:
            continue
        if int(row["pp"]) > 1 and row["after_pp_fix"] != "True":
            continue
        key = (
            int(row["dp"]),
            int(row["tp"]),
            int(row["pp"]),
            int(row["mbs"]),
            int(float(row["batch_accum"])),
            int(row["hidden_size"]),
            int(row["zero_stage"]),
        )
        if row["status"] == "Success" and key in shipped:
            continue
        if row["status"] == "Success" and not math.isfinite(float(row["Mem Res (GB)"])):
            continue
        cases.append(_case(row))
    cases.sort(key=lambda c: (c["group"], c["id"]))
    # one case a line: 1,700 cases stay a few MB and diff line by line
    lines = ",\n".join(json.dumps(case, ensure_ascii=False) for case in cases)
    args.out.write_text(f"[\n{lines}\n]\n", encoding="utf-8")
    counts = Counter(c["group"] for c in cases)
    print(f"wrote {args.out}: " + ", ".join(f"{g} {n}" for g, n in sorted(counts.items())))


if __name__ == "__main__":
    main()

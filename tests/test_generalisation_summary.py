"""benchmarks/generalisation.py summarises a case file per group: training groups by their
name, serving groups per quantity (the validation report's ``group/quantity`` rows)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from deepflow.data import load_measurements

ROOT = Path(__file__).resolve().parent.parent


def _module() -> Any:
    path = ROOT / "benchmarks" / "generalisation.py"
    spec = importlib.util.spec_from_file_location("generalisation", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_serving_groups_are_counted_per_quantity(tmp_path: Path) -> None:
    serving = [c for c in load_measurements() if c.get("category") == "inference"]
    lmdeploy = [c for c in serving if c["group"] == "lmdeploy_v010a1_a100_static"][:3]
    training = [c for c in load_measurements() if c["group"] == "narayanan2021_table1"][:2]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(lmdeploy + training), encoding="utf-8")
    groups = _module().summarise(path)["groups"]
    quantities = [f"lmdeploy_v010a1_a100_static/{q}" for q in ("throughput", "ttft", "tpot")]
    assert set(groups) == {*quantities, "narayanan2021_table1"}
    for name in quantities:  # each lmdeploy case states all three
        assert (groups[name]["cases"], groups[name]["scored"]) == (3, 3)
        assert groups[name]["mean_abs_error"] is not None
    assert groups["narayanan2021_table1"]["scored"] == 2


def _nanotron_row(**row: str) -> dict[str, str]:
    """A row of nanotron's sweep results file (bench_final2_mfu2.csv) with the columns the
    transcription reads."""
    base = {"job_id": "1", "name": "1.34G_dp8_tp1_pp1", "seq_len": "4096", "mbs": "1",
            "batch_accum": "32.0", "gbs": "256.0", "Mem Alloc (GB)": "25.07",
            "Mem Res (GB)": "36.67", "dp": "8", "pp": "1", "tp": "1", "hidden_size": "2048",
            "num_layers": "16", "num_heads": "32", "num_kv_heads": "32.0",
            "vocab_size": "131072", "tie_word_embeddings": "True", "zero_stage": "0",
            "status": "Success", "after_pp_fix": "False"}  # fmt: skip
    return {**base, **row}


def test_nanotron_sweep_transcription_and_its_out_of_memory_runs(tmp_path: Path) -> None:
    """benchmarks/data/make_nanotron_sweep.py keeps the runs that ran (their reserved peak)
    and those that ran out of memory, drops pre-fix pipeline runs, shared job ids and the
    shipped figure cells; generalisation.py reports the out-of-memory runs modelled as
    fitting, not as refusals."""
    import csv

    rows = [
        _nanotron_row(),
        _nanotron_row(job_id="2", name="oom", mbs="16", batch_accum="2.0", status="OOM",
                      **{"Mem Res (GB)": "", "Mem Alloc (GB)": ""}),
        _nanotron_row(job_id="3", name="pp_before_fix", pp="2", dp="4"),
        _nanotron_row(job_id="4", name="shared_a"), _nanotron_row(job_id="4", name="shared_b"),
        _nanotron_row(job_id="5", name="other", status="Other"),
        # the shipped figure cell nanotron_1p34b_1nodes (dp 4, pp 2, mbs 4, accumulation 16)
        _nanotron_row(job_id="6", name="figure", dp="4", pp="2", mbs="4", batch_accum="16.0",
                      zero_stage="1", after_pp_fix="True"),
    ]  # fmt: skip
    source = tmp_path / "bench.csv"
    with source.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    spec = importlib.util.spec_from_file_location(
        "make_nanotron_sweep", ROOT / "benchmarks" / "data" / "make_nanotron_sweep.py"
    )
    assert spec is not None and spec.loader is not None
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    out = tmp_path / "sweep.json"
    import sys

    argv, sys.argv = sys.argv, ["make_nanotron_sweep.py", str(source), "--out", str(out)]
    try:
        make.main()
    finally:
        sys.argv = argv
    cases = json.loads(out.read_text(encoding="utf-8"))
    ids = ["nanotron_sweep_1_1.34G_dp8_tp1_pp1", "nanotron_sweep_2_oom"]
    assert [c["id"] for c in cases] == ids
    ran, oom = cases
    assert ran["measured"]["peak_memory_gib"] == 36.67
    assert ran["measured"]["memory_kind"] == "reserved"
    assert (ran["model"]["ffn_hidden"], ran["training"]["grad_accum"]) == (8192, 32)
    assert oom["measured"] == {"out_of_memory": True, "status_stated_by_source": "OOM"}
    groups = _module().summarise(out)["groups"]
    assert groups["nanotron_sweep_memory"]["kind"] == "memory"
    assert groups["nanotron_sweep_memory"]["infeasible"] == 0
    # 16 sequences of 4,096 tokens on one H100 without recompute do not fit: a correct call
    assert groups["nanotron_sweep_oom"]["kind"] == "feasibility"
    assert (groups["nanotron_sweep_oom"]["infeasible"], groups["nanotron_sweep_oom"]
            ["modelled_fitting"]) == (0, 0)  # fmt: skip

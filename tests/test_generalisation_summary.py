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

"""The case-study command (benchmarks/case_studies.py) runs end to end at a tiny size."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

from deepflow.datasets import load_space

ROOT = Path(__file__).resolve().parents[1]
CASE_SPACES = sorted((ROOT / "configs" / "spaces").glob("case-*.yaml"))


def _module():
    path = ROOT / "benchmarks" / "case_studies.py"
    spec = importlib.util.spec_from_file_location("case_studies", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["case_studies"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_case_spaces_load():
    assert len(CASE_SPACES) >= 3
    for path in CASE_SPACES:
        space = load_space(path)
        assert space.num_dims > 0, path.name


@pytest.mark.parametrize("case", ["node-scaling", "packaging", "parallelism"])
def test_case_runs_quick(case, tmp_path, capsys):
    written = _module().main([case, "--quick", "--out-dir", str(tmp_path)])
    assert len(written) == 1 and written[0].parent == tmp_path
    assert written[0].stat().st_size > 10_000
    out = capsys.readouterr().out
    assert "| " in out and f"{case}: wrote" in out


def test_parallelism_split_dims_lead():
    mod = _module()
    space = mod.variant("case-parallelism-balance", "t", variables={"tensor_parallel": 1})
    assert mod._split_dims(space) == 16


def test_packaging_compares_the_sourced_siif_link_with_pcb_both_ways(tmp_path, capsys):
    mod = _module()
    assert mod.WAFER_LINK == "siif-2020"
    mod.main(["packaging", "--quick", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "wafer-scale (siif-2020, Pal & Gupta SLIP 2020 parameters) vs PCB SerDes" in out
    assert "PCB / wafer" in out and "wafer / PCB" in out
    # With the 2020 Si-IF parameters the wafer wins at every link power (issue 17).
    table = out.split("both directions")[1]
    assert table.count("wafer (Si-IF)") == 5 and "| PCB |" not in table


def test_paper_node_scaling_prints_side_by_side_tables(tmp_path, capsys):
    mod = _module()
    # the original's committed outputs, as read from nanocad-lab/DeepFlow (commit e8fc755)
    assert mod.PAPER_NODE_SCALING[48][14] == ("RC_N64_k1_k16_d4", 41.31364232)
    assert mod.PAPER_NODE_SCALING[159][14] is None  # no strategy fits memory there
    assert len(mod._paper_strategies()) == 35  # 28 RC (kp1, kp2, dp) + 7 CR (kp, dp)
    written = mod.main(["paper-node-scaling", "--quick", "--out-dir", str(tmp_path)])
    assert written[0].name == "case-paper-node-scaling.png"
    out = capsys.readouterr().out
    for bw in (48, 159, 384, 1395):
        assert f"Paper node scaling at {bw} GB/s per device" in out
    summary = out.split("speed-up from the oldest fitting node to 1 nm")[1]
    assert summary.count("| yes |") == 4  # node scaling helps at every bandwidth, both models


def test_paper_interconnect_energy_follows_the_originals_bandwidths(tmp_path, capsys):
    mod = _module()
    assert len(mod.PAPER_XBIT) == 19 and mod.PAPER_XBIT[1][:3] == (1.3e-11, 0.045, 48.1)
    mod.main(["paper-interconnect-energy", "--quick", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if r.startswith("| ") and r[2].isdigit()]
    assert len(rows) == 19
    # the designed PCB link reproduces the original's bandwidth within 10 % at every point
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        original, ours = float(cells[2]), float(cells[3])
        assert abs(ours / original - 1) < 0.10, row
    assert "speed-up from 13 pJ/bit" in out


def test_paper_hbm_generations_grow_capacity_and_speed(tmp_path, capsys):
    mod = _module()
    mod.main(["paper-hbm-generations", "--quick", "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    rows = [r for r in out.splitlines() if r.startswith("| HBM")]
    assert [r.split("|")[1].strip() for r in rows] == list(mod.PAPER_HBM)
    cells = [[c.strip() for c in r.strip("|").split("|")] for r in rows]
    capacity = [float(c[1]) for c in cells]
    ours = [float(c[6]) for c in cells]
    original = [float(c[3]) for c in cells]
    # 4 stacks of 100 mm² (HBM1, HBM2), then 3 of 110 mm² in the V100's 415 mm² of package
    assert capacity == [16, 32, 48, 72, 96]
    # the same direction as the original: every newer generation is at least as fast
    assert all(b <= a for a, b in itertools.pairwise(ours))
    assert all(b <= a for a, b in itertools.pairwise(original))


def test_explain_splits_the_originals_step_into_its_terms(capsys):
    mod = _module()
    for point in mod.ORIGINAL_OPS.values():
        terms = mod._original_terms(point)
        parts = sum(v for k, v in terms.items() if k != "step")
        assert abs(parts - terms["step"]) < 1e-9 * terms["step"]
        # the collectives re-derived from the original's formulas leave only its pointwise
        # work, copies and launches (tens of ms) in the rest: the split accounts for its ops
        assert 0 < terms["pointwise and the rest"] < 0.05
    terms = mod._original_terms(mod.ORIGINAL_OPS["14 nm, 48 GB/s"])
    # the per-timestep weight all-gathers are 79 % of the original's 41.3 s
    assert terms["kernel-parallel comm., backward: weight all-gathers"] == pytest.approx(32.5, 0.01)
    mod.explain_paper_points()
    out = capsys.readouterr().out
    assert out.count("Step time by term") == 3 and "weight all-gathers" in out

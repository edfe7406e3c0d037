"""Framework behaviours the step model follows: FP8 mixed precision and pipeline-send overlap
(docs/model.md §C6.4, §C3.2)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from deepflow.config import load_scenario
from deepflow.config.specs import Scenario
from deepflow.oracle.evaluate import evaluate_one

SCENARIOS = Path(__file__).resolve().parents[2] / "configs" / "scenarios"


def llama(precision: str = "bf16", **mapping: object) -> Scenario:
    s = load_scenario(SCENARIOS / "llama3-8b-h100.yaml")
    return dataclasses.replace(
        s,
        workload=dataclasses.replace(s.workload, precision=precision),
        mapping=dataclasses.replace(s.mapping, **mapping),
    )


def test_fp8_training_runs_only_the_linear_layers_in_fp8() -> None:
    bf16, fp8 = evaluate_one(llama("bf16")), evaluate_one(llama("fp8"))
    b, f = bf16["breakdown_s"], fp8["breakdown_s"]
    # attention stays 16-bit (Transformer Engine's fused attention in BF16)
    assert f["attention"] == pytest.approx(b["attention"], rel=1e-12)
    # the linear layers' GEMMs are faster, but not the output layer's 16-bit GEMM: more than
    # half the 16-bit GEMM time remains
    assert 0.5 * b["gemm"] < f["gemm"] < b["gemm"]
    # activations stay 16-bit and every GEMM operand is cast with its transpose: more bytes
    assert f["elementwise"] > b["elementwise"]
    # TP and DP traffic stays 16-bit: the same collectives
    assert f["data_parallel_comm"] == pytest.approx(b["data_parallel_comm"], rel=1e-12)


def test_interleaved_pipeline_sends_hide_under_compute_when_overlapped() -> None:
    base = {"data_parallel": 1, "pipeline_parallel": 8, "tensor_parallel": 1,
            "virtual_pipeline_stages": 2, "zero_stage": 0}  # fmt: skip
    exposed = evaluate_one(llama(**base, overlap_p2p_comm=False))["breakdown_s"]
    hidden = evaluate_one(llama(**base, overlap_p2p_comm=True))["breakdown_s"]
    assert exposed["pipeline_p2p"] > 0
    assert hidden["pipeline_p2p"] < exposed["pipeline_p2p"]
    # without interleaving Megatron's schedule has nothing to overlap the sends with
    plain = {**base, "virtual_pipeline_stages": 1}
    a = evaluate_one(llama(**plain, overlap_p2p_comm=False))["breakdown_s"]["pipeline_p2p"]
    b = evaluate_one(llama(**plain, overlap_p2p_comm=True))["breakdown_s"]["pipeline_p2p"]
    assert a == b

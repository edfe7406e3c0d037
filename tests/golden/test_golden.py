"""The oracle's outputs are bit-identical to the committed golden (tests/golden/make_golden.py).

A refactor of the oracle must leave every figure unchanged; a deliberate model change rewrites
the golden (``python tests/golden/make_golden.py --write``) in the same commit, saying why.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.golden import make_golden

GOLDEN = json.loads(make_golden.GOLDEN.read_text())


@pytest.mark.parametrize(
    ("part", "capture"),
    [
        ("evaluate", make_golden.evaluations),
        ("validate", make_golden.validation),
        ("best_mapping", make_golden.best_mapping),
    ],
)
def test_matches_golden(part: str, capture: Callable[[], Any]) -> None:
    assert make_golden.differences(GOLDEN[part], capture()) == []


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_datasets_match_golden() -> None:
    assert make_golden.differences(GOLDEN["datasets"], make_golden.datasets()) == []


def test_differences_finds_a_changed_bit() -> None:
    a = {"x": make_golden.exact(1.0), "y": [make_golden.exact(2.0)]}
    b = {"x": make_golden.exact(1.0 + 2**-52), "y": [make_golden.exact(2.0)], "z": 1}
    assert make_golden.differences(a, b) == [
        "/x: golden '0x1.0000000000000p+0', now '0x1.0000000000001p+0'",
        "/z: only in now",
    ]

"""pareto_mask and hypervolume (numpy, Optuna) agree with BoTorch's, which they replaced so
that a search without a surrogate imports no torch."""

from __future__ import annotations

import numpy as np
import pytest

from deepflow.search.pareto import hypervolume, pareto_mask


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("n", [1, 7, 60, 300])
def test_matches_botorch(k: int, n: int) -> None:
    torch = pytest.importorskip("torch")
    from botorch.utils.multi_objective.box_decompositions.dominated import (
        DominatedPartitioning,
    )
    from botorch.utils.multi_objective.pareto import is_non_dominated

    rng = np.random.default_rng(100 * k + n)
    pts = np.round(rng.random((n, k)), 2)  # ties and duplicates on purpose
    pts[rng.random(n) < 0.2] = pts[0]
    expected = is_non_dominated(torch.as_tensor(pts), deduplicate=False).numpy()
    np.testing.assert_array_equal(pareto_mask(pts), expected)
    if k > 1:
        part = DominatedPartitioning(ref_point=torch.zeros(k, dtype=torch.float64),
                                     Y=torch.as_tensor(pts[expected]))  # fmt: skip
        assert hypervolume(pts) == pytest.approx(float(part.compute_hypervolume()), rel=1e-12)


def test_hand_computed() -> None:
    # Two points (0.5, 1) and (1, 0.5): union of two boxes = 0.5 + 0.5 - 0.25.
    pts = np.array([[0.5, 1.0], [1.0, 0.5], [0.4, 0.4], [np.nan, 2.0]])
    assert pareto_mask(pts).tolist() == [True, True, False, False]
    assert hypervolume(pts) == pytest.approx(0.75)
    assert pareto_mask(pts, np.array([False, True, True, True])).tolist() == [
        False, True, False, False]  # fmt: skip
    assert hypervolume(np.array([[0.3, 0.2, 0.5]])) == pytest.approx(0.03)
    assert hypervolume(np.array([[-0.1, 0.5]])) == 0.0


@pytest.mark.parametrize("k", [2, 3])
def test_the_sweeps_match_the_general_algorithms(k: int) -> None:
    """The O(n log n) front and hypervolume of two and three objectives equal the O(n·front)
    mask and Optuna's exact hypervolume, ties and duplicates included."""
    from optuna._hypervolume import compute_hypervolume

    from deepflow.search.pareto import _non_dominated_any

    rng = np.random.default_rng(k)
    for n, digits in [(1, 3), (2, 1), (40, 1), (500, 2), (2000, 6)]:
        pts = np.round(rng.random((n, k)), digits)
        pts[rng.random(n) < 0.2] = pts[0]
        mask = pareto_mask(pts)
        np.testing.assert_array_equal(mask, _non_dominated_any(pts))
        exact = compute_hypervolume(-pts[mask], np.zeros(k), assume_pareto=True)
        assert hypervolume(pts) == pytest.approx(exact, rel=1e-12)


def test_the_archive_keeps_the_front_of_everything_added() -> None:
    from deepflow.search.pareto import ParetoArchive

    rng = np.random.default_rng(5)
    archive = ParetoArchive(3)
    batches = [np.round(rng.random((300, 3)), 2) for _ in range(6)]
    feasible = [rng.random(300) < 0.8 for _ in batches]
    for i, (b, ok) in enumerate(zip(batches, feasible, strict=True)):
        archive.add(b, ok, tag=np.arange(300) + 1000 * i)
    everything = np.vstack(batches)
    ok = np.concatenate(feasible)
    front = everything[pareto_mask(everything, ok)]
    assert sorted(map(tuple, archive.points)) == sorted(set(map(tuple, front)))  # no repeats
    tags = archive.data["tag"]  # each kept point's data is its first occurrence's
    np.testing.assert_array_equal(everything[tags // 1000 * 300 + tags % 1000], archive.points)
    assert archive.hypervolume() == pytest.approx(hypervolume(front))

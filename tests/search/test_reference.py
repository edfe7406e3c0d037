"""Reference fronts: merging sources, thinning, the file round trip, the checks, the sweep
(one process or several give the same front) and the error messages."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from deepflow.errors import ConfigError
from deepflow.search.objectives import Objective, to_botorch
from deepflow.search.pareto import hypervolume, pareto_mask
from deepflow.search.reference import FORMAT, ReferenceFront, sweep_front

OBJECTIVES = (
    Objective("f1", reference=1.5, ideal=0.0),
    Objective("f2", direction="maximize", reference=0.0, ideal=2.0),
)


def _empty() -> ReferenceFront:
    return ReferenceFront.empty("toy", OBJECTIVES, oracle_version="v1", space_sha256="abc")


def test_merge_keeps_the_joint_front_and_where_each_point_came_from() -> None:
    rng = np.random.default_rng(0)
    # six decimals: stored exactly (the file keeps 10 significant digits)
    a, b = (np.round(rng.random((200, 2)) * [1.5, 2.0], 6) for _ in range(2))
    front = _empty().merge(a, {"kind": "sweep"}).merge(b, {"kind": "evolution"})
    joint = np.vstack([a, b])
    expected = joint[pareto_mask(to_botorch(joint, OBJECTIVES))]
    assert sorted(map(tuple, front.values)) == sorted(map(tuple, expected))
    assert [s["kind"] for s in front.sources] == ["sweep", "evolution"]
    own = [pareto_mask(to_botorch(x, OBJECTIVES)).sum() for x in (a, b)]
    assert [s["front_size"] for s in front.sources] == own
    for i, x in enumerate((a, b)):  # each point is attributed to a source that has it
        mine = {tuple(r) for r in x}
        assert all(tuple(v) in mine for v in front.values[front.origin == i])
    shares = front.source_hypervolumes()
    assert max(shares) <= front.hypervolume + 1e-12 and min(shares) > 0


def test_the_file_round_trip_and_the_checks(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    front = _empty().merge(rng.random((300, 2)) * [1.5, 2.0], {"kind": "sweep", "seed": 3})
    path = front.save(tmp_path / "fronts" / "toy.json")
    back = ReferenceFront.load(path)
    np.testing.assert_array_equal(back.values, front.values)
    assert back.hypervolume == front.hypervolume and back.sources == front.sources
    assert back.check("toy", OBJECTIVES, space_sha256="abc", oracle_version="v1") == []
    other = (OBJECTIVES[0], Objective("f2", direction="maximize", reference=0.0, ideal=3.0))
    assert back.check("big", other, space_sha256="def", oracle_version="v2") == [
        "the front is of study 'toy', not 'big'",
        "the design space changed since the front was made",
        "the study's objectives (or their references) differ from the front's",
        "the front was labelled by oracle v1, this is v2",
    ]


def test_thinning_keeps_at_most_the_points_asked_and_records_the_loss() -> None:
    t = np.linspace(0.0, np.pi / 2, 5000)
    values = np.round(np.column_stack([1.5 - 1.4 * np.sin(t), 1.9 * np.cos(t)]), 6)
    front = _empty().merge(values, {"kind": "sweep"})
    thin = front.thinned(300)
    assert len(thin.values) <= 300 and set(map(tuple, thin.values)) <= set(map(tuple, values))
    loss = 1 - thin.hypervolume / front.hypervolume
    assert 0 < loss < 0.01
    assert thin.thinning["points_before"] == len(front.values) > 4900
    assert thin.thinning["hypervolume_after"] == thin.hypervolume
    assert front.thinned(6000) is front


def test_load_refuses_missing_and_foreign_files(tmp_path: Path) -> None:
    missing = tmp_path / "none.json"
    with pytest.raises(ConfigError) as err:
        ReferenceFront.load(missing)
    assert str(err.value) == (
        f"{missing}: no reference front; make one with benchmarks/reference_front.py."
    )
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"format": FORMAT + 1}), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        ReferenceFront.load(other)
    assert str(err.value) == (
        f"{other}: reference-front format {FORMAT + 1}; this deepflow reads {FORMAT}."
    )


def test_the_sweep_front_is_the_same_on_one_process_or_two() -> None:
    from deepflow.search.study import load_study

    study = load_study("default")
    one, record = sweep_front(study.space, study.objectives, study.bounds, num_samples=3000,
                              chunk_rows=1000)  # fmt: skip
    two, _ = sweep_front(study.space, study.objectives, study.bounds, num_samples=3000,
                         chunk_rows=1000, workers=2)  # fmt: skip
    np.testing.assert_array_equal(one, two)
    assert record["kind"] == "sweep" and record["num_samples"] == 3000
    assert 0 < len(one) < record["num_feasible"] <= 3000
    assert hypervolume(np.zeros((0, 3))) == 0.0
    with pytest.raises(ConfigError) as err:
        sweep_front(study.space, study.objectives, num_samples=0)
    assert str(err.value) == (
        "sweep_front needs num_samples, chunk_rows and workers >= 1; got 0, 65536 and 1."
    )


def test_thin_front_keeps_one_point_per_cell_and_bounds_the_loss() -> None:
    from deepflow.search.pareto import hypervolume, pareto_mask, thin_front

    rng = np.random.default_rng(0)
    points = np.abs(rng.standard_normal((3000, 3)))
    points /= np.linalg.norm(points, axis=1, keepdims=True)  # the unit sphere: all on the front
    assert pareto_mask(points).all()
    keep, size = thin_front(points, 50)
    assert 0 < len(keep) <= 50 and size > 0
    assert np.all(np.diff(keep) > 0)  # sorted, distinct
    # Every dropped point has a kept one in its cell: the loss is below the cell's size
    # times the surface of the unit box's faces it can touch (3 faces of area 1).
    lost = hypervolume(points) - hypervolume(points[keep])
    assert 0 <= lost <= 3 * size
    whole, zero = thin_front(points[:10], 50)
    assert whole.tolist() == list(range(10)) and zero == 0.0

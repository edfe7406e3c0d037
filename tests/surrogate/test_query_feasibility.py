"""``query``'s feasibility against the oracle's own rules (issue "Reliability").

Two answers are certain without a surrogate: a point the scenario loader refuses (degrees that
do not multiply to the devices, TP not dividing the heads, ...) is no design at all, and a
design needing more than twice its device's memory, or less than half, is infeasible or
feasible by the oracle's one feasibility rule. ``query`` must refuse the first kind exactly
where the loader does, from YAML and Parquet alike, and its P(feasible) must side with the
oracle on the second.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import scenario_from_mapping
from deepflow.errors import ConfigError
from tests.surrogate.conftest import MAPPING_SPACE

runner = CliRunner()
BASE = yaml.safe_load(MAPPING_SPACE.read_text(encoding="utf-8"))["base"]
VARIABLES = yaml.safe_load(MAPPING_SPACE.read_text(encoding="utf-8"))["variables"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A boosting surrogate (and its feasibility classifier) on 1,024 designs of the space."""
    from deepflow.datasets import sample

    tmp = tmp_path_factory.mktemp("feasibility")
    data = tmp / "train.parquet"
    sample(MAPPING_SPACE, num_samples=1024, out=data, seed=0, workers=1)
    out = tmp / "gbt"
    fitted = runner.invoke(app, ["fit", str(data), "--surrogate", "gbt", "--targets",
                                 "y_step_time_s", "--out", str(out)])  # fmt: skip
    assert fitted.exit_code == 0, fitted.stderr
    return out


def _draw(rng: random.Random, name: str) -> Any:
    var = VARIABLES[name]
    if var["type"] == "categorical":
        return rng.choice(var["choices"])
    return rng.randint(var["low"], var["high"])


def _raw_points(n: int, seed: int) -> list[dict[str, Any]]:
    """Points drawn variable by variable over the declared domains, each degree on its own (so
    most mappings are impossible); data parallelism fills the devices in 3 of 4 points."""
    rng = random.Random(seed)
    points = []
    for _ in range(n):
        point = {name: _draw(rng, name) for name in VARIABLES}
        devices = BASE["system"]["devices_per_node"] * point["num_nodes"]
        split = point["tensor_parallel"] * point["pipeline_parallel"] * point["context_parallel"]
        point["data_parallel"] = max(devices // split, 1) if rng.random() < 0.75 else (
            rng.randint(1, 64))  # fmt: skip
        points.append(point)
    return points


def _loader_accepts(point: dict[str, Any]) -> bool:
    """Whether the scenario loader takes the point as a scenario (the oracle's input)."""
    raw = copy.deepcopy(BASE)
    raw["system"]["num_nodes"] = point["num_nodes"]
    raw["mapping"].update({k: v for k, v in point.items() if k != "num_nodes"})
    try:
        scenario_from_mapping(raw, file="point.yaml")
    except ConfigError:
        return False
    return True


def _query(model_dir: Path, points: Path) -> Any:
    return runner.invoke(app, ["query", str(model_dir), str(points), "--json"])


def test_query_refuses_a_point_exactly_where_the_scenario_loader_does(
    model_dir: Path, tmp_path: Path
) -> None:
    from deepflow.surrogate import SurrogateModel
    from deepflow.surrogate.points import check_points, points_from_table

    model = SurrogateModel.load(model_dir)
    points = _raw_points(600, seed=3)
    verdicts = {"both accept": 0, "both refuse": 0}
    for i, point in enumerate(points):
        try:
            check_points([point], model, file="p.yaml")
            from_yaml = ""
        except ConfigError as exc:
            from_yaml = str(exc)
        table = pd.DataFrame([{f"x_{k}": v for k, v in point.items()}])
        try:
            points_from_table(table, model, file="p.parquet")
            from_parquet = ""
        except ConfigError as exc:
            from_parquet = str(exc)
        assert (from_yaml == "") == _loader_accepts(point), (i, point, from_yaml)
        # Parquet rows are checked exactly as YAML points: the same verdict and reason.
        assert from_parquet.replace("p.parquet: rows[0]", "p.yaml: points[0]").replace(
            ".x_", ".") == from_yaml  # fmt: skip
        verdicts["both accept" if not from_yaml else "both refuse"] += 1
    assert min(verdicts.values()) >= 60, verdicts  # both kinds are well represented
    # The CLI refuses the first impossible point of a file, from YAML and Parquet alike.
    bad = next(p for p in points if not _loader_accepts(p))
    good = next(p for p in points if _loader_accepts(p))
    path = tmp_path / "points.yaml"
    path.write_text(yaml.safe_dump([good, bad]), encoding="utf-8")
    parquet = tmp_path / "points.parquet"
    pd.DataFrame([{f"x_{k}": v for k, v in p.items()} for p in (good, bad)]).to_parquet(parquet)
    from_yaml, from_parquet = _query(model_dir, path), _query(model_dir, parquet)
    assert from_yaml.exit_code == from_parquet.exit_code == 2
    assert from_yaml.stderr.startswith(f"error: {path}: points[1]")
    assert from_parquet.stderr.startswith(f"error: {parquet}: rows[1]")


def test_p_feasible_sides_with_the_oracle_where_the_answer_is_certain(
    model_dir: Path, tmp_path: Path
) -> None:
    """Designs the model has not seen (another seed), labelled by the batched oracle
    (``evaluate_table``: the dataset's ``feasible`` column); certain where the memory needed is
    under half the device's or over twice it."""
    from deepflow.datasets import sample

    points = tmp_path / "points.parquet"
    sample(MAPPING_SPACE, num_samples=512, out=points, seed=7, workers=1)
    truth = pd.read_parquet(points)
    used = truth["y_memory_per_device_B"]
    capacity = used - truth["c_memory_excess_B"]
    result = _query(model_dir, points)
    assert result.exit_code == 0, result.stderr
    p = pd.Series([row["p_feasible"] for row in json.loads(result.stdout)["predictions"]])
    fits, too_big = used < capacity / 2, used > 2 * capacity
    assert fits.sum() >= 50 and too_big.sum() >= 50  # both kinds of certain answer occur
    assert truth.loc[fits, "feasible"].all() and not truth.loc[too_big, "feasible"].any()
    assert (p[fits] > 0.5).all(), p[fits].min()
    assert (p[too_big] < 0.5).all(), p[too_big].max()

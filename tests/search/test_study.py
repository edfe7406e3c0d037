"""Study YAML: the default study loads; bad input gives exact messages naming file and key."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from deepflow.errors import ConfigError
from deepflow.search.study import load_study

REPO = Path(__file__).resolve().parents[2]
SPACE = str(REPO / "configs" / "spaces" / "mapping-spec.yaml")


def test_default_study_loads() -> None:
    study = load_study(REPO / "configs" / "studies" / "default.yaml")
    assert [o.name for o in study.objectives] == ["step_time_s", "area_mm2", "power_W"]
    assert study.objectives[0].scale == "log"
    assert study.search.strategy == "surrogate"
    assert study.bounds[0].name == "energy_per_step_J" and study.bounds[0].max == 3.0e7
    assert "memory_excess_B" in study.constraint_names


def test_study_preset_by_name_and_defaults(write_yaml: Callable[..., Path]) -> None:
    assert load_study("default").name == "default"
    path = write_yaml({"space": SPACE}, "mini.yaml")
    study = load_study(path)
    assert study.name == "mini"
    assert [o.name for o in study.objectives] == ["step_time_s", "area_mm2", "power_W"]
    assert math.isnan(study.objectives[0].reference)
    assert study.search.budget == 64 and study.search.strategy == "botorch"


def test_cli_style_overrides_are_validated(write_yaml: Callable[..., Path]) -> None:
    study = load_study(write_yaml({"space": SPACE}, "s.yaml"))
    assert study.replace(strategy="nsga2", budget=10).search.budget == 10
    with pytest.raises(ConfigError) as err:
        study.replace(strategy="nsga3")
    assert (
        "search.strategy must be one of: botorch, nsga2, tpe, gp, random, surrogate, gradient; got "
        "'nsga3' (did you mean 'nsga2'?)." in str(err.value)
    )
    with pytest.raises(ConfigError, match=r"^--budget must be >= 1; got 0\.$"):
        study.replace(budget=0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"objectives": ["step_time_s"]}, "{f}: space is required."),
        ({"space": SPACE, "strategy": "tpe"},
         "{f}: unknown key 'strategy'. Valid keys: constraints, description, name, objectives, "
         "search, space, surrogate."),
        ({"space": SPACE, "objectives": [{"name": "step_time"}]},
         "{f}: objectives[0].name must be an output of the space's oracle; got 'step_time' "
         "(did you mean 'step_time_s'?). Outputs: "),
        ({"space": SPACE, "objectives": []},
         "{f}: objectives must be a non-empty list of objectives; got a list."),
        ({"space": SPACE, "objectives": ["mfu", "mfu"]},
         "{f}: objectives[1].name repeats objective 'mfu'."),
        ({"space": SPACE, "objectives": [{"name": "mfu", "direction": "max"}]},
         "{f}: objectives[0].direction must be one of: minimize, maximize; got 'max'."),
        ({"space": SPACE, "objectives": [{"name": "step_time_s", "reference": 10, "ideal": 20}]},
         "{f}: objectives[0].ideal must be below reference (10) for a minimized objective; "
         "got 20."),
        ({"space": SPACE, "objectives": [{"name": "step_time_s", "scale": "log", "ideal": 0}]},
         "{f}: objectives[0].ideal must be > 0 with scale: log; got 0."),
        ({"space": SPACE, "constraints": [{"name": "mfu"}]},
         "{f}: constraints[0] needs min or max."),
        ({"space": SPACE, "constraints": [{"name": "mfu", "min": 0.5, "max": 0.4}]},
         "{f}: constraints[0].min must be <= max (0.4); got 0.5."),
        ({"space": SPACE, "search": {"budget": 0}},
         "{f}: search.budget must be an integer >= 1; got 0."),
        ({"space": SPACE, "surrogate": {"model": "rf"}},
         "{f}: surrogate.model must be one of: mlp, gp, svgp, gbt; got 'rf'."),
        ({"space": SPACE, "surrogate": {"inner_strategy": "botorch"}},
         "{f}: surrogate.inner_strategy must be one of: nsga2, tpe, gp, random; got 'botorch'."),
        ({"space": SPACE, "name": "a b"},
         "{f}: name must be a name of letters, digits, '-' and '_'; got 'a b'."),
        ({"space": "no-such-space"}, "{f}: space: no-such-space: no such file or space preset"),
    ],
)  # fmt: skip
def test_bad_study_messages(write_yaml: Callable[..., Path], data: dict[str, Any],
                            message: str) -> None:  # fmt: skip
    path = write_yaml(data, "study.yaml")
    with pytest.raises(ConfigError) as err:
        load_study(path)
    assert str(err.value).startswith(message.format(f=path))


def test_inference_study_loads() -> None:
    study = load_study("inference")
    assert [(o.name, o.direction) for o in study.objectives] == [
        ("tokens_per_J", "maximize"), ("area_mm2", "minimize")]  # fmt: skip
    assert [(b.name, b.max) for b in study.bounds] == [("tpot_s", 0.05), ("ttft_s", 2.0)]
    assert study.space.base_is_serving and study.search.budget == 96

"""Bad inputs and faults: each gives a clear error (exit 2), a warning, or a named infeasibility.

No traceback, nothing half-written (issue: "Reliability").
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from deepflow.cli import app
from deepflow.config import load_scenario
from deepflow.config.loader import list_presets
from deepflow.config.plausibility import plausibility_warnings
from deepflow.errors import ConfigError, PlausibilityWarning
from tests.conftest import REPO

runner = CliRunner()

SCENARIO: dict[str, Any] = {
    "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
    "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
    "mapping": {"data_parallel": 8, "activation_recompute": "full", "zero_stage": 3},
}


def _write(tmp_path: Path, raw: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


def _no_traceback(result: Any) -> None:
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _error_line(result: Any) -> str:
    """The one ``error:`` line of a command that exited with 1 (after its progress bar)."""
    assert result.exit_code == 1, result.output
    _no_traceback(result)
    lines = result.output.strip().splitlines()
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:], result.output
    return lines[-1]


# ------------------------------------------------------------------------------ plausibility
def test_a_tb_figure_in_a_gb_key_warns_naming_the_unit(tmp_path: Path) -> None:
    raw = copy.deepcopy(SCENARIO)
    raw["system"]["device"] = {"base": "h100-sxm5-80gb", "hbm_bandwidth_GBps": 3.35}
    path = _write(tmp_path, raw)
    with pytest.warns(PlausibilityWarning) as record:
        load_scenario(path)
    assert str(record[0].message) == (
        f"{path}: system.device.hbm_bandwidth_GBps = 3.35 is far outside the range of real "
        "devices (900–8000 GB/s); it looks like TB/s (3.35 TB/s = 3350 GB/s)."
    )
    result = runner.invoke(app, ["evaluate", str(path)])
    assert result.exit_code == 0
    assert "warning: " in result.output and "it looks like TB/s" in result.output


@pytest.mark.parametrize(
    ("batch", "shown"), [(8 * 10**18, "8e+18 sequences of 8192 tokens is 6.55e+22"),
                         (10**30, "1e+30 sequences of 8192 tokens is 8.19e+33")]
)  # fmt: skip
def test_an_absurd_batch_warns(batch: int, shown: str, tmp_path: Path) -> None:
    raw = copy.deepcopy(SCENARIO)
    raw["workload"]["global_batch_size"] = batch
    path = _write(tmp_path, raw)
    result = runner.invoke(app, ["evaluate", str(path), "--json"])
    assert result.exit_code == 0
    assert (
        f"warning: {path}: workload.global_batch_size = {shown} tokens per step; real runs "
        "take at most ~16M (Llama 3 405B): check the batch."
    ) in result.output
    assert json.loads(result.stdout)["step_time_s"] > 0


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ({"clock_GHz": 1830}, "clock_GHz = 1830 is far outside the range of real devices "
         "(0.9–2.1 GHz); it looks like MHz (1830 MHz = 1.83 GHz)."),
        ({"hbm_capacity_GiB": 1e-9}, "hbm_capacity_GiB = 1e-09 is far below the range of "
         "real devices (16–192 GiB); check its unit."),
        ({"tdp_W": 0.7}, "tdp_W = 0.7 is far outside the range of real devices (75–1200 W); "
         "it looks like kW (0.7 kW = 700 W)."),
        ({"power_limit_W": 0.5}, "power_limit_W = 0.5 is far outside the range of real "
         "devices (75–1200 W); it looks like kW (0.5 kW = 500 W)."),
    ],
)  # fmt: skip
def test_device_slips_are_named(device: dict[str, Any], expected: str, tmp_path: Path) -> None:
    raw = copy.deepcopy(SCENARIO)
    raw["system"]["device"] = {"base": "h100-sxm5-80gb", **device}
    path = _write(tmp_path, raw)
    with pytest.warns(PlausibilityWarning):
        scenario = load_scenario(path)
    assert plausibility_warnings(scenario) == [f"{path}: system.device.{expected}"]


def test_link_slip_is_named(tmp_path: Path) -> None:
    raw = copy.deepcopy(SCENARIO)
    raw["system"]["network"] = {"base": "dgx-h100", "scale_up": {"latency_us": 2000}}
    path = _write(tmp_path, raw)
    with pytest.warns(PlausibilityWarning, match=r"scale_up.latency_us = 2000 .* looks like ns"):
        load_scenario(path)


def test_shipped_scenarios_raise_no_plausibility_warning() -> None:
    for path in sorted((REPO / "configs" / "scenarios").glob("*.yaml")):
        assert plausibility_warnings(load_scenario(path)) == []  # filterwarnings = error


def test_shipped_devices_raise_no_plausibility_warning(tmp_path: Path) -> None:
    # every datasheet figure of every shipped device, each precision's peak included (GB300's
    # FP64 is 1.25 TFLOP/s, the low end of the range)
    for name in list_presets("devices"):
        raw = copy.deepcopy(SCENARIO)
        raw["system"]["device"] = name
        if name.startswith("v100"):  # Volta has no bf16 peak
            raw["workload"]["precision"] = "fp16"
        path = _write(tmp_path, raw)
        assert plausibility_warnings(load_scenario(path)) == [], name  # filterwarnings = error


# ------------------------------------------------------------------------------ spaces
SPACE_BASE: dict[str, Any] = {
    "system": {"device": "h100-like-4nm", "network": "dgx-h100", "devices_per_node": 8,
               "num_nodes": 128},
    "workload": {"model": "gpt3-175b", "global_batch_size": 1536, "precision": "bf16"},
    "mapping": {"data_parallel": 16, "tensor_parallel": 8, "pipeline_parallel": 8},
}  # fmt: skip


def test_a_space_warns_of_implausible_bounds_choices_and_values(tmp_path: Path) -> None:
    from deepflow.datasets import load_space

    raw = {"base": SPACE_BASE, "variables": {
        "tdp_W": {"type": "continuous", "low": 5, "high": 50},  # the 5-50 W space
        "die_area_mm2": {"type": "categorical", "choices": [8.14, 800]},
        "dram_stack_capacity_GiB": 24576,
        "global_batch_size": {"type": "categorical", "choices": [1536, 10**7]},
    }}  # fmt: skip
    path = _write(tmp_path, raw, "sp.yaml")
    with pytest.warns(PlausibilityWarning) as record:
        load_space(path)
    assert [str(w.message) for w in record] == [  # in the file's (sorted) order
        f"{path}: variables.die_area_mm2.choices[0] = 8.14 is far outside the range of real "
        "devices (100–46225 mm²); it looks like cm² (8.14 cm² = 814 mm²).",
        f"{path}: variables.dram_stack_capacity_GiB = 24576 is far outside the range of real "
        "devices (4–36 GiB); it looks like MiB (24576 MiB = 24 GiB).",
        f"{path}: variables.global_batch_size.choices[1] = 1e+07 sequences of 2048 tokens is "
        "2.05e+10 tokens per step; real runs take at most ~16M (Llama 3 405B): check the batch.",
        f"{path}: variables.tdp_W.low = 5 is far below the range of real devices "
        "(75–1200 W); check its unit.",
    ]
    out = tmp_path / "d.parquet"
    result = runner.invoke(app, ["sample", str(path), "--num-samples", "4", "--out", str(out),
                                 "--workers", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output  # a warning, not an error
    assert "warning: " + str(record[-1].message) in result.stderr
    _no_traceback(result)


def test_a_space_warns_of_its_inline_base_and_its_device_choices(tmp_path: Path) -> None:
    from deepflow.datasets import load_space

    h100 = (REPO / "configs" / "devices" / "h100-sxm5-80gb.yaml").read_text(encoding="utf-8")
    assert "hbm_bandwidth_GBps: 3350 " in h100
    slip = h100.replace("hbm_bandwidth_GBps: 3350 ", "hbm_bandwidth_GBps: 3.35 ")
    (tmp_path / "slow.yaml").write_text(slip, encoding="utf-8")
    base = copy.deepcopy(SCENARIO)
    base["system"]["network"] = {"base": "dgx-h100", "scale_up": {"latency_us": 2000}}
    raw = {
        "base": base,
        "variables": {
            "device": {"type": "categorical", "choices": ["h100-sxm5-80gb", "slow.yaml"]}
        },
    }
    path = _write(tmp_path, raw, "sp.yaml")
    with pytest.warns(PlausibilityWarning) as record:
        load_space(path)
    messages = [str(w.message) for w in record]
    assert messages[0].startswith(
        f"{path}: base: system.network.scale_up.latency_us = 2000 is far outside the range"
    )
    assert messages[1:] == [
        f"{path}: variables.device.choices[1].hbm_bandwidth_GBps = 3.35 is far outside the "
        "range of real devices (900–8000 GB/s); it looks like TB/s (3.35 TB/s = 3350 GB/s).",
    ]


def test_shipped_spaces_and_studies_raise_no_plausibility_warning() -> None:
    from deepflow.datasets import load_space
    from deepflow.datasets.space import plausibility_warnings as space_warnings
    from deepflow.search.study import load_study

    spaces = sorted((REPO / "configs" / "spaces").glob("*.yaml"))
    assert len(spaces) >= 7
    for path in spaces:
        assert space_warnings(load_space(path)) == []  # filterwarnings = error
    for path in sorted((REPO / "configs" / "studies").glob("*.yaml")):
        load_study(path)


# ------------------------------------------------------------------------------ YAML keys
def test_duplicate_top_level_key_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    text = yaml.safe_dump(SCENARIO, sort_keys=False) + "mapping:\n  data_parallel: 4\n"
    path.write_text(text, encoding="utf-8")
    line = text.count("\n") - 1
    first = text.splitlines().index("mapping:") + 1
    for command in ("show", "evaluate"):
        result = runner.invoke(app, [command, str(path)])
        assert result.exit_code == 2
        assert result.output.strip() == (
            f"error: {path}: duplicate key 'mapping' at line {line} (first given at line "
            f"{first}); give each key once."
        )
        _no_traceback(result)


def test_duplicate_nested_key_in_a_space_is_an_error() -> None:
    from deepflow.datasets import space_from_text

    text = "base: x\nvariables:\n  tdp_W: 1\n  tdp_W: 2\n"
    with pytest.raises(ConfigError, match=r"^sp.yaml: duplicate key 'tdp_W' at line 4 \(first"):
        space_from_text(text, file="sp.yaml")


def test_yaml_merge_keys_are_not_duplicates(tmp_path: Path) -> None:
    from deepflow.config.loader import parse_yaml

    assert parse_yaml("a: &x {k: 1}\nb:\n  <<: *x\n  k: 2\n", "m.yaml") == {
        "a": {"k": 1},
        "b": {"k": 2},
    }


# ------------------------------------------------------------------------------ --out
def test_sample_out_must_be_parquet(tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    space = REPO / "configs" / "spaces" / "mapping-spec.yaml"
    result = runner.invoke(app, ["sample", str(space), "--num-samples", "4", "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: --out {out}: writes a Parquet file; give a name ending in .parquet."
    )
    assert list(tmp_path.iterdir()) == []


def test_report_out_must_be_html(tmp_path: Path) -> None:
    out = tmp_path / "r.png"
    result = runner.invoke(app, ["report", str(tmp_path), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: --out {out}: writes an HTML page; give a name ending in .html."
    )


def test_result_folder_that_is_a_file(tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.write_text("x")
    study = REPO / "configs" / "studies" / "default.yaml"
    for command in ("search", "run"):
        result = runner.invoke(app, [command, str(study), "--out", str(out)])
        assert result.exit_code == 2
        assert result.output.strip() == (
            f"error: --out {out}: is a file; a result is written to a folder."
        )


# ------------------------------------------------------------------------------ fit, validate
def test_fit_on_too_few_rows(tmp_path: Path) -> None:
    from deepflow.datasets import sample

    data = tmp_path / "four.parquet"
    space = REPO / "configs" / "spaces" / "mapping-spec.yaml"
    sample(space, num_samples=4, out=data, seed=0, workers=1)
    result = runner.invoke(app, ["fit", str(data), "--out", str(tmp_path / "m"),
                                 "--surrogate", "gbt"])  # fmt: skip
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {data}: 4 rows are too few to fit and score a surrogate (80 % to train, "
        "20 % to score); need at least 10."
    )
    assert not (tmp_path / "m").exists()
    taken = tmp_path / "file"
    taken.write_text("x")
    result = runner.invoke(app, ["fit", str(data), "--out", str(taken)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: --out {taken}: is a file; the surrogate is written to a folder."
    )


def test_validate_with_no_cases(tmp_path: Path) -> None:
    cases = tmp_path / "none.json"
    cases.write_text(json.dumps([]))
    result = runner.invoke(app, ["validate", "--cases", str(cases)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {cases}: holds no measurement cases; give at least one."
    )


# ------------------------------------------------------------------------------ storage
SPACE = REPO / "configs" / "spaces" / "mapping-spec.yaml"


def test_out_under_a_file(tmp_path: Path) -> None:
    taken = tmp_path / "file"
    taken.write_text("x")
    study = REPO / "configs" / "studies" / "default.yaml"
    result = runner.invoke(app, ["run", str(study), "--out", str(taken / "sub")])
    assert result.exit_code == 2
    sub = taken / "sub"
    assert result.output.strip() == f"error: --out {sub}: {taken} is a file, not a folder."


def test_a_full_disk_keeps_only_resumable_chunks(tmp_path: Path, monkeypatch: Any) -> None:
    from deepflow.datasets import engine, sample
    from deepflow.errors import StorageError

    out = tmp_path / "d.parquet"
    real = engine.write_atomic
    calls = {"chunks": 0}

    def full_after_one_chunk(path: Path, data: bytes) -> None:
        if path.name.startswith("chunk-"):
            calls["chunks"] += 1
            if calls["chunks"] == 2:
                raise OSError(28, "No space left on device", str(path))
        real(path, data)

    monkeypatch.setattr(engine, "write_atomic", full_after_one_chunk)
    parts = tmp_path / "d.parquet.parts"
    with pytest.raises(StorageError) as err:
        sample(SPACE, num_samples=12, out=out, chunk_size=4, workers=1)
    assert str(err.value) == (
        f"{parts / 'chunk-000001.parquet'}: No space left on device; 1 finished chunk(s) are "
        f"kept in {parts} for --resume (delete it to start over)."
    )
    assert sorted(p.name for p in parts.iterdir()) == ["chunk-000000.parquet", "manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet.parts"]  # no lock, no tmp
    monkeypatch.setattr(engine, "write_atomic", real)
    resumed = sample(SPACE, num_samples=12, out=out, chunk_size=4, workers=1, resume=True)
    assert resumed.resumed_rows == 4 and out.is_file() and not parts.exists()


def test_a_full_disk_before_any_chunk_leaves_nothing(tmp_path: Path, monkeypatch: Any) -> None:
    from deepflow.datasets import engine

    def full(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(engine, "write_atomic", full)
    out = tmp_path / "d.parquet"
    result = runner.invoke(app, ["sample", str(SPACE), "--num-samples", "8", "--out", str(out),
                                 "--workers", "1"])  # fmt: skip
    assert result.exit_code == 1
    manifest = tmp_path / "d.parquet.parts" / "manifest.json"
    assert result.output.strip() == f"error: {manifest}: No space left on device."
    assert list(tmp_path.iterdir()) == []


def _toy_study(tmp_path: Path, budget: int = 4) -> Path:
    """A quick study: random search on the spec-mode mapping space."""
    raw = {"name": "toy", "space": str(SPACE),
           "search": {"strategy": "random", "budget": budget, "batch_size": 4,
                      "initial_points": 4}}  # fmt: skip
    return _write(tmp_path, raw, f"toy-{budget}.yaml")


RESULT_FILES = ["optuna.db", "pareto.json", "pareto.yaml", "study.yaml", "summary.json",
                "trials.parquet"]  # fmt: skip


def _full_disk_for(monkeypatch: Any, prefix: str) -> None:
    """Writes of files whose name starts with ``prefix`` put a few bytes down, then fail as a
    full disk does (Path.write_text and DataFrame.to_parquet)."""
    import pandas as pd

    real_text, real_parquet = Path.write_text, pd.DataFrame.to_parquet

    def full(path: Path) -> None:
        with open(path, "wb") as fh:
            fh.write(b"half")
        raise OSError(28, "No space left on device", str(path))

    def write_text(self: Path, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith(prefix):
            full(self)
        return real_text(self, *args, **kwargs)

    def to_parquet(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        if Path(path).name.startswith(prefix):
            full(Path(path))
        return real_parquet(self, path, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    monkeypatch.setattr(pd.DataFrame, "to_parquet", to_parquet)


@pytest.mark.parametrize("file", [".trials.parquet.tmp", ".summary.json.tmp"])
def test_a_full_disk_at_the_end_of_a_search_keeps_its_evaluations(
    file: str, tmp_path: Path, monkeypatch: Any
) -> None:
    import os

    study = _toy_study(tmp_path)
    out = tmp_path / "res"
    with monkeypatch.context() as patch:
        _full_disk_for(patch, file)
        result = runner.invoke(app, ["search", str(study), "--out", str(out)])
    assert _error_line(result) == (
        f"error: {out / file}-{os.getpid()}: No space left on device; 4 evaluation(s) in "
        f"{out / 'optuna.db'} are kept: run the command again to resume (delete {out} to "
        "start over)."
    )
    assert sorted(p.name for p in out.iterdir()) == ["optuna.db"]  # nothing half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res", study.name]  # no lock
    again = runner.invoke(app, ["search", str(study), "--out", str(out), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["num_evaluations"] == 4
    assert sorted(p.name for p in out.iterdir()) == RESULT_FILES


def test_a_full_disk_keeps_the_previous_results_whole(tmp_path: Path, monkeypatch: Any) -> None:
    out = tmp_path / "res"
    first = runner.invoke(app, ["search", str(_toy_study(tmp_path)), "--out", str(out)])
    assert first.exit_code == 0, first.output
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "optuna.db"}
    with monkeypatch.context() as patch:
        _full_disk_for(patch, ".pareto.yaml.tmp")  # after trials.parquet and pareto.json
        result = runner.invoke(app, ["search", str(_toy_study(tmp_path, 8)), "--out", str(out)])
    assert "; 8 evaluation(s) in " in _error_line(result)
    assert sorted(p.name for p in out.iterdir()) == RESULT_FILES
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "optuna.db"} == before


def _sqlite_full(pages: Callable[[], int]) -> Any:
    """While active, every SQLite connection may grow its database to ``pages()`` pages only:
    SQLite then fails as on a full disk ("database or disk is full")."""
    import contextlib

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def limit(connection: Any, _record: Any) -> None:
        connection.execute(f"PRAGMA max_page_count = {pages()}")

    @contextlib.contextmanager
    def active() -> Any:
        event.listen(Engine, "connect", limit)
        try:
            yield
        finally:
            event.remove(Engine, "connect", limit)

    return active()


def test_a_full_disk_during_a_search_keeps_its_evaluations(tmp_path: Path) -> None:
    import sqlite3

    out = tmp_path / "res"
    first = runner.invoke(app, ["search", str(_toy_study(tmp_path)), "--out", str(out)])
    assert first.exit_code == 0, first.output
    db = out / "optuna.db"

    def pages_now() -> int:
        with sqlite3.connect(db) as con:
            return int(con.execute("PRAGMA page_count").fetchone()[0])

    bigger = _toy_study(tmp_path, 64)
    with _sqlite_full(pages_now):
        result = runner.invoke(app, ["search", str(bigger), "--out", str(out)])
    url = f"sqlite:///{db.resolve()}"
    line = _error_line(result)
    assert line.startswith(f"error: {url}: storage failure: database or disk is full; ")
    assert line.endswith(
        f" evaluation(s) in {db} are kept: run the command again to resume (delete {out} to "
        "start over)."
    )
    kept = int(line.split("; ")[1].split(" evaluation(s)")[0])
    assert 4 <= kept < 64
    resumed = runner.invoke(app, ["search", str(bigger), "--out", str(out), "--json"])
    assert resumed.exit_code == 0, resumed.output
    assert json.loads(resumed.stdout)["num_evaluations"] == 64


def test_a_full_disk_before_any_evaluation_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "res"
    with _sqlite_full(lambda: 1):  # not even Optuna's tables fit
        result = runner.invoke(app, ["search", str(_toy_study(tmp_path)), "--out", str(out)])
    url = f"sqlite:///{(out / 'optuna.db').resolve()}"
    assert _error_line(result) == f"error: {url}: storage failure: database or disk is full."
    assert not out.exists()


def test_a_full_disk_at_the_report_keeps_the_results(tmp_path: Path, monkeypatch: Any) -> None:
    import os

    out = tmp_path / "res"
    with monkeypatch.context() as patch:
        _full_disk_for(patch, ".report.html.tmp")
        result = runner.invoke(app, ["run", str(_toy_study(tmp_path)), "--out", str(out)])
    tmp = out / f".report.html.tmp-{os.getpid()}"
    assert _error_line(result) == (
        f"error: {tmp}: No space left on device; nothing of the report was written."
    )
    assert sorted(p.name for p in out.iterdir()) == RESULT_FILES  # complete, no report
    again = runner.invoke(app, ["run", str(_toy_study(tmp_path)), "--out", str(out)])
    assert again.exit_code == 0, again.output
    assert (out / "report.html").is_file() and (out / "figures").is_dir()


def test_a_read_only_folder_is_one_line(tmp_path: Path, monkeypatch: Any) -> None:
    import deepflow.lock

    def denied(path: Any, *args: Any) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(deepflow.lock.os, "open", denied)
    out = tmp_path / "d.parquet"
    result = runner.invoke(app, ["sample", str(SPACE), "--num-samples", "8", "--out", str(out),
                                 "--workers", "1"])  # fmt: skip
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {out}.lock: Permission denied."
    _no_traceback(result)
    res = tmp_path / "res"
    study = REPO / "configs" / "studies" / "default.yaml"
    result = runner.invoke(app, ["search", str(study), "--out", str(res)])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {res}.lock: Permission denied."
    assert list(tmp_path.iterdir()) == []


def test_a_vanishing_bandwidth_warns(tmp_path: Path) -> None:
    raw = copy.deepcopy(SCENARIO)
    raw["system"]["device"] = {"base": "h100-sxm5-80gb", "hbm_bandwidth_GBps": 1.0e-30}
    path = _write(tmp_path, raw)
    with pytest.warns(PlausibilityWarning) as record:
        load_scenario(path)
    assert str(record[0].message) == (
        f"{path}: system.device.hbm_bandwidth_GBps = 1e-30 is far below the range of real "
        "devices (900–8000 GB/s); check its unit."
    )


def test_an_os_error_anywhere_in_a_command_is_one_line(tmp_path: Path, monkeypatch: Any) -> None:
    import deepflow.oracle.evaluate

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError(5, "Input/output error", "/dev/sdz")

    monkeypatch.setattr(deepflow.oracle.evaluate, "evaluate_one", broken)
    result = runner.invoke(app, ["evaluate", str(REPO / "configs/scenarios/lstm-a100.yaml")])
    assert result.exit_code == 1
    assert result.output.strip() == "error: /dev/sdz: Input/output error."


@pytest.fixture
def live_pid() -> Any:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_a_second_sample_on_one_output_names_the_first(tmp_path: Path, live_pid: int) -> None:
    out = tmp_path / "d.parquet"
    lock = tmp_path / "d.parquet.lock"
    lock.write_text(f"{live_pid}\ndeepflow sample x.yaml --out {out}\n")
    for extra in ([], ["--resume"]):
        result = runner.invoke(app, ["sample", str(SPACE), "--num-samples", "8", "--out",
                                     str(out), "--workers", "1", *extra])  # fmt: skip
        assert result.exit_code == 1
        assert result.output.strip() == (
            f"error: dataset {out} is being written by process {live_pid} (deepflow sample "
            f"x.yaml --out {out}); wait for it to finish or stop it (lock {lock})."
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet.lock"]


def test_a_stale_lock_is_taken_over(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a process that is gone (as after kill -9)
    out = tmp_path / "d.parquet"
    (tmp_path / "d.parquet.lock").write_text(f"{proc.pid}\ndeepflow sample\n")
    result = runner.invoke(app, ["sample", str(SPACE), "--num-samples", "8", "--out", str(out),
                                 "--workers", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.parquet", "d.parquet.space.yaml"]


def test_a_result_folder_in_use(tmp_path: Path, live_pid: int) -> None:
    out = tmp_path / "res"
    lock = tmp_path / "res.lock"
    lock.write_text(f"{live_pid}\ndeepflow run\n")
    study = REPO / "configs" / "studies" / "default.yaml"
    for command in ("search", "run"):
        result = runner.invoke(app, [command, str(study), "--out", str(out)])
        assert result.exit_code == 1
        assert result.output.strip() == (
            f"error: result folder {out} is being written by process {live_pid} (deepflow "
            f"run); wait for it to finish or stop it (lock {lock})."
        )
    assert not out.exists()
    out.mkdir()
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 1
    assert result.output.strip().startswith(f"error: result folder {out} is being written by")


@pytest.mark.parametrize("damage", ["empty", "truncated"])
def test_a_damaged_model_file_is_a_clear_error(tmp_path: Path, damage: str) -> None:
    from deepflow.datasets import sample

    data = tmp_path / "d.parquet"
    sample(SPACE, num_samples=40, out=data, seed=0, workers=1)
    model = tmp_path / "m"
    fitted = runner.invoke(app, ["fit", str(data), "--out", str(model), "--surrogate", "gbt"])
    assert fitted.exit_code == 0, fitted.output
    weights = model / "model" / "trees.npz"
    weights.write_bytes(b"" if damage == "empty" else weights.read_bytes()[:100])
    result = runner.invoke(app, ["query", str(model), str(data)])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith(f"error: {model / 'model'}: cannot read the surrogate's weights (")
    assert line.endswith("); the file is damaged: refit the model.")
    assert "\n" not in line


# ------------------------------------------------------------------------------ 80 columns
def _fits(text: str, width: int = 80) -> None:
    lines = text.splitlines()
    table = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert table, text
    assert max(len(line) for line in table) <= width, text
    assert "…" not in text, text


@pytest.mark.parametrize(
    ("args", "hidden"),
    [
        (["best-mapping", str(REPO / "configs/scenarios/llama3-8b-h100.yaml"), "--top", "5"],
         "CP, EP"),
        (["validate"], "quantity"),
    ],
)  # fmt: skip
def test_tables_fit_80_columns(args: list[str], hidden: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    _fits(result.stdout)
    assert f"(hidden to fit 80 columns: {hidden}" in result.stdout
    wide = runner.invoke(app, [*args, "--wide"])
    assert wide.exit_code == 0
    assert "hidden to fit" not in wide.stdout and "…" not in wide.stdout
    header = next(line for line in wide.stdout.splitlines() if line.startswith("┃"))
    assert hidden.split(", ")[0] in header


def test_pareto_table_fits_80_columns(tmp_path: Path, monkeypatch: Any,
                                      capsys: Any) -> None:  # fmt: skip
    from deepflow.cli import _print_pareto
    from tests.report.conftest import make_result_dir

    monkeypatch.setenv("COLUMNS", "80")
    make_result_dir(tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    pareto = json.loads((tmp_path / "pareto.json").read_text())
    designs = pareto["designs"] if isinstance(pareto, dict) else pareto
    _print_pareto(summary, designs, tmp_path)
    text = capsys.readouterr().out
    _fits(text)
    header = next(line for line in text.splitlines() if line.startswith("┃"))
    # the report's columns (report.views.design_table): trial and objectives always show
    assert "step time (s)" in header and "area (mm²)" in header and "die" not in header
    assert "(hidden to fit 80 columns: TDP (W), memory used / capacity (GiB)," in text
    _print_pareto(summary, designs, tmp_path, wide=True)
    assert "memory used / capacity (GiB)" in capsys.readouterr().out


def test_a_failed_model_save_leaves_no_folder(tmp_path: Path, monkeypatch: Any) -> None:
    from deepflow.datasets import sample

    data = tmp_path / "d.parquet"
    sample(SPACE, num_samples=40, out=data, seed=0, workers=1)

    def full(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name == "metadata.json":
            raise OSError(28, "No space left on device", str(self))
        return real(self, data, *args, **kwargs)

    real = Path.write_text
    monkeypatch.setattr(Path, "write_text", full)
    model = tmp_path / "m"
    result = runner.invoke(app, ["fit", str(data), "--out", str(model), "--surrogate", "gbt"])
    assert result.exit_code == 1
    assert result.output.strip() == f"error: {model / 'metadata.json'}: No space left on device."
    assert not model.exists()


def test_sample_restores_the_sigterm_handler(tmp_path: Path) -> None:
    import signal

    before = signal.getsignal(signal.SIGTERM)
    out = tmp_path / "d.parquet"
    result = runner.invoke(app, ["sample", str(SPACE), "--num-samples", "8", "--out", str(out),
                                 "--workers", "1"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert signal.getsignal(signal.SIGTERM) == before


def test_a_botorch_search_says_it_is_slow(tmp_path: Path, live_pid: int) -> None:
    out = tmp_path / "res"
    (tmp_path / "res.lock").write_text(f"{live_pid}\ndeepflow search\n")  # stop after the note
    study = REPO / "configs" / "studies" / "default.yaml"
    result = runner.invoke(app, ["search", str(study), "--strategy", "botorch", "--budget", "20",
                                 "--out", str(out)])  # fmt: skip
    assert result.stderr.startswith(
        "note: after 16 space-filling designs, botorch fits a GP and optimises its acquisition "
        "for each of 1 batch(es) of 8: about 10-25 s per batch of 8 on the default study's "
        "space on one CPU thread (README, search efficiency).\n"
    )
    start = runner.invoke(app, ["search", str(study), "--strategy", "botorch", "--budget", "16",
                                "--out", str(out)])  # fmt: skip
    assert start.exit_code == 1 and "note:" not in start.stderr  # Sobol designs only

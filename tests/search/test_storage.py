"""Trials in an Optuna storage: what Optuna's own tools see, cooperating workers on SQLite, a
journal file and PostgreSQL (DEEPFLOW_TEST_POSTGRES_URL), atomic batches after kill -9, and
storage errors."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from deepflow.cli import app

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SPACE = str(REPO / "configs" / "spaces" / "llm-pathfinding.yaml")
POSTGRES = os.environ.get("DEEPFLOW_TEST_POSTGRES_URL")


def test_plain_optuna_sees_metric_names_and_physical_values(
    write_yaml: Callable[..., Path], tmp_path: Path
) -> None:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    study = write_yaml({
        "name": "phys", "space": SPACE,
        "objectives": [{"name": "step_time_s", "scale": "log"}, "area_mm2", "power_W"],
        "search": {"strategy": "random", "budget": 8, "batch_size": 4, "initial_points": 4},
    }, "phys.yaml")  # fmt: skip
    out = tmp_path / "res"
    result = CliRunner().invoke(app, ["search", str(study), "--out", str(out)])
    assert result.exit_code == 0, result.output
    loaded = optuna.load_study(study_name="phys", storage=f"sqlite:///{out / 'optuna.db'}")
    assert loaded.metric_names == ["step_time_s", "area_mm2", "power_W"]
    trials = pd.read_parquet(out / "trials.parquet").set_index("trial")
    assert len(loaded.trials) == 8 and len(loaded.best_trials) >= 1
    for t in loaded.trials:
        row = trials.loc[t.number]
        assert t.params["die_area_mm2"] == pytest.approx(row["x_die_area_mm2"], rel=1e-12)
        assert 400 <= t.params["die_area_mm2"] <= 850  # mm², not a unit-cube coordinate
        assert t.params["technology"] == row["x_technology"]
        for degree in ("tensor_parallel", "pipeline_parallel", "data_parallel"):
            assert t.params[degree] == row[f"x_{degree}"]
        assert t.values == pytest.approx(
            [row["y_step_time_s"], row["y_area_mm2"], row["y_power_W"]], rel=1e-12
        )
        assert t.constraints["memory_excess_B"] == pytest.approx(row["c_memory_excess_B"])
    dists = loaded.trials[0].distributions
    assert dists["die_area_mm2"] == FloatDistribution(400.0, 850.0)
    assert dists["tdp_W"] == FloatDistribution(400.0, 1200.0, log=True)
    assert isinstance(dists["technology"], CategoricalDistribution)
    assert isinstance(dists["tensor_parallel"], IntDistribution)


_WORKER = textwrap.dedent("""
    import dataclasses, json, sys, time
    sys.path.insert(0, {tests!r})
    from search.toy import ToyProblem
    from search.test_contract import config
    from deepflow.search.base import run_search

    import pathlib

    class Slow(ToyProblem):
        def evaluate(self, u):
            # Wait (a minute at most) until two workers evaluate: on a loaded machine one
            # worker could otherwise finish the budget before the others have started.
            pathlib.Path({out!r} + ".busy").touch()
            deadline = time.monotonic() + 60
            while (len(list(pathlib.Path({out!r}).parent.glob("worker*.json.busy"))) < 2
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            time.sleep(0.2)
            return super().evaluate(u)

    pathlib.Path({out!r} + ".ready").touch()  # imports done: start together
    while not pathlib.Path({go!r}).exists():
        time.sleep(0.01)
    cfg = dataclasses.replace(config({strategy!r}, budget=24), name={name!r})
    result = run_search(Slow(), cfg, storage={storage!r})
    rows = result.rows
    json.dump({{"trials": rows["trial"].tolist(),
               "pareto": rows.loc[rows["pareto"], "trial"].tolist()}}, open({out!r}, "w"))
""")


def _storages() -> list[object]:
    out: list[object] = ["sqlite", "journal"]
    out.append(
        pytest.param(
            "postgres",
            marks=pytest.mark.skipif(
                POSTGRES is None, reason="DEEPFLOW_TEST_POSTGRES_URL is not set (.ci/run sets it)"
            ),
        )
    )
    return out


def _storage_url(kind: str, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'shared.db'}"
    if kind == "journal":
        return str(tmp_path / "shared.journal")
    assert POSTGRES is not None
    return POSTGRES


@pytest.mark.parametrize("kind", _storages())
@pytest.mark.parametrize("strategy", ["random", "nsga2"])
def test_workers_share_one_study(kind: str, strategy: str, tmp_path: Path) -> None:
    import optuna

    storage = _storage_url(kind, tmp_path)
    name = f"toy-{strategy}-{os.getpid()}-{tmp_path.name}"[:60] if kind == "postgres" else "toy"
    go = tmp_path / "go"
    script = _WORKER.format(tests=str(HERE.parent), strategy=strategy, storage=storage,
                            name=name, out="{out}", go=str(go))  # fmt: skip
    workers = []
    for i in range(3):
        out = tmp_path / f"worker{i}.json"
        workers.append((subprocess.Popen(
            [sys.executable, "-c", script.replace("{out}", str(out))], env=dict(os.environ)
        ), out))  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not all(Path(f"{out}.ready").exists() for _, out in workers):
            assert time.monotonic() < deadline and all(p.poll() is None for p, _ in workers)
            time.sleep(0.05)
        go.touch()
        codes = [proc.wait(timeout=600) for proc, _ in workers]
    finally:
        for proc, _ in workers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert codes == [0, 0, 0]
    plain = _optuna_storage(storage)
    study = optuna.load_study(study_name=name, storage=plain)
    trials = study.trials
    assert len(trials) == 24  # the budget, not three times it
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    z = {tuple(t.system_attrs["deepflow:z"]) for t in trials}
    assert len(z) == 24  # no design evaluated twice
    owners = {t.system_attrs["deepflow:worker"]["id"] for t in trials}
    assert len(owners) >= 2  # the work was shared
    # Every worker reports the front of all trials.
    from deepflow.search.base import run_search

    from .test_contract import config
    from .toy import ToyProblem

    cfg = dataclasses.replace(config(strategy, budget=24), name=name)
    problem = ToyProblem()
    final = run_search(problem, cfg, storage=storage)
    assert problem.calls == 0
    front = sorted(final.rows.loc[final.rows["pareto"], "trial"].tolist())
    for _, out in workers:
        report = json.loads(out.read_text())
        assert sorted(report["trials"]) == list(range(24))
        assert sorted(report["pareto"]) == front
    if kind == "postgres":
        optuna.delete_study(study_name=name, storage=plain)
    if isinstance(plain, optuna.storages.RDBStorage):
        plain.engine.dispose()


def _optuna_storage(storage: str) -> object:
    """What a user passes to optuna.load_study for a --storage value."""
    from optuna.storages import JournalStorage, RDBStorage

    if "://" in storage:
        return RDBStorage(storage)
    from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

    return JournalStorage(JournalFileBackend(storage, lock_obj=JournalFileOpenLock(storage)))


def test_a_batch_is_stored_whole_or_not_at_all(tmp_path: Path) -> None:
    """The reservation and the completion of a batch are single transactions."""
    from deepflow.search.storage import Design, StorageError, open_store

    for storage in (f"sqlite:///{tmp_path / 'a.db'}", str(tmp_path / "a.journal")):
        store = open_store(storage)
        store.open_study("s", ["minimize"], ["f"])
        from optuna.distributions import FloatDistribution

        store.distributions = {"x": FloatDistribution(0.0, 1.0)}
        designs = [Design([x], {"x": x}, {}, {"source": "search"}) for x in (0.1, 0.2, 0.3)]
        slots = store.reserve(designs, budget=10)
        assert [s.number for s in slots] == [0, 1, 2] and {s.batch for s in slots} == {0}
        # Designs already stored are left out; the budget cuts the batch.
        again = [Design([x], {"x": x}, {}, {}) for x in (0.3, 0.4, 0.5, 0.6)]
        more = store.reserve(again, budget=5)
        assert [s.z for s in more] == [[0.4], [0.5]]
        assert store.reserve([Design([0.9], {"x": 0.9}, {}, {})], budget=5) == []
        with pytest.raises(StorageError):  # a bad record fails the whole completion
            store.complete(slots, [[1.0], [2.0], [3.0]], [{}, {}, {}],
                           [{"a": 1}, {"a": 2}, {"a": object()}])  # fmt: skip
        assert not any(s.complete for s in store.slots())
        store.complete(
            slots, [[1.0], [2.0], [3.0]], [{"c": -1.0}] * 3, [{"a": i} for i in range(3)]
        )
        done = [s for s in store.slots() if s.complete]
        assert [s.record for s in done] == [{"a": 0}, {"a": 1}, {"a": 2}]
        with pytest.raises(StorageError, match=r": trial 0 was completed by another worker\.$"):
            store.complete(slots[:1], [[1.0]], [{}], [{"a": 0}])
        store.close()


@pytest.fixture
def toy_study(write_yaml: Callable[..., Path]) -> Path:
    return write_yaml({
        "name": "errs", "space": SPACE,
        "search": {"strategy": "random", "budget": 4, "batch_size": 4, "initial_points": 4},
    }, "errs.yaml")  # fmt: skip


def _search(study: Path, out: Path, storage: str) -> object:
    return CliRunner().invoke(app, ["search", str(study), "--out", str(out), "--storage", storage])


def _one_clean_line(result: object, code: int, *secrets: str) -> str:
    output = result.output  # type: ignore[attr-defined]
    assert result.exit_code == code, output  # type: ignore[attr-defined]
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    for secret in secrets:
        assert secret not in output
    return lines[0]


@pytest.mark.parametrize(
    ("storage", "message"),
    [
        ("nosuchdb://host/db",
         "error: nosuchdb://host/db: not a storage URL the database accepts."),
        ("{tmp}/missing/x.journal",
         "error: {tmp}/missing/x.journal: the journal file's folder does not exist."),
        ("{tmp}", "error: {tmp}: is a folder, not a journal file."),
        (" ", "error: --storage must be a database URL or a journal file path; got ''."),
    ],
)  # fmt: skip
def test_bad_storage_exits_2_with_one_line(toy_study: Path, tmp_path: Path, storage: str,
                                           message: str) -> None:  # fmt: skip
    out = tmp_path / "res"
    result = _search(toy_study, out, storage.format(tmp=tmp_path))
    assert _one_clean_line(result, 2) == message.format(tmp=tmp_path)
    assert not out.exists()


def test_a_missing_driver_is_named_without_the_password(
    toy_study: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("psycopg", "psycopg2"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    out = tmp_path / "res"
    result = _search(toy_study, out, "postgresql+psycopg://alice:s3cr3t@127.0.0.1:5432/db")
    assert _one_clean_line(result, 2, "s3cr3t") == (
        "error: postgresql+psycopg://alice:***@127.0.0.1:5432/db: the database driver "
        "'psycopg' is not installed (for PostgreSQL: pip install 'deepflow[postgres]')."
    )
    assert not out.exists()


def _has_psycopg() -> bool:
    import importlib.util

    return importlib.util.find_spec("psycopg") is not None


@pytest.mark.skipif(not _has_psycopg(), reason="the postgres extra is not installed")
def test_an_unreachable_server_exits_1_without_the_password(toy_study: Path,
                                                            tmp_path: Path) -> None:  # fmt: skip
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "res"
    url = f"postgresql+psycopg://alice:s3cr3t@127.0.0.1:{port}/db"
    line = _one_clean_line(_search(toy_study, out, url), 1, "s3cr3t")
    assert line.startswith(
        f"error: postgresql+psycopg://alice:***@127.0.0.1:{port}/db: storage failure: "
    )
    assert "Connection refused" in line or "connection" in line.lower()
    assert not out.exists()


@pytest.mark.skipif(POSTGRES is None, reason="DEEPFLOW_TEST_POSTGRES_URL is not set")
def test_wrong_credentials_exit_2_without_the_password(toy_study: Path, tmp_path: Path) -> None:
    assert POSTGRES is not None
    scheme, rest = POSTGRES.split("://", 1)
    user, host = rest.split(":", 1)[0], rest.rsplit("@", 1)[1]
    out = tmp_path / "res"
    wrong = f"{scheme}://{user}:n0t-the-pw@{host}"
    line = _one_clean_line(_search(toy_study, out, wrong), 2, "n0t-the-pw")
    assert line.startswith(f"error: {scheme}://{user}:***@{host}: cannot connect: ")
    assert "password authentication failed" in line
    assert not out.exists()


def test_a_storage_study_with_other_directions_exits_2(toy_study: Path, tmp_path: Path) -> None:
    import optuna

    storage = f"sqlite:///{tmp_path / 'other.db'}"
    plain = optuna.storages.RDBStorage(storage)
    optuna.create_study(study_name="errs", storage=plain, direction="maximize")
    plain.engine.dispose()
    line = _one_clean_line(_search(toy_study, tmp_path / "res", storage), 2)
    assert line == (
        f"error: {storage}: study 'errs' has directions maximize; this search needs "
        "minimize, minimize, minimize."
    )


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_silent_worker_elsewhere_is_adopted_after_its_heartbeat_stops(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optuna.distributions import FloatDistribution

    from deepflow.search import storage as st

    url = _storage_url(kind, tmp_path)
    gone = st.open_store(url)
    gone.worker = {"host": "elsewhere", "pid": 1, "id": "remote"}
    gone.open_study("s", ["minimize"], ["f"])
    gone.distributions = {"x": FloatDistribution(0.0, 1.0)}
    gone.beat()
    reserved = gone.reserve([st.Design([0.5], {"x": 0.5}, {}, {})], budget=4)
    assert [s.worker["id"] for s in reserved] == ["remote"]
    gone.close()
    monkeypatch.setattr(st, "STALE_S", 0.3)
    me = st.open_store(url)
    me.open_study("s", ["minimize"], ["f"])
    assert me.adopt() == []  # first sight of its heartbeat: alive
    time.sleep(0.2)
    gone.beat()
    assert me.adopt() == []  # it beat since: alive
    time.sleep(0.4)
    adopted = me.adopt()  # silent for longer than STALE_S: gone
    assert [s.number for s in adopted] == [0]
    assert [s.worker["id"] for s in me.slots()] == [me.worker["id"]]
    me.close()

"""Where a search keeps its trials: in memory, an Optuna RDB (SQLite, PostgreSQL, MySQL) or an
Optuna journal file, shared by any number of cooperating workers.

A search writes a batch of trials twice, each time in one atomic step:

1. **reserve**: the batch's designs become ``RUNNING`` Optuna trials (physical parameters,
   the searcher's coordinates, the reserving worker). Under the store's lock the designs
   already stored are left out and the batch is cut to what is left of the budget, so
   cooperating workers never evaluate a design twice nor overrun the budget.
2. **complete**: after the oracle evaluation, the batch's trials get their objective values,
   constraints and dataset row and become ``COMPLETE`` together.

A RDB batch is one transaction on Optuna's own tables (through Optuna's SQLAlchemy models,
so the study stays a plain Optuna study); a journal batch is one append to the journal file
under its lock (the records Optuna's :class:`~optuna.storages.JournalStorage` itself writes).
Optuna's own path checks every parameter of every trial against the study's earlier trials,
one query each: 39 ms a trial of 25 parameters on SQLite here (``create_new_trial`` with a
complete template), against 4-7 ms a trial for a batch of 8-16
(``benchmarks/bench_storage.py``). A worker killed between the two steps leaves ``RUNNING``
trials; the next worker on the same machine adopts them (their owner's process is gone) and
evaluates exactly those designs, so a resumed search equals an uninterrupted one.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deepflow.errors import ConfigError, DeepflowError, StorageError

__all__ = [
    "JournalStore",
    "MemoryStore",
    "RDBStore",
    "Slot",
    "StorageError",
    "Store",
    "mask_url",
    "open_store",
]

#: System attributes deepflow keeps with each trial (Optuna ignores unknown keys).
Z_ATTR = "deepflow:z"  # the searcher's native coordinates
BATCH_ATTR = "deepflow:batch"  # the number of the batch's first trial
WORKER_ATTR = "deepflow:worker"  # {"host", "pid", "id"} of the worker evaluating it
SAMPLER_ATTR = "deepflow:sampler"  # the Optuna sampler's own attributes at ask time
PROPOSAL_ATTR = "deepflow:proposal"  # {"source", "round", "info"}: what proposed it
ROW_ATTR = "row"  # user attribute: the dataset row, source, round, strategy, info


def mask_url(url: str) -> str:
    """The URL with its password replaced by ``***`` (for messages)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    if ":" in creds:
        creds = creds.split(":", 1)[0] + ":***"
    return f"{scheme}://{creds}@{host}"


@dataclass
class Slot:
    """One stored trial as the search loop sees it.

    Attributes:
        number: the Optuna trial number.
        key: the store's id of the trial.
        complete: False while reserved (``RUNNING``).
        z: the searcher's native coordinates.
        batch: the number of the first trial of its batch.
        worker: who reserved it (``host``, ``pid``, ``id``).
        sampler: the Optuna sampler's attributes when it was asked (Optuna strategies).
        proposal: ``source``, ``round`` and ``info`` of the proposal.
        record: the dataset row and provenance (complete trials).
    """

    number: int
    key: int
    complete: bool
    z: list[float]
    batch: int
    worker: dict[str, Any]
    sampler: dict[str, Any] = field(default_factory=dict)
    proposal: dict[str, Any] = field(default_factory=dict)
    record: dict[str, Any] | None = None


@dataclass
class Design:
    """A design to reserve: coordinates, physical parameters, sampler attributes and what
    proposed it."""

    z: list[float]
    params: dict[str, Any]
    sampler: dict[str, Any]
    proposal: dict[str, Any]


def _worker() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "id": uuid.uuid4().hex}


#: A worker writes its heartbeat (a study system attribute) this often, in seconds ...
HEARTBEAT_S = 10.0
#: ... and a worker on another machine whose heartbeat has not changed for this long (on
#: this machine's clock: no clock agreement needed) is gone; its running trials are adopted.
STALE_S = 120.0
BEAT_PREFIX = "deepflow:heartbeat:"


def _pid_alive(worker: dict[str, Any]) -> bool:
    """Whether the process of a worker on this machine still runs."""
    try:
        os.kill(int(worker.get("pid", -1)), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


def design_key(z: Sequence[float]) -> tuple[float, ...]:
    """What makes two designs the same trial: their coordinates to 9 digits."""
    return design_keys([z])[0]


def design_keys(z: Any) -> list[tuple[float, ...]]:
    """:func:`design_key` of each row of ``z`` (n, d), vectorised."""
    rows = np.round(np.asarray(z, dtype=float), 9)
    return [tuple(r) for r in rows.reshape(len(rows), -1).tolist()]


class Store:
    """The trials of one study, shared by the workers that search it.

    Subclasses implement :meth:`_read`, :meth:`_locked` and the two batch writes.
    """

    #: Whether trials carry physical parameters and full rows (persistent stores).
    persistent = True

    def __init__(self) -> None:
        self.worker = _worker()
        self.distributions: dict[str, Any] = {}
        self._slots: dict[int, Slot] = {}  # by number
        self._keys: dict[int, tuple[float, ...]] = {}  # design_key by trial number (z is fixed)
        self._taken: set[tuple[float, ...]] = set()  # the values of _keys
        self._seen: dict[str, tuple[Any, float]] = {}  # worker id -> (heartbeat, seen at)
        self._beats = 0
        # The heartbeat thread and a locked write of the loop never interleave (a journal's
        # file lock and Optuna's thread lock would otherwise be taken in opposite orders).
        self._mutex = threading.RLock()

    # ------------------------------------------------------------------ study
    def open_study(self, name: str, directions: Sequence[str], metric_names: Sequence[str]) -> None:
        raise NotImplementedError

    def get_attr(self, key: str) -> Any:
        raise NotImplementedError

    def set_attr(self, key: str, value: Any) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ trials
    def slots(self) -> list[Slot]:
        """Every trial of the study, by number (read again from the storage)."""
        for slot in self._read():
            self._slots[slot.number] = slot
        return [self._slots[k] for k in sorted(self._slots)]

    def design_key(self, slot: Slot) -> tuple[float, ...]:
        """:func:`design_key` of a trial's coordinates (computed once per trial number)."""
        key = self._keys.get(slot.number)
        if key is None:
            key = self._keys[slot.number] = design_key(slot.z)
            self._taken.add(key)
        return key

    def _taken_keys(self, slots: Sequence[Slot]) -> set[tuple[float, ...]]:
        """The design keys of ``slots`` (every trial read): kept as a set that grows with the
        trials, so a reservation costs the new trials only."""
        if len(self._keys) < len(slots):
            for s in slots:
                if s.number not in self._keys:
                    self.design_key(s)
        return self._taken

    def reserve(
        self, designs: Sequence[Design], *, budget: int, distinct: bool = True
    ) -> list[Slot]:
        """Store ``designs`` as running trials of one batch, atomically: designs already in
        the study are left out (unless ``distinct`` is False), and the batch is cut to what
        the budget leaves.

        Returns:
            The new slots (possibly none), in order.
        """
        first = -1
        with self._locked():
            existing = self.slots()
            taken = self._taken_keys(existing)
            room = budget - len(existing)
            keep: list[Design] = []
            batch: set[tuple[float, ...]] = set()
            keys = design_keys([d.z for d in designs]) if designs else []
            for d, key in zip(designs, keys, strict=True):
                if len(keep) >= room:
                    break
                if (key not in taken and key not in batch) or not distinct:
                    batch.add(key)
                    keep.append(d)
            if keep:
                first = self._insert(keep)
        if first < 0:
            return []
        mine = self.worker["id"]
        return [s for s in self.slots() if s.batch == first and s.worker.get("id") == mine]

    def adopt(self, slots: Sequence[Slot] | None = None) -> list[Slot]:
        """Take over running trials whose worker is gone (killed mid-batch), atomically.

        A worker on this machine is gone when its process is; one elsewhere when its
        heartbeat has not changed for :data:`STALE_S` seconds.

        Args:
            slots: the trials as last read (default: read them now).

        Returns:
            The adopted slots, by number.
        """
        current = list(slots) if slots is not None else self.slots()
        others = [s for s in current if not s.complete and s.worker.get("id") != self.worker["id"]]
        if not others:
            return []
        beats = self._heartbeats() if any(
            s.worker.get("host") != socket.gethostname() for s in others
        ) else {}  # fmt: skip
        if not any(self._gone(s.worker, beats) for s in others):
            return []
        with self._locked():
            stale = [
                s for s in self.slots()
                if not s.complete and s.worker.get("id") != self.worker["id"]
                and self._gone(s.worker, beats)
            ]  # fmt: skip
            if stale:
                self._set_worker(stale, self.worker)
                for s in stale:
                    s.worker = dict(self.worker)
        return stale

    def _gone(self, worker: dict[str, Any], beats: dict[str, Any]) -> bool:
        if worker.get("host") == socket.gethostname():
            return not _pid_alive(worker)
        key = str(worker.get("id"))
        value = beats.get(key)
        now = time.monotonic()
        seen = self._seen.get(key)
        if seen is None or seen[0] != value:
            self._seen[key] = (value, now)
            return False
        return now - seen[1] > STALE_S

    def beat(self) -> None:
        """Record that this worker is alive (see :data:`HEARTBEAT_S`)."""
        with self._mutex:
            self._beats += 1
            self._set_system_attr(BEAT_PREFIX + self.worker["id"], self._beats)

    def _heartbeats(self) -> dict[str, Any]:
        """Worker id -> its last heartbeat value."""
        return {}

    def _set_system_attr(self, key: str, value: Any) -> None:
        return

    def complete(
        self,
        slots: Sequence[Slot],
        values: Sequence[Sequence[float]],
        constraints: Sequence[dict[str, float]],
        records: Sequence[dict[str, Any]],
    ) -> None:
        """Store the evaluations of reserved trials and mark them complete, atomically."""
        raise NotImplementedError

    # ------------------------------------------------------------------ backends
    def _read(self) -> list[Slot]:
        raise NotImplementedError

    @contextmanager
    def _locked(self) -> Iterator[None]:
        yield

    def _insert(self, designs: Sequence[Design]) -> int:
        """Add running trials (inside the lock); returns the first one's number."""
        raise NotImplementedError

    def _set_worker(self, slots: Sequence[Slot], worker: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release connections."""


# ------------------------------------------------------------------------------ memory
class MemoryStore(Store):
    """Trials kept in this process only (``storage=None``: tests, the inner searches)."""

    persistent = False

    def __init__(self) -> None:
        super().__init__()
        self._attrs: dict[str, Any] = {}

    def open_study(self, name: str, directions: Sequence[str], metric_names: Sequence[str]) -> None:
        return

    def get_attr(self, key: str) -> Any:
        return self._attrs.get(key)

    def set_attr(self, key: str, value: Any) -> None:
        self._attrs[key] = value

    def slots(self) -> list[Slot]:
        return list(self._slots.values())  # inserted in increasing numbers

    def _read(self) -> list[Slot]:
        return []

    def _insert(self, designs: Sequence[Design]) -> int:
        first = max(self._slots, default=-1) + 1
        for i, d in enumerate(designs):
            n = first + i
            self._slots[n] = Slot(
                n, n, False, list(d.z), first, dict(self.worker), d.sampler, d.proposal
            )
        return first

    def _set_worker(self, slots: Sequence[Slot], worker: dict[str, Any]) -> None:
        return

    def complete(
        self,
        slots: Sequence[Slot],
        values: Sequence[Sequence[float]],
        constraints: Sequence[dict[str, float]],
        records: Sequence[dict[str, Any]],
    ) -> None:
        for slot, record in zip(slots, records, strict=True):
            slot.complete = True
            slot.record = record


# ------------------------------------------------------------------------------ Optuna
def _slot_from_trial(trial: Any) -> Slot | None:
    from optuna.trial import TrialState

    attrs = trial.system_attrs
    if Z_ATTR not in attrs:
        return None  # not a deepflow trial (e.g. added by hand): ignored
    complete = trial.state == TrialState.COMPLETE
    if not complete and trial.state != TrialState.RUNNING:
        return None
    return Slot(
        number=trial.number,
        key=trial._trial_id,
        complete=complete,
        z=list(attrs[Z_ATTR]),
        batch=int(attrs.get(BATCH_ATTR, trial.number)),
        worker=dict(attrs.get(WORKER_ATTR, {})),
        sampler=dict(attrs.get(SAMPLER_ATTR, {})),
        proposal=dict(attrs.get(PROPOSAL_ATTR, {})),
        record=trial.user_attrs.get(ROW_ATTR) if complete else None,
    )


def _constraint_attrs(constraints: dict[str, float]) -> dict[str, float]:
    return {f"constraints:{k}": float(v) for k, v in constraints.items()}


class _OptunaStore(Store):
    """Study-level operations through Optuna's public storage API."""

    storage: Any
    label: str

    def __init__(self) -> None:
        super().__init__()
        self.study_id = -1

    def open_study(self, name: str, directions: Sequence[str], metric_names: Sequence[str]) -> None:
        import optuna
        from optuna.study import StudyDirection

        try:
            try:
                self.study_id = self.storage.get_study_id_from_name(name)
            except KeyError:
                dirs = [StudyDirection[d.upper()] for d in directions]
                try:
                    self.study_id = self.storage.create_new_study(dirs, name)
                except optuna.exceptions.DuplicatedStudyError:  # another worker was quicker
                    self.study_id = self.storage.get_study_id_from_name(name)
            stored = [d.name.lower() for d in self.storage.get_study_directions(self.study_id)]
            if stored != list(directions):
                raise ConfigError(
                    f"{self.label}: study '{name}' has directions {', '.join(stored)}; this "
                    f"search needs {', '.join(directions)}."
                )
            key = "study:metric_names"  # what Study.set_metric_names stores
            if self.storage.get_study_system_attrs(self.study_id).get(key) != list(metric_names):
                self.storage.set_study_system_attr(self.study_id, key, list(metric_names))
        except DeepflowError:
            raise
        except Exception as exc:
            raise _storage_error(self.label, exc, getattr(self, "url", "")) from None

    def get_attr(self, key: str) -> Any:
        return self._call(lambda: self.storage.get_study_user_attrs(self.study_id).get(key))

    def _heartbeats(self) -> dict[str, Any]:
        attrs = self._call(lambda: self.storage.get_study_system_attrs(self.study_id))
        return {
            k.removeprefix(BEAT_PREFIX): v for k, v in attrs.items() if k.startswith(BEAT_PREFIX)
        }

    def _set_system_attr(self, key: str, value: Any) -> None:
        self._call(lambda: self.storage.set_study_system_attr(self.study_id, key, value))

    def set_attr(self, key: str, value: Any) -> None:
        self._call(lambda: self.storage.set_study_user_attr(self.study_id, key, value))

    def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except DeepflowError:
            raise
        except Exception as exc:
            raise _storage_error(self.label, exc, getattr(self, "url", "")) from None

    def slots(self) -> list[Slot]:
        slots: list[Slot] = self._call(super().slots)
        return slots

    def _frozen(self, d: Design, first: int) -> Any:
        import optuna
        from optuna.trial import TrialState

        system = {
            Z_ATTR: [float(v) for v in d.z],
            BATCH_ATTR: first,
            WORKER_ATTR: self.worker,
            PROPOSAL_ATTR: d.proposal,
        }
        if d.sampler:
            system[SAMPLER_ATTR] = d.sampler
        return optuna.trial.FrozenTrial(
            number=-1,
            state=TrialState.RUNNING,
            value=None,
            values=None,
            datetime_start=_dt.datetime.now(),
            datetime_complete=None,
            params=d.params,
            distributions={k: self.distributions[k] for k in d.params},
            user_attrs={},
            system_attrs=system,
            intermediate_values={},
            trial_id=-1,
        )


def _password(url: str) -> str:
    """The password of a URL ('' without one)."""
    if "://" not in url or "@" not in url:
        return ""
    creds = url.split("://", 1)[1].rsplit("@", 1)[0]
    return creds.split(":", 1)[1] if ":" in creds else ""


def _storage_error(label: str, exc: BaseException, url: str = "") -> DeepflowError:
    """One line for a storage failure, without the password."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    orig = getattr(exc, "orig", None) or getattr(exc, "__cause__", None)
    if orig is not None and str(orig).strip():
        text = str(orig).strip().splitlines()[0]
    for secret in (url, _password(url)):
        if secret:
            text = text.replace(secret, "***")
    text = text.replace(label, "").strip(" :") if label in text else text
    lowered = text.lower()
    text = text.rstrip(".")
    if any(w in lowered for w in ("password", "authentication", "role ", "does not exist")):
        return ConfigError(f"{label}: cannot connect: {text}.")
    return StorageError(f"{label}: storage failure: {text}.")


class RDBStore(_OptunaStore):
    """An Optuna RDB storage (SQLAlchemy URL).

    Args:
        url: ``sqlite:///path``, ``postgresql+psycopg://user:pw@host/db``, ...
    """

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.label = mask_url(url)
        self.sqlite = url.startswith("sqlite")
        self._known = -1  # highest trial id read
        self._running: set[int] = set()  # ids of trials read while running
        self._lock_session: Any = None
        try:
            import optuna

            kwargs: dict[str, Any] = {}
            if self.sqlite:
                kwargs = {"connect_args": {"timeout": 120}}
            else:
                kwargs = {"pool_pre_ping": True, "connect_args": {"connect_timeout": 10}}
            for attempt in range(10):
                try:
                    self.storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
                    break
                except Exception as exc:
                    # Workers starting together race to create Optuna's tables and version
                    # row: the loser sees "already exists" or a duplicate key; once more.
                    text = str(exc).lower()
                    racing = ("already exists", "locked", "unique constraint", "duplicate key")
                    if attempt == 9 or not any(r in text for r in racing):
                        raise
                    time.sleep(0.2 * (attempt + 1))
            from sqlalchemy.orm import sessionmaker

            self._sessions = sessionmaker(bind=self.storage.engine)
        except DeepflowError:
            raise
        except Exception as exc:
            if isinstance(exc, ImportError):
                raise ConfigError(
                    f"{self.label}: the database driver '{_driver(url)}' is not installed (for "
                    "PostgreSQL: pip install 'deepflow[postgres]')."
                ) from None
            if type(exc).__name__ in ("ArgumentError", "NoSuchModuleError"):
                raise ConfigError(
                    f"{self.label}: not a storage URL the database accepts."
                ) from None
            raise _storage_error(self.label, exc, self.url) from None

    def _read(self) -> list[Slot]:
        from optuna.storages._rdb import models
        from sqlalchemy import or_
        from sqlalchemy.orm import selectinload

        T = models.TrialModel
        session = self._lock_session
        own = session is None
        if own:
            session = self._sessions()
        try:
            query = (
                session.query(T)
                .filter(T.study_id == self.study_id)
                .filter(or_(T.trial_id > self._known, T.trial_id.in_(sorted(self._running))))
                .options(
                    selectinload(T.params),
                    selectinload(T.values),
                    selectinload(T.user_attributes),
                    selectinload(T.system_attributes),
                    selectinload(T.intermediate_values),
                )
            )
            trials = [self.storage._build_frozen_trial_from_trial_model(t) for t in query]
            if own:
                session.commit()
        finally:
            if own:
                session.close()
        out = []
        for t in trials:
            if t.state.is_finished():
                self._running.discard(t._trial_id)
            else:
                self._running.add(t._trial_id)
            slot = _slot_from_trial(t)
            if slot is not None:
                out.append(slot)
        if trials:
            self._known = max(self._known, *(t._trial_id for t in trials))
        return out

    @contextmanager
    def _session(self) -> Iterator[Any]:
        """A write transaction of our own (Optuna's scoped session is left alone)."""
        session = self._sessions()
        try:
            if self.sqlite:
                from sqlalchemy import text

                # Take SQLite's write lock first: a read-then-write transaction of two
                # workers would otherwise fail on the upgrade instead of waiting.
                session.execute(text("BEGIN IMMEDIATE"))
            yield session
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        from optuna.storages._rdb import models

        self._pending_slots: list[Slot] = []
        try:
            with self._session() as session:
                models.StudyModel.find_or_raise_by_id(self.study_id, session, for_update=True)
                self._lock_session = session
                try:
                    yield
                finally:
                    self._lock_session = None
        except DeepflowError:
            raise
        except Exception as exc:
            raise _storage_error(self.label, exc, self.url) from None
        for slot in self._pending_slots:  # committed: ours, and never read back
            self._slots[slot.number] = slot
            self._known = max(self._known, slot.key)
        self._pending_slots = []

    def _insert(self, designs: Sequence[Design]) -> int:
        # Bulk inserts into Optuna's tables (its models): Optuna's own per-trial path
        # checks each parameter against earlier trials in a query of its own.
        from optuna.storages._rdb import models
        from sqlalchemy import insert

        session = self._lock_session
        T = models.TrialModel
        first = session.query(T).filter(T.study_id == self.study_id).count()
        frozen = [self._frozen(d, first) for d in designs]
        ids = list(
            session.scalars(
                insert(T).returning(T.trial_id, sort_by_parameter_order=True),
                [
                    {
                        "study_id": self.study_id,
                        "number": first + i,
                        "state": f.state,
                        "datetime_start": f.datetime_start,
                    }
                    for i, f in enumerate(frozen)
                ],
            )
        )
        params = [
            {
                "trial_id": tid,
                "param_name": k,
                "param_value": f.distributions[k].to_internal_repr(v),
                "distribution_json": _dist_json(f.distributions[k]),
            }
            for tid, f in zip(ids, frozen, strict=True)
            for k, v in f.params.items()
        ]
        if params:
            session.execute(insert(models.TrialParamModel), params)
        session.execute(
            insert(models.TrialSystemAttributeModel),
            [
                {"trial_id": tid, "key": k, "value_json": json.dumps(v)}
                for tid, f in zip(ids, frozen, strict=True)
                for k, v in f.system_attrs.items()
            ],
        )
        # Known without reading them back: everything below was read under this lock.
        for i, (tid, d) in enumerate(zip(ids, designs, strict=True)):
            self._pending_slots.append(
                Slot(first + i, tid, False, list(d.z), first, dict(self.worker), d.sampler,
                     d.proposal)
            )  # fmt: skip
        return first

    def _set_worker(self, slots: Sequence[Slot], worker: dict[str, Any]) -> None:
        from optuna.storages._rdb import models

        session = self._lock_session
        for s in slots:
            attr = (
                session.query(models.TrialSystemAttributeModel)
                .filter_by(trial_id=s.key, key=WORKER_ATTR)
                .one()
            )
            attr.value_json = json.dumps(worker)

    def complete(
        self,
        slots: Sequence[Slot],
        values: Sequence[Sequence[float]],
        constraints: Sequence[dict[str, float]],
        records: Sequence[dict[str, Any]],
    ) -> None:
        from optuna.storages._rdb import models
        from optuna.trial import TrialState
        from sqlalchemy import insert, update

        T = models.TrialModel
        now = _dt.datetime.now()
        ids = [s.key for s in slots]
        try:
            with self._session() as session:
                done = session.execute(
                    update(T)
                    .where(T.trial_id.in_(ids), T.state == TrialState.RUNNING)
                    .values(state=TrialState.COMPLETE, datetime_complete=now)
                    .execution_options(synchronize_session=False)
                ).rowcount
                if done != len(ids):
                    first = min(s.number for s in slots)
                    raise StorageError(
                        f"{self.label}: trial {first} was completed by another worker."
                    )
                session.execute(
                    insert(models.TrialValueModel),
                    [
                        dict(zip(("value", "value_type"),
                                 models.TrialValueModel.value_to_stored_repr(float(x)),
                                 strict=True),
                             trial_id=tid, objective=j)
                        for tid, v in zip(ids, values, strict=True)
                        for j, x in enumerate(v)
                    ],
                )  # fmt: skip
                attrs = [
                    {"trial_id": tid, "key": k, "value_json": json.dumps(x)}
                    for tid, c in zip(ids, constraints, strict=True)
                    for k, x in _constraint_attrs(c).items()
                ]
                if attrs:
                    session.execute(insert(models.TrialSystemAttributeModel), attrs)
                session.execute(
                    insert(models.TrialUserAttributeModel),
                    [
                        {"trial_id": tid, "key": ROW_ATTR, "value_json": json.dumps(r)}
                        for tid, r in zip(ids, records, strict=True)
                    ],
                )
        except DeepflowError:
            raise
        except Exception as exc:
            raise _storage_error(self.label, exc, self.url) from None
        for slot, record in zip(slots, records, strict=True):  # ours: not read back
            slot.complete = True
            slot.record = record
            self._slots[slot.number] = slot

    def close(self) -> None:
        try:
            self.storage.remove_session()
            self.storage.engine.dispose()
        except Exception:
            pass


def _driver(url: str) -> str:
    """The DB-API module a URL asks for (``psycopg`` for ``postgresql+psycopg://``)."""
    try:
        from sqlalchemy.engine import make_url

        return str(make_url(url).get_dialect().driver)
    except Exception:
        return url.split("://", 1)[0].split("+")[-1]


def _dist_json(dist: Any) -> str:
    from optuna.distributions import distribution_to_json

    return distribution_to_json(dist)


class JournalStore(_OptunaStore):
    """An Optuna journal file (:class:`optuna.storages.JournalStorage`).

    Args:
        path: the journal file (created if missing; its folder must exist).
    """

    def __init__(self, path: str) -> None:
        super().__init__()
        import optuna
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        self.path = path
        self.label = path
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise ConfigError(f"{path}: the journal file's folder does not exist.")
        if os.path.isdir(path):
            raise ConfigError(f"{path}: is a folder, not a journal file.")
        try:
            self.backend = JournalFileBackend(path, lock_obj=JournalFileOpenLock(path))
            self.storage = optuna.storages.JournalStorage(self.backend)
        except Exception as exc:
            raise _storage_error(self.label, exc) from None

    def _read(self) -> list[Slot]:
        out = []
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False):
            slot = _slot_from_trial(t)
            if slot is not None:
                out.append(slot)
        return out

    @contextmanager
    def _locked(self) -> Iterator[None]:
        from optuna.storages.journal._file import get_lock_file

        self._pending: list[dict[str, Any]] = []
        with self._mutex:
            try:
                with get_lock_file(self.backend._lock):
                    yield
                    if self._pending:
                        self._append(self._pending)
            except DeepflowError:
                raise
            except Exception as exc:
                raise _storage_error(self.label, exc) from None
            finally:
                self._pending = []
            with self.storage._thread_lock:
                self.storage._sync_with_backend()

    def _append(self, logs: list[dict[str, Any]]) -> None:
        """Write records the way JournalFileBackend.append_logs does (we hold its lock)."""
        worker_id = self.storage._replay_result.worker_id
        text = "\n".join(
            json.dumps({**log, "worker_id": worker_id}, separators=(",", ":")) for log in logs
        )
        with open(self.path, "ab") as f:
            f.write((text + "\n").encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())

    def _insert(self, designs: Sequence[Design]) -> int:
        from optuna.storages.journal._storage import JournalOperation

        self.storage._sync_with_backend()
        first = len(self.storage._replay_result._study_id_to_trial_ids[self.study_id])
        for d in designs:
            frozen = self._frozen(d, first)
            start = frozen.datetime_start.astimezone(_dt.UTC).isoformat(timespec="microseconds")
            self._pending.append(
                {
                    "op_code": JournalOperation.CREATE_TRIAL,
                    "study_id": self.study_id,
                    "datetime_start": start,
                    "state": int(frozen.state),
                    "value": None,
                    "values": None,
                    "distributions": {k: _dist_json(v) for k, v in frozen.distributions.items()},
                    "params": {
                        k: frozen.distributions[k].to_internal_repr(v)
                        for k, v in frozen.params.items()
                    },
                    "user_attrs": {},
                    "system_attrs": frozen.system_attrs,
                    "intermediate_values": {},
                }
            )
        return first

    def _set_worker(self, slots: Sequence[Slot], worker: dict[str, Any]) -> None:
        from optuna.storages.journal._storage import JournalOperation

        for s in slots:
            self._pending.append(
                {
                    "op_code": JournalOperation.SET_TRIAL_SYSTEM_ATTR,
                    "trial_id": s.key,
                    "system_attr": {WORKER_ATTR: worker},
                }
            )

    def complete(
        self,
        slots: Sequence[Slot],
        values: Sequence[Sequence[float]],
        constraints: Sequence[dict[str, float]],
        records: Sequence[dict[str, Any]],
    ) -> None:
        from optuna.storages.journal._storage import JournalOperation
        from optuna.trial import TrialState

        with self._locked():
            self.storage._sync_with_backend()
            now = _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds")
            for s, v, c, r in zip(slots, values, constraints, records, strict=True):
                trial = self.storage._replay_result._trials.get(s.key)
                if trial is None or trial.state != TrialState.RUNNING:
                    raise StorageError(
                        f"{self.label}: trial {s.number} was completed by another worker."
                    )
                op = JournalOperation
                self._pending.append(
                    {
                        "op_code": op.SET_TRIAL_USER_ATTR,
                        "trial_id": s.key,
                        "user_attr": {ROW_ATTR: r},
                    }
                )
                for k, x in _constraint_attrs(c).items():
                    self._pending.append(
                        {"op_code": op.SET_TRIAL_SYSTEM_ATTR, "trial_id": s.key,
                         "system_attr": {k: x}}
                    )  # fmt: skip
                self._pending.append(
                    {
                        "op_code": op.SET_TRIAL_STATE_VALUES,
                        "trial_id": s.key,
                        "state": int(TrialState.COMPLETE),
                        "values": [float(x) for x in v],
                        "datetime_complete": now,
                    }
                )


def open_store(storage: str | None) -> Store:
    """The store of a ``--storage`` value.

    Args:
        storage: None (in memory), an SQLAlchemy URL (``sqlite:///optuna.db``,
            ``postgresql+psycopg://user:pw@host:5432/db``), or the path of an Optuna
            journal file (any value without ``://``; ``journal:`` prefix optional).

    Raises:
        ConfigError: a URL no database accepts, a missing driver, bad credentials, a journal
            path in a missing folder.
        StorageError: the database cannot be reached.
    """
    if storage is None:
        return MemoryStore()
    if not storage.strip():
        raise ConfigError("--storage must be a database URL or a journal file path; got ''.")
    if "://" in storage:
        if storage.startswith("journal://"):
            return JournalStore(storage.removeprefix("journal://"))
        return RDBStore(storage)
    return JournalStore(storage.removeprefix("journal:"))


def finite(values: Sequence[float], big: float = 1e300) -> list[float]:
    """Objective values Optuna accepts (NaN as ``big``, infinities clipped)."""
    return [big if math.isnan(v) else float(min(max(v, -big), big)) for v in values]


def wait(seconds: float) -> None:
    """Pause between polls of a shared storage."""
    time.sleep(seconds)

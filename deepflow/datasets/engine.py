"""Labelled sweeps: chunks of rows, evaluated on local processes or Ray, resumable.

The rows 0..N-1 are cut into chunks of ``chunk_rows`` (the unit of work, of progress and of
resume: :data:`DEFAULT_CHUNK_ROWS`, or fewer when the space's ``chunk_size`` is smaller);
chunk k is a pure function of (space, seed, N, k), so the backend, the worker count and the
chunk size change nothing in the result. The final file's row groups hold the space's
``chunk_size`` rows each, however the work was cut, so it is the same file byte for byte.
Workers compute and encode; the driver writes each finished chunk atomically (temporary
file + rename) into ``<out>.parts/`` and records it in ``manifest.json`` (written the same
way). ``resume=True`` keeps the recorded chunks (their SHA-256 re-checked) and computes the
rest; the final Parquet is assembled in chunk order, as the chunks arrive, into a temporary
file renamed into place once complete, then the parts folder is removed. A run killed at any
moment therefore resumes to a file identical, row for row, to an uninterrupted run.

``layout="parts"`` (:mod:`deepflow.datasets.parts`) assembles nothing: the workers write
their chunks, in the dataset's final form, into the output folder (a local path or a pyarrow
URI such as ``s3://``), and the driver keeps only the manifest.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from deepflow.datasets.io import (
    DATASET_FORMAT,
    file_metadata,
    oracle_version,
    package_versions,
    read_metadata,
    sidecar_path,
    table_bytes,
    write_atomic,
    write_options,
)
from deepflow.datasets.label import arrow_schema, cube_rows, label_points, output_names
from deepflow.datasets.parts import MANIFEST as PARTS_MANIFEST
from deepflow.datasets.parts import Location, part_name, sha256
from deepflow.datasets.space import DesignSpace, load_space, space_from_text
from deepflow.errors import ConfigError, DeepflowError, StorageError
from deepflow.lock import hold_lock

__all__ = ["BACKENDS", "LAYOUTS", "SampleResult", "sample"]

BACKENDS = ("local", "ray")
#: ``file``: one Parquet file the driver assembles; ``parts``: a folder of the workers' parts.
LAYOUTS = ("file", "parts")
#: Rows per chunk by default: a chunk takes about a second on one worker (the progress moves
#: about once a second per worker), and per-chunk costs (a part file, a manifest entry) stay
#: a few per cent of the labelling.
DEFAULT_CHUNK_ROWS = 8192
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SampleResult:
    """What :func:`sample` wrote (``path``: the file, or the parts folder as given)."""

    path: Path | str
    num_rows: int
    num_feasible: int
    num_chunks: int
    resumed_rows: int
    seconds: float

    @property
    def rows_per_s(self) -> float:
        """Rows computed in this call per second of wall time."""
        computed = self.num_rows - self.resumed_rows
        return computed / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True)
class _Job:
    """Everything a worker needs to compute a chunk (plain data: it pickles)."""

    text: str
    file: str
    base_dir: str
    seed: int
    num_samples: int
    oracle_version: str
    config_path: str
    #: The dataset's file metadata, for parts written in their final form (layout ``parts``);
    #: None: temporary parts for the driver to assemble.
    metadata: dict[bytes, bytes] | None = None


@functools.lru_cache(maxsize=4)
def _worker_space(text: str, file: str, base_dir: str, config_path: str) -> DesignSpace:
    if config_path and os.environ.get("DEEPFLOW_CONFIG_PATH") != config_path:
        os.environ["DEEPFLOW_CONFIG_PATH"] = config_path  # presets resolve as in the driver
    return space_from_text(text, file=file, base_dir=base_dir)


def _label_chunk(space: DesignSpace, job: _Job, start: int, stop: int,
                 u: NDArray[np.float64] | None) -> pa.Table:  # fmt: skip
    if u is None:
        u = cube_rows(space, seed=job.seed, start=start, stop=stop, num_samples=job.num_samples)
    return label_points(space, u, oracle_version=job.oracle_version, seed=job.seed,
                        sample_index=np.arange(start, stop, dtype=np.int64))  # fmt: skip


def compute_chunk(job: _Job, index: int, start: int, stop: int,
                  u: NDArray[np.float64] | None = None) -> tuple[int, bytes]:  # fmt: skip
    """Worker entry point: the chunk's rows as Parquet bytes (encoded where they are computed).

    ``u``: the chunk's unit-cube points when the driver drew them (local processes, so that
    the workers never import scipy's Sobol' engine); None draws them here.
    """
    _reuse_freed_memory()
    space = _worker_space(job.text, job.file, job.base_dir, job.config_path)
    _check_worker_oracle(job)
    return index, table_bytes(_label_chunk(space, job, start, stop, u), temporary=True)


Written = tuple[int, int, str, int]  # (index, rows, SHA-256 of the file, feasible rows)


def compute_chunk_to(job: _Job, index: int, start: int, stop: int, parts: str) -> Written:
    """Worker entry point: compute a chunk and write it into the folder ``parts`` (a local
    path or a pyarrow URI) itself, through ``pyarrow.fs`` (a temporary name, then a move), so
    that no row travels through the driver; in final form with ``job.metadata``, else as a
    temporary part. Returns (index, rows, SHA-256 of the file, feasible rows) for the manifest.
    """
    _reuse_freed_memory()
    space = _worker_space(job.text, job.file, job.base_dir, job.config_path)
    _check_worker_oracle(job)
    table = _label_chunk(space, job, start, stop, None)
    if job.metadata is None:
        data = table_bytes(table, temporary=True)
    else:
        table = table.replace_schema_metadata(job.metadata)
        data = table_bytes(table)
    Location.of(parts).write(part_name(index), data)
    return index, stop - start, sha256(data), _count_true(table.column("feasible"))


def _check_worker_oracle(job: _Job) -> None:
    """A worker must label with the driver's oracle (sources and calibration files): a node
    with another deepflow would mix two oracles in one dataset.

    Raises:
        DeepflowError: names the worker's host and both versions.
    """
    here = oracle_version()
    if here != job.oracle_version:
        import socket

        raise DeepflowError(
            f"a worker on {socket.gethostname()} runs oracle {here}, the driver "
            f"{job.oracle_version}; install the same deepflow and calibration files on every "
            "node (DEEPFLOW_CONFIG_PATH as on the driver)."
        )


def _warm_up(job: _Job) -> None:
    """A worker's one-off costs, paid before its first chunk: the space and the oracle's
    calibration data (read on the first evaluation of the space's base scenario)."""
    _reuse_freed_memory()
    output_names(_worker_space(job.text, job.file, job.base_dir, job.config_path))


#: How often a worker checks that the run that started it is still there.
_PARENT_POLL_s = 0.5


def _die_with_parent(parent: int) -> None:
    """Pool-worker initializer: end this process as soon as the run ``parent`` is gone.

    A run killed with SIGKILL cannot stop its pool; its workers would compute (or wait for
    work) on for minutes and keep the pool's resource trackers alive. A daemon thread here
    notices the parent's death (the worker is handed to another parent, so its parent id
    changes) and exits.
    """
    if os.getppid() != parent:  # the run died while this worker was starting
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(_PARENT_POLL_s)
        os._exit(1)

    threading.Thread(target=watch, name="deepflow-parent-watch", daemon=True).start()


@functools.cache
def _reuse_freed_memory() -> None:
    """Let this worker process's malloc keep freed memory for the next large arrays.

    With glibc's defaults every numpy temporary over 128 KiB (a 65,536-row chunk's columns
    are 512 KiB) is mapped afresh and page-faulted in; the oracle makes thousands per chunk,
    and serving them from the heap instead labels about 20 % faster. Only the engine's
    worker processes do this (mallopt M_MMAP_THRESHOLD and M_TRIM_THRESHOLD); it does nothing
    where the C library is not glibc.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 256 << 20)  # M_MMAP_THRESHOLD: mmap only above 256 MiB
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD: keep up to 512 MiB of free heap
    except (OSError, AttributeError):  # pragma: no cover - not glibc
        pass


# ------------------------------------------------------------------------------ backends
Chunk = tuple[int, int, int]
#: A finished chunk: its index, its Parquet bytes and, when computed in this process, its table;
#: or, when a worker wrote the part file itself, (index, None, (rows, SHA-256)).
Result = tuple[int, bytes | None, pa.Table | tuple[int, str] | None]


def _run_local(job: _Job, chunks: list[Chunk], workers: int,
               space: DesignSpace) -> Iterator[Result]:  # fmt: skip
    if workers == 1 or len(chunks) == 1:  # in this process, with the space already loaded
        for index, start, stop in chunks:
            table = _label_chunk(space, job, start, stop, None)
            yield index, table_bytes(table, temporary=True), table
        return
    from joblib import Parallel, delayed

    def tasks() -> Iterator[Any]:  # made as joblib dispatches them (a few ahead)
        # The workers start (imports, space, calibration) while this process draws points.
        for _ in range(workers):
            yield delayed(_warm_up)(job)
        for index, start, stop in chunks:
            u = cube_rows(space, seed=job.seed, start=start, stop=stop,
                          num_samples=job.num_samples)  # fmt: skip
            yield delayed(compute_chunk)(job, index, start, stop, u)

    parallel = Parallel(n_jobs=workers, backend="loky", batch_size=1,
                        return_as="generator_unordered", initializer=_die_with_parent,
                        initargs=(os.getpid(),))  # fmt: skip
    for result in parallel(tasks()):
        if result is not None:
            yield *result, None


def _run_ray(job: _Job, chunks: list[Chunk], workers: int, address: str | None,
             parts: str) -> Iterator[Written]:  # fmt: skip
    """The chunks on Ray tasks that write them into the folder ``parts`` (a local path or a
    pyarrow URI) themselves; what each wrote, as it finishes."""
    if address is None:
        # Ray 2.60 turns on token authentication by default; a private local cluster needs none.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            "--backend ray needs Ray: install the dist extra (pip install -e '.[dist]')."
        ) from exc
    try:
        if address is not None:
            ray.init(address=address, log_to_driver=False)
        else:
            # "local": a private cluster even when another one runs on this machine. Without
            # it Ray joins the cluster named by RAY_ADDRESS or by its current-cluster file
            # (the last `ray start`, anyone's) and rejects num_cpus with a ValueError
            # (ray.init's docstring, "address"; Ray 2.60 _private/services.py).
            ray.init(address="local", num_cpus=workers, include_dashboard=False,
                     log_to_driver=False)  # fmt: skip
    except ConnectionError as exc:
        raise ConfigError(
            f"--address {address}: no Ray cluster answers there ({str(exc).splitlines()[0]})."
        ) from None
    head = str(ray.get_runtime_context().gcs_address)
    lost = False
    try:
        remote = ray.remote(num_cpus=1)(compute_chunk_to)
        pending = [remote.remote(job, *c, parts) for c in chunks]
        silent_s = 0.0
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=_HEAD_POLL_s)
            if not done:  # nothing finished for a while: is the head still there?
                silent_s = 0.0 if _answers(head) else silent_s + _HEAD_POLL_s
                if silent_s >= _HEAD_LOST_s:
                    lost = True
                    raise StorageError(
                        f"the Ray head at {head} stopped answering; the finished chunks are "
                        f"kept in {parts}: run again with --resume once a cluster is up."
                    )
                continue
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:  # the worker's own error, one line
                if isinstance(exc.cause, DeepflowError):
                    raise DeepflowError(str(exc.cause)) from None
                if isinstance(exc.cause, OSError):  # the worker's write: one line, kept parts
                    raise exc.cause from None
                raise
            yield result
    finally:
        if not lost:  # with the head gone, Ray's shutdown waits a minute for it
            ray.shutdown()


def _assembled(written: Iterator[Written]) -> Iterator[Result]:
    """Parts the workers wrote, as results for the single-file assembly; closing this closes
    ``written`` (and with it the backend)."""
    try:
        for index, rows, sha, _ in written:
            yield index, None, (rows, sha)
    finally:
        close = getattr(written, "close", None)
        if close is not None:
            close()


#: How often the driver looks for the Ray head while no chunk finishes, and how long it may
#: stay silent before the run stops (Ray itself waits 60 s, then exits without a word).
_HEAD_POLL_s = 1.0
_HEAD_LOST_s = 5.0


def _answers(address: str) -> bool:
    """Whether something accepts TCP connections at ``host:port`` (the Ray head's GCS)."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=_HEAD_POLL_s):
            return True
    except (OSError, ValueError):
        return False


# ------------------------------------------------------------------------------ manifest
def _parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def _chunk_path(parts: Path, index: int) -> Path:
    return parts / f"chunk-{index:06d}.parquet"


def _run_parameters(space: DesignSpace, seed: int, num_samples: int, chunk_size: int,
                    version: str) -> dict[str, Any]:  # fmt: skip
    return {
        "space_sha256": space.sha256,
        "seed": seed,
        "num_samples": num_samples,
        "chunk_size": chunk_size,
        "sampler": space.sampler,
        "oracle_version": version,
    }


def _read_manifest(parts: Path, expected: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Chunks a previous run finished (verified), or an error if the runs differ."""
    return Location.of(parts).finished_chunks(expected, MANIFEST)


def _write_manifest(parts: Path, params: dict[str, Any], chunks: dict[str, Any]) -> None:
    body = {"manifest_format": MANIFEST_FORMAT, **params,
            "chunks": dict(sorted(chunks.items(), key=lambda kv: int(kv[0])))}  # fmt: skip
    write_atomic(parts / MANIFEST, json.dumps(body, indent=1).encode("utf-8"))


# ------------------------------------------------------------------------------ sample
def _check_args(num_samples: int, seed: int, backend: str, workers: int,
                address: str | None, chunk_size: int | None) -> None:  # fmt: skip
    def bad_int(v: object, low: int) -> bool:
        return isinstance(v, bool) or not isinstance(v, int) or v < low

    if bad_int(num_samples, 1):
        raise ConfigError(f"--num-samples must be an integer >= 1; got {num_samples}.")
    if bad_int(seed, 0):
        raise ConfigError(f"--seed must be an integer >= 0; got {seed}.")
    if backend not in BACKENDS:
        raise ConfigError(f"--backend must be one of: {', '.join(BACKENDS)}; got {backend!r}.")
    if bad_int(workers, 1):
        raise ConfigError(f"--workers must be an integer >= 1; got {workers}.")
    if address is not None and backend != "ray":
        raise ConfigError("--address joins a Ray cluster; it needs --backend ray.")
    if chunk_size is not None and bad_int(chunk_size, 1):
        raise ConfigError(f"chunk_size must be an integer >= 1; got {chunk_size}.")


def plan_chunks(num_samples: int, chunk_size: int) -> list[Chunk]:
    """(index, start, stop) of every chunk."""
    return [(k, s, min(s + chunk_size, num_samples))
            for k, s in enumerate(range(0, num_samples, chunk_size))]  # fmt: skip


def sample(
    space: str | Path | DesignSpace,
    *,
    num_samples: int,
    out: str | Path,
    seed: int = 0,
    backend: str = "local",
    workers: int = 1,
    resume: bool = False,
    address: str | None = None,
    chunk_size: int | None = None,
    progress: Progress | None = None,
    layout: str = "file",
) -> SampleResult:
    """Label ``num_samples`` designs of a space with the oracle and write them to Parquet.

    Args:
        space: a design-space YAML path (or preset name) or a loaded :class:`DesignSpace`.
        num_samples: rows, >= 1.
        out: the Parquet file to write (its folder must exist); replaced atomically.
        seed: >= 0; the same seed gives the same dataset for every backend and worker count.
        backend: ``local`` (processes via joblib) or ``ray``.
        workers: processes (local) or CPUs of the local Ray cluster.
        resume: keep the chunks an interrupted run left in ``<out>.parts/``.
        address: with ``ray``, join this cluster instead of starting a local one.
        chunk_size: rows per chunk, the unit of work, progress and resume (default:
            :data:`DEFAULT_CHUNK_ROWS`, at most the space's ``chunk_size``); any value gives
            the same file, byte for byte (its row groups hold the space's ``chunk_size`` rows).
        progress: called with (rows done, rows total) after each chunk.
        layout: ``file`` (one Parquet file ``out``) or ``parts``: ``out`` is a folder, a local
            path or a pyarrow URI (``file://``, ``s3://``, ...), of Parquet parts the workers
            write themselves (:mod:`deepflow.datasets.parts`); ``resume`` continues it.

    Returns:
        A :class:`SampleResult`.

    Raises:
        ConfigError: bad arguments or space (nothing written), or a resume whose inputs
            differ from the interrupted run's.
    """
    _check_args(num_samples, seed, backend, workers, address, chunk_size)
    if layout not in LAYOUTS:
        raise ConfigError(f"--layout must be one of: {', '.join(LAYOUTS)}; got {layout!r}.")
    if layout == "file" and "://" in str(out):
        raise ConfigError(
            f"--out {out}: a URI takes the parts layout (--layout parts); the file layout "
            "writes one local file."
        )
    loaded = space if isinstance(space, DesignSpace) else load_space(space)
    loaded.check_num_samples(num_samples)
    if layout == "parts":
        return _sample_parts(loaded, str(out), num_samples=num_samples, seed=seed,
                             backend=backend, workers=workers, resume=resume, address=address,
                             chunk_size=chunk_size, progress=progress)  # fmt: skip
    out_path = Path(out)
    if not out_path.parent.is_dir():
        raise ConfigError(f"{out}: folder {out_path.parent} does not exist.")
    if out_path.is_dir():
        raise ConfigError(f"{out}: is a directory; give a .parquet file name.")
    size = chunk_size or min(loaded.chunk_size, DEFAULT_CHUNK_ROWS)
    version = oracle_version()
    schema = arrow_schema(loaded)  # evaluates the base once: fails here, before any write
    params = _run_parameters(loaded, seed, num_samples, size, version)
    try:
        with hold_lock(out_path, what=f"dataset {out_path}"):
            return _sample_locked(loaded, out_path, params, backend=backend, workers=workers,
                                  resume=resume, address=address, schema=schema,
                                  progress=progress)  # fmt: skip
    except OSError as exc:
        raise _storage_error(exc, out_path) from None


def _storage_error(exc: OSError, out: Path) -> StorageError:
    """An OS error of a run as one line naming the path and the cause. Finished chunks stay
    in the parts folder for ``--resume``; a parts folder with none is removed."""
    parts = _parts_dir(out)
    chunks = _recorded(Location.of(parts), MANIFEST)
    if not chunks:
        shutil.rmtree(parts, ignore_errors=True)
    return _kept_error(exc, out, chunks, parts)


def _recorded(loc: Location, name: str) -> int:
    """How many chunks the manifest ``name`` of ``loc`` records (0 when it cannot be read)."""
    try:
        return len((loc.read_manifest(name) or {})["chunks"])
    except (OSError, ConfigError, KeyError, TypeError):
        return 0


def _kept_error(exc: OSError, out: str | Path, chunks: int, folder: str | Path) -> StorageError:
    """``PATH: cause.``, and where the ``chunks`` finished chunks are kept for ``--resume``."""
    where = exc.filename if exc.filename is not None else out
    cause = exc.strerror or str(exc)
    if not chunks:
        return StorageError(f"{where}: {cause}.")
    return StorageError(
        f"{where}: {cause}; {chunks} finished chunk(s) are kept in {folder} for --resume "
        "(delete it to start over)."
    )


def _sample_locked(loaded: DesignSpace, out_path: Path, params: dict[str, Any], *, backend: str,
                   workers: int, resume: bool, address: str | None, schema: pa.Schema,
                   progress: Progress | None) -> SampleResult:  # fmt: skip
    num_samples, seed, size = params["num_samples"], params["seed"], params["chunk_size"]
    version = params["oracle_version"]
    parts = _parts_dir(out_path)
    if resume and not parts.exists() and _finished(out_path, params):
        return SampleResult(path=out_path, num_rows=num_samples,
                            num_feasible=_count_feasible(out_path),
                            num_chunks=len(plan_chunks(num_samples, size)),
                            resumed_rows=num_samples, seconds=0.0)  # fmt: skip
    if parts.exists() and not resume:
        raise ConfigError(
            f"{parts} holds an interrupted run; pass --resume to continue it, or delete it."
        )
    t0 = time.perf_counter()
    done = _read_manifest(parts, params) if resume and parts.exists() else {}
    parts.mkdir(exist_ok=True)
    _write_manifest(parts, params, done)
    chunks = plan_chunks(num_samples, size)
    pending = [c for c in chunks if str(c[0]) not in done]
    resumed = sum(int(e["rows"]) for e in done.values())
    rows_done = resumed
    if progress is not None:
        progress(rows_done, num_samples)
    job = _Job(text=loaded.text, file=loaded.file, base_dir=loaded.base_dir, seed=seed,
               num_samples=num_samples, oracle_version=version,
               config_path=os.environ.get("DEEPFLOW_CONFIG_PATH", ""))  # fmt: skip
    workers = min(workers, max(len(pending), 1))
    results: Iterable[Result] = (
        () if not pending
        else _assembled(_run_ray(job, pending, workers, address, str(parts.resolve())))
        if backend == "ray"
        else _run_local(job, pending, workers, loaded)
    )  # fmt: skip
    with (
        _forget_if_nothing_done(parts, done),
        _Assembly(loaded, parts, chunks, schema, params) as assembly,
        _closing(results),
    ):
        assembly.append_ready(done)
        for index, data, extra in results:
            if data is None:  # a worker wrote the part file itself
                rows, sha = cast(tuple[int, str], extra)
                footer = pq.read_metadata(_chunk_path(parts, index))
                if footer.num_rows != rows:
                    raise DeepflowError(f"chunk {index}: the part file holds {footer.num_rows} "
                                        f"rows; its worker wrote {rows}.")  # fmt: skip
            else:
                footer = pq.read_metadata(pa.BufferReader(data))
                sha = hashlib.sha256(data).hexdigest()
            if not footer.schema.to_arrow_schema().equals(schema):
                raise DeepflowError(f"chunk {index}: columns differ from the space's schema.")
            if data is not None:
                write_atomic(_chunk_path(parts, index), data)
            done[str(index)] = {"rows": footer.num_rows, "sha256": sha}
            _write_manifest(parts, params, done)
            assembly.append_ready(done, index, extra if isinstance(extra, pa.Table) else (
                data or b""))  # fmt: skip
            rows_done += footer.num_rows
            if progress is not None:
                progress(rows_done, num_samples)
        feasible = assembly.finish(out_path)
    shutil.rmtree(parts)
    return SampleResult(path=out_path, num_rows=num_samples, num_feasible=feasible,
                        num_chunks=len(chunks), resumed_rows=resumed,
                        seconds=time.perf_counter() - t0)  # fmt: skip


# ------------------------------------------------------------------------- parts layout
def _sample_parts(loaded: DesignSpace, out: str, *, num_samples: int, seed: int, backend: str,
                  workers: int, resume: bool, address: str | None, chunk_size: int | None,
                  progress: Progress | None) -> SampleResult:  # fmt: skip
    """:func:`sample` with ``layout="parts"``: the workers write the dataset's parts into the
    folder ``out`` (a local path, locked as a file output is, or a pyarrow URI)."""
    loc = Location.of(out)
    local = loc.local
    if local is not None and not local.parent.is_dir():
        raise ConfigError(f"{out}: folder {local.parent} does not exist.")
    if loc.kind() == "file":
        raise ConfigError(f"{out}: is a file; the parts layout writes a folder.")
    size = chunk_size or min(loaded.chunk_size, DEFAULT_CHUNK_ROWS)
    params = _run_parameters(loaded, seed, num_samples, size, oracle_version())
    arrow_schema(loaded)  # evaluates the base once: fails here, before any write
    lock = hold_lock(local, what=f"dataset {out}") if local is not None else (
        contextlib.nullcontext())  # fmt: skip
    try:
        with lock:
            return _sample_parts_locked(loaded, loc, out, params, backend=backend,
                                        workers=workers, resume=resume, address=address,
                                        progress=progress)  # fmt: skip
    except OSError as exc:
        raise _kept_error(exc, out, _recorded(loc, PARTS_MANIFEST), out) from None


def _sample_parts_locked(loaded: DesignSpace, loc: Location, out: str, params: dict[str, Any],
                         *, backend: str, workers: int, resume: bool, address: str | None,
                         progress: Progress | None) -> SampleResult:  # fmt: skip
    num_samples, size = params["num_samples"], params["chunk_size"]
    chunks = plan_chunks(num_samples, size)
    manifest = loc.read_manifest(PARTS_MANIFEST)
    if manifest is not None and not resume:
        if manifest.get("complete"):
            raise ConfigError(f"{out} holds a finished dataset; delete it to sample again "
                              "(--resume keeps it when the inputs are the same).")  # fmt: skip
        raise ConfigError(f"{out} holds an interrupted run; pass --resume to continue it, or "
                          "delete it.")  # fmt: skip
    from pyarrow import fs

    created = loc.kind() == "none"
    if manifest is None and not created and loc.filesystem.get_file_info(
            fs.FileSelector(loc.root)):  # fmt: skip
        raise ConfigError(f"{out}: a folder that holds no deepflow dataset; give a new or "
                          "empty folder.")  # fmt: skip
    done = loc.finished_chunks(params, PARTS_MANIFEST) if manifest is not None else {}
    head = {"manifest_format": MANIFEST_FORMAT, "layout": "parts", **params,
            "num_chunks": len(chunks)}  # fmt: skip

    def record(complete: bool) -> None:
        loc.write_manifest(
            {
                **head,
                "complete": complete,
                "chunks": dict(sorted(done.items(), key=lambda kv: int(kv[0]))),
            }
        )

    t0 = time.perf_counter()
    pending = [c for c in chunks if str(c[0]) not in done]
    resumed = rows_done = sum(int(e["rows"]) for e in done.values())
    if progress is not None:
        progress(rows_done, num_samples)
    job = _Job(text=loaded.text, file=loaded.file, base_dir=loaded.base_dir,
               seed=params["seed"], num_samples=num_samples,
               oracle_version=params["oracle_version"],
               config_path=os.environ.get("DEEPFLOW_CONFIG_PATH", ""),
               metadata=dataset_metadata(loaded, params))  # fmt: skip
    workers = min(workers, max(len(pending), 1))
    try:
        loc.filesystem.create_dir(loc.root, recursive=True)
        record(False)
        results: Iterable[Written] = (
            () if not pending
            else _run_ray(job, pending, workers, address, loc.uri) if backend == "ray"
            else _run_local_parts(job, pending, workers, loc.uri)
        )  # fmt: skip
        sizes = {index: stop - start for index, start, stop in chunks}
        with _closing(results):
            for index, rows, sha, feasible in results:
                if rows != sizes[index]:
                    raise DeepflowError(f"chunk {index}: its worker wrote {rows} rows of "
                                        f"{sizes[index]}.")  # fmt: skip
                done[str(index)] = {"rows": rows, "feasible": feasible, "sha256": sha}
                record(False)
                rows_done += rows
                if progress is not None:
                    progress(rows_done, num_samples)
        record(True)
    except BaseException:
        if created and not done:  # nothing to resume: no folder left behind
            with contextlib.suppress(OSError):
                loc.filesystem.delete_dir(loc.root)
        raise
    return SampleResult(path=out, num_rows=num_samples,
                        num_feasible=sum(int(e["feasible"]) for e in done.values()),
                        num_chunks=len(chunks), resumed_rows=resumed,
                        seconds=time.perf_counter() - t0)  # fmt: skip


def _run_local_parts(job: _Job, chunks: list[Chunk], workers: int,
                     parts: str) -> Iterator[Written]:  # fmt: skip
    """The chunks on local processes (or this one) that write their parts themselves."""
    if workers == 1 or len(chunks) == 1:
        for chunk in chunks:
            yield compute_chunk_to(job, *chunk, parts)
        return
    from joblib import Parallel, delayed

    parallel = Parallel(n_jobs=workers, backend="loky", batch_size=1,
                        return_as="generator_unordered", initializer=_die_with_parent,
                        initargs=(os.getpid(),))  # fmt: skip
    yield from parallel(delayed(compute_chunk_to)(job, *c, parts) for c in chunks)


@contextlib.contextmanager
def _forget_if_nothing_done(parts: Path, done: dict[str, Any]) -> Iterator[None]:
    """A run that fails before any chunk is recorded leaves no parts folder (it would block
    the next run and holds nothing to resume)."""
    try:
        yield
    except BaseException:
        if not done:
            shutil.rmtree(parts, ignore_errors=True)
        raise


@contextlib.contextmanager
def _closing(results: Iterable[Any]) -> Iterator[None]:
    """Close a backend's result generator however the loop ends, so that its worker pool
    (joblib/loky, Ray) shuts down with the run instead of computing on."""
    try:
        yield
    finally:
        close = getattr(results, "close", None)
        if close is not None:
            close()


def _finished(out: Path, params: dict[str, Any]) -> bool:
    """Whether ``out`` already is the dataset these parameters describe (resume is a no-op)."""
    if not out.is_file():
        return False
    try:
        meta = read_metadata(out)
    except ConfigError:
        return False
    keys = ("space_sha256", "seed", "num_samples", "sampler", "oracle_version")
    return all(meta.get(k) == params[k] for k in keys)


def _count_true(column: pa.ChunkedArray) -> int:
    """True values of a boolean column (without pyarrow.compute or to_numpy, whose imports,
    pandas for the latter, cost a fresh process up to a second)."""
    return sum(int(chunk.true_count) for chunk in column.chunks)


def _count_feasible(path: Path) -> int:
    column = pq.ParquetFile(path).read(columns=["feasible"]).column("feasible")
    return _count_true(column)


def dataset_metadata(space: DesignSpace, params: dict[str, Any]) -> dict[bytes, bytes]:
    """The file metadata of a dataset of ``space`` sampled with ``params``."""
    return file_metadata({
        "dataset_format": DATASET_FORMAT,
        "space_yaml": space.text,
        "space_file": Path(space.file).name,
        "space_sha256": space.sha256,
        "seed": params["seed"],
        "num_samples": params["num_samples"],
        "sampler": space.sampler,
        "oracle_version": params["oracle_version"],
        "variables": [v.describe() for v in space.variables],
        "versions": package_versions(),
    })  # fmt: skip


class _Assembly:
    """The final file, written in chunk order while the chunks arrive (so that little is
    left to write once the last one is in) into a temporary file renamed into place."""

    def __init__(self, space: DesignSpace, parts: Path, chunks: list[Chunk], schema: pa.Schema,
                 params: dict[str, Any]) -> None:  # fmt: skip
        meta = dataset_metadata(space, params)
        self._parts = parts
        self._order = [index for index, _, _ in chunks]
        self._next = 0
        self._schema = schema
        self._meta = meta
        self._tmp = parts / f"assembled-{os.getpid()}.parquet"
        self._group_rows = space.chunk_size  # rows per row group, whatever the chunk size
        self._space_text = space.text
        self._held: list[pa.Table] = []
        self._writer = pq.ParquetWriter(self._tmp, schema.with_metadata(meta),
                                        **write_options(schema))  # fmt: skip
        self._finished = False
        self.feasible = 0

    def __enter__(self) -> _Assembly:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._finished:  # an error: drop the partial file
            self._writer.close()
            self._tmp.unlink(missing_ok=True)

    def append_ready(self, done: dict[str, Any], index: int = -1,
                     data: pa.Table | bytes = b"") -> None:  # fmt: skip
        """Append the chunks that are done and next in order; ``data``: chunk ``index``, in
        hand (table or Parquet bytes; the others are read back from their part files)."""
        while self._next < len(self._order) and str(self._order[self._next]) in done:
            k = self._order[self._next]
            if k == index and isinstance(data, pa.Table):
                table = data
            else:  # (ParquetFile.read: read_table would import pandas for its metadata)
                held = k == index and isinstance(data, bytes) and data
                source = pa.BufferReader(data) if held else _chunk_path(self._parts, k)
                table = pq.ParquetFile(source).read()
            if not table.schema.equals(self._schema):
                raise DeepflowError(f"chunk {k}: columns differ from the space's schema.")
            self.feasible += _count_true(table.column("feasible"))
            self._held.append(table.replace_schema_metadata(self._meta))
            self._write_groups(final=False)
            self._next += 1

    def _write_groups(self, *, final: bool) -> None:
        """Write the rows held as row groups of the space's ``chunk_size`` (the rest, too,
        when ``final``), each one contiguous array per column."""
        held = sum(t.num_rows for t in self._held)
        if held < self._group_rows and not (final and held):
            return
        rows = pa.concat_tables(self._held).combine_chunks()
        start = 0
        while rows.num_rows - start >= self._group_rows or (final and start < rows.num_rows):
            self._writer.write_table(rows.slice(start, self._group_rows),
                                     row_group_size=self._group_rows)  # fmt: skip
            start += self._group_rows
        self._held = [rows.slice(start)] if start < rows.num_rows else []

    def finish(self, out: Path) -> int:
        """Close the file, rename it to ``out``; the number of feasible rows."""
        if self._next != len(self._order):
            raise DeepflowError(f"chunk {self._order[self._next]} is missing.")  # pragma: no cover
        self._write_groups(final=True)
        self._writer.close()
        self._finished = True
        # The space's sidecar first, so that the dataset never appears without it.
        write_atomic(sidecar_path(out), self._space_text.encode("utf-8"))
        os.replace(self._tmp, out)
        return self.feasible

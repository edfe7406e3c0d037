"""Parquet datasets: provenance, file metadata, atomic writes, loading and X/Y arrays.

Columns (contract): inputs ``x_<name>``, outputs ``y_<name>`` (units in the names),
constraints ``c_<name>`` (<= 0 feasible), ``feasible`` (bool), provenance ``oracle_version``,
``space_sha256``, ``seed``, ``sample_index``; one row per design, in ``sample_index`` order.
File metadata (``deepflow.*`` keys) holds the space YAML, the run's parameters, the variables
and the package versions.

The space also travels in a sidecar, ``<file>.space.yaml`` (the space YAML verbatim, written
just before the Parquet file is renamed into place), so a dataset that pandas, polars or
duckdb filtered and saved again, which drops the file metadata, still loads: the metadata is
rebuilt from the sidecar (or a ``space=`` file: the sidecar or the space YAML itself) and the
provenance columns, after checking that the space's hash is the rows' ``space_sha256``.
"""

from __future__ import annotations

import io
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numpy.typing import NDArray

from deepflow import __version__
from deepflow.errors import ConfigError
from deepflow.oracle.version import oracle_version

__all__ = [
    "DATASET_FORMAT",
    "PROVENANCE_COLUMNS",
    "DatasetArrays",
    "arrays",
    "load",
    "oracle_version",
    "package_versions",
    "read_metadata",
    "sidecar_path",
    "write_atomic",
]

DATASET_FORMAT = 1
PROVENANCE_COLUMNS = ("oracle_version", "space_sha256", "seed", "sample_index")
_REQUIRED_META = ("space_yaml", "space_sha256", "seed", "num_samples", "sampler",
                  "oracle_version", "variables", "versions", "dataset_format")  # fmt: skip
COMPRESSION = "zstd"


def package_versions() -> dict[str, str]:
    """Versions of Python and the packages a dataset's values depend on."""
    out = {"python": platform.python_version(), "deepflow": __version__}
    for name in ("numpy", "scipy", "pandas", "pyarrow"):
        try:
            out[name] = importlib_metadata.version(name)
        except importlib_metadata.PackageNotFoundError:  # pragma: no cover
            out[name] = "missing"
    return out


def file_metadata(fields: Mapping[str, Any]) -> dict[bytes, bytes]:
    """``deepflow.<key>`` -> text (strings verbatim, the rest as JSON)."""
    return {
        f"deepflow.{k}".encode(): (v if isinstance(v, str) else json.dumps(v)).encode("utf-8")
        for k, v in fields.items()
    }


def write_options(schema: pa.Schema, *, temporary: bool = False) -> dict[str, Any]:
    """Parquet writer options for a dataset's columns.

    zstd; float columns byte-stream-split (their bytes grouped by significance, which
    compresses well) instead of dictionary-encoded (rarely two equal floats: the dictionary
    costs time, then falls back); dictionaries for the other columns (choices, flags,
    provenance) except the distinct ``sample_index``. ``temporary``: lz4 and no column
    statistics, for the chunk files a run writes and reads back once (faster both ways).
    """
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    return {
        "compression": "lz4" if temporary else COMPRESSION,
        "write_statistics": not temporary,
        "use_dictionary": [f.name for f in schema
                           if f.name not in floats and f.name != "sample_index"],
        "column_encoding": dict.fromkeys(floats, "BYTE_STREAM_SPLIT"),
    }  # fmt: skip


def table_bytes(table: pa.Table, *, temporary: bool = False) -> bytes:
    """A table as Parquet bytes (:func:`write_options`)."""
    sink = io.BytesIO()
    pq.write_table(table, sink, **write_options(table.schema, temporary=temporary))
    return sink.getvalue()


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:  # a full disk, a signal: no half-written temporary is left
        tmp.unlink(missing_ok=True)
        raise


def sidecar_path(path: str | Path) -> Path:
    """The space sidecar of a dataset: ``<file>.space.yaml`` next to it."""
    p = Path(path)
    return p.with_name(p.name + ".space.yaml")


# ------------------------------------------------------------------------------- reading
def read_metadata(path: str | Path) -> dict[str, Any]:
    """The ``deepflow.*`` file metadata of a dataset (JSON values decoded)."""
    p = Path(path)
    _check_file(p)
    try:
        raw = pq.read_schema(p).metadata or {}
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"{path}: not a Parquet file ({exc}).") from exc
    return _decode_metadata(raw)


def _decode_metadata(raw: Mapping[bytes, bytes]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key = k.decode("utf-8", "replace")
        if not key.startswith("deepflow."):
            continue
        name = key.removeprefix("deepflow.")
        text = v.decode("utf-8", "replace")
        if name == "space_yaml" or name == "sampler" or name == "space_sha256":
            out[name] = text
            continue
        try:
            out[name] = json.loads(text)
        except json.JSONDecodeError:
            out[name] = text
    return out


def _check_file(p: Path) -> None:
    if not p.exists():
        raise ConfigError(f"{p}: no such file.")
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, not a Parquet file.")


def validate_table(table: pa.Table, name: str) -> dict[str, Any]:
    """Check a dataset table against the contract; return its decoded metadata.

    Raises:
        ConfigError: ``NAME: not a deepflow dataset: ...`` naming the missing or bad part.
    """
    meta = _decode_metadata(table.schema.metadata or {})
    bad = f"{name}: not a deepflow dataset:"
    if "space_yaml" not in meta:
        raise ConfigError(
            f"{bad} file metadata lacks deepflow.space_yaml and {sidecar_path(name).name} is "
            "not next to it; give the design space (--space FILE: the sidecar of the original "
            "file or the space YAML)."
        )
    for key in _REQUIRED_META:
        if key not in meta:
            raise ConfigError(f"{bad} file metadata lacks deepflow.{key}.")
    columns = table.column_names
    for col in ("feasible", *PROVENANCE_COLUMNS):
        if col not in columns:
            raise ConfigError(f"{bad} missing column '{col}'.")
    known = {"feasible", *PROVENANCE_COLUMNS}
    for col in columns:
        if col not in known and not col.startswith(("x_", "y_", "c_")):
            raise ConfigError(
                f"{bad} column '{col}' is none of x_*, y_*, c_*, feasible, "
                f"{', '.join(PROVENANCE_COLUMNS)}."
            )
    if not any(c.startswith("x_") for c in columns) or not any(c.startswith("y_") for c in columns):
        raise ConfigError(f"{bad} it needs x_* and y_* columns.")
    types = {f.name: f.type for f in table.schema}
    expect = {"feasible": pa.bool_(), "seed": pa.int64(), "sample_index": pa.int64()}
    for col, typ in expect.items():
        if types[col] != typ:
            raise ConfigError(f"{bad} column '{col}' must be {typ}; got {types[col]}.")
    for col in columns:
        if col.startswith(("y_", "c_")) and not pa.types.is_floating(types[col]):
            raise ConfigError(f"{bad} column '{col}' must be floating point; got {types[col]}.")
    index = table.column("sample_index").to_numpy()
    if index.size and not (np.diff(index) > 0).all():
        raise ConfigError(f"{bad} rows are not in increasing sample_index order.")
    hashes = set(table.column("space_sha256").unique().to_pylist())
    if hashes - {meta["space_sha256"]}:
        raise ConfigError(f"{bad} column space_sha256 disagrees with the file metadata.")
    return meta


def load(path: str | Path, *, validate: bool = True, space: str | Path | None = None) -> Any:
    """Load a dataset written by ``deepflow sample`` as a pandas DataFrame.

    A file without deepflow's metadata (saved again by pandas, polars, duckdb, ...) is read
    with the space of its sidecar ``<file>.space.yaml`` or of ``space``. A folder of parts
    (``sample(..., layout="parts")``: a local folder or a pyarrow URI such as ``s3://b/d``)
    is read part by part, in row order (:mod:`deepflow.datasets.parts`).

    Args:
        path: the Parquet file, or a parts folder.
        validate: check the contract's columns, types, row order and metadata.
        space: the design space of the rows when the file's metadata is gone: the sidecar of
            the original file, or the space YAML it was sampled from (default: the sidecar
            next to ``path``, if any).

    Returns:
        The DataFrame (one row per design, ``sample_index`` order). ``df.attrs["deepflow"]``
        holds the file metadata: ``space_yaml``, ``space_sha256``, ``seed``, ``num_samples``,
        ``sampler``, ``oracle_version``, ``variables`` and ``versions``.

    Raises:
        ConfigError: a missing file, not Parquet, a parts folder whose run has not finished,
            or (with ``validate``) not a dataset.

    Example:
        >>> df = load("data.parquet")                      # doctest: +SKIP
        >>> X, Y, x_names, y_names = arrays(df, targets=["y_step_time_s"])  # doctest: +SKIP
    """
    from deepflow.datasets.parts import is_parts, read_parts

    if is_parts(path):
        table = read_parts(path)
    else:
        p = Path(path)
        _check_file(p)
        try:
            table = pq.read_table(p)
        except (pa.ArrowInvalid, OSError) as exc:
            raise ConfigError(f"{path}: not a Parquet file ({exc}).") from exc
    table = _with_space(table, str(path), space)
    meta = validate_table(table, str(path)) if validate else _decode_metadata(
        table.schema.metadata or {})  # fmt: skip
    df = table.to_pandas()
    df.attrs["deepflow"] = meta
    return df


def _with_space(table: pa.Table, name: str, space: str | Path | None) -> pa.Table:
    """``table`` with its deepflow metadata: its own, else rebuilt from a space file.

    Columns a DataFrame library adds for its index (pandas' ``__index_level_0__``) are dropped.

    Raises:
        ConfigError: the space file is missing or invalid, or not the rows' space.
    """
    index_columns = [c for c in table.column_names if c.startswith("__index_level_")]
    table = table.drop_columns(index_columns) if index_columns else table
    own = _decode_metadata(table.schema.metadata or {})
    if space is None and "space_yaml" in own:
        return table
    source = Path(space) if space is not None else sidecar_path(name)
    if space is None and not source.is_file():
        return table  # validate_table names what is missing
    if not source.is_file():
        raise ConfigError(f"{source}: no such file (the design space of {name}).")
    from deepflow.datasets.space import space_from_text

    text = source.read_text(encoding="utf-8")
    loaded = space_from_text(text, file=str(source), base_dir=source.resolve().parent)
    if "space_sha256" in table.column_names:
        hashes = set(table.column("space_sha256").unique().to_pylist())
        if hashes - {loaded.sha256}:
            theirs = ", ".join(sorted(str(h)[:12] for h in hashes))
            raise ConfigError(
                f"{name}: its rows come from design space {theirs}, but {source} is space "
                f"{loaded.sha256[:12]}; give the space the rows were sampled from."
            )

    def single(column: str, default: Any) -> Any:
        if column not in table.column_names:
            return default
        values = table.column(column).unique().to_pylist()
        return values[0] if len(values) == 1 else default

    rebuilt = {
        "dataset_format": DATASET_FORMAT,
        "space_yaml": loaded.text,
        "space_file": source.name,
        "space_sha256": loaded.sha256,
        "seed": single("seed", None),
        "num_samples": table.num_rows,
        "sampler": loaded.sampler,
        "oracle_version": single("oracle_version", ""),
        "variables": [v.describe() for v in loaded.variables],
        "versions": {},
        "space_source": str(source),
    }
    return table.replace_schema_metadata(file_metadata(rebuilt))


@dataclass(frozen=True)
class DatasetArrays:
    """Inputs and targets as float64 arrays, with their column names."""

    X: NDArray[np.float64]
    Y: NDArray[np.float64]
    x_names: list[str]
    y_names: list[str]


def arrays(df: Any, *, targets: Sequence[str] | None = None, include_fixed: bool = False,
           feasible_only: bool = False) -> DatasetArrays:  # fmt: skip
    """X (inputs) and Y (targets) arrays for a surrogate.

    Args:
        df: a DataFrame from :func:`load`.
        targets: ``y_``/``c_`` columns to return (default: every ``y_`` column).
        include_fixed: keep inputs of ``fixed`` variables (constant columns).
        feasible_only: keep only the rows with ``feasible`` true.

    Returns:
        ``X`` of shape (n, p): numbers as they are, booleans as 0/1 and categorical strings as
        the index of the choice in the space's declared order; ``Y`` of shape (n, q).

    Raises:
        ConfigError: an unknown target column.
    """
    meta = df.attrs.get("deepflow", {})
    declared: dict[str, dict[str, Any]] = {}
    for var in meta.get("variables", []):
        for col in var.get("columns", []):
            declared[col] = var
    if feasible_only:
        df = df[df["feasible"].to_numpy(dtype=bool)]
    x_names = [c for c in df.columns if c.startswith("x_")
               and (include_fixed or declared.get(c, {}).get("type") != "fixed")]  # fmt: skip
    y_names = list(targets) if targets is not None else [
        c for c in df.columns if c.startswith("y_")]  # fmt: skip
    for t in y_names:
        if t not in df.columns or not t.startswith(("y_", "c_")):
            valid = [c for c in df.columns if c.startswith(("y_", "c_"))]
            raise ConfigError(f"unknown target column '{t}'. Valid: {', '.join(valid)}.")
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    columns = []
    for c in x_names:
        col = df[c]
        if is_bool_dtype(col.dtype) or is_numeric_dtype(col.dtype):
            columns.append(col.to_numpy(dtype=float))
        else:
            choices = declared.get(c, {}).get("choices") or sorted(col.unique())
            lookup = {v: i for i, v in enumerate(choices)}
            columns.append(np.array([lookup[v] for v in col], dtype=float))
    X = np.column_stack(columns) if columns else np.zeros((len(df), 0))
    Y = df[y_names].to_numpy(dtype=float) if y_names else np.zeros((len(df), 0))
    return DatasetArrays(X=X, Y=Y, x_names=x_names, y_names=y_names)

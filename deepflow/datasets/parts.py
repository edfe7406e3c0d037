"""A dataset as a folder of Parquet parts (``layout="parts"``), on any pyarrow filesystem.

The single-file layout has the driver assemble every row into one file (about 1.5×10⁵ rows per
second of the driver's CPU: ``docs/scaling.md``). In the parts layout nothing is assembled:
each worker writes its chunk, with the dataset's full file metadata, straight into the output
folder, a local path or a pyarrow URI (``file://``, ``s3://``, ``gs://``, ``hdfs://``), and
the driver keeps only the manifest::

    OUT/                      a Parquet dataset folder (pyarrow, pandas, polars, duckdb read it)
      chunk-000000.parquet    rows 0 .. R-1 (R = --chunk-rows), one row group, zstd
      chunk-000001.parquet    ...
      _deepflow.json          the run's parameters, each part's rows, feasible rows and SHA-256,
                              and ``complete`` (true once every part is written)

Readers skip ``_``-prefixed files (pyarrow's dataset discovery; a ``*.parquet`` glob for polars
and duckdb). The rows are those of the single-file layout with the same seed, in the same
order; the files depend on R (one part per chunk). :func:`read_parts` refuses a folder whose
run has not finished; ``sample(..., resume=True)`` continues it.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from deepflow.errors import ConfigError

__all__ = ["MANIFEST", "Location", "is_parts", "read_parts"]

#: The manifest of a parts folder (``_``: dataset readers skip it).
MANIFEST = "_deepflow.json"


@dataclass(frozen=True)
class Location:
    """A folder on a pyarrow filesystem.

    Attributes:
        uri: what workers re-open it from: an absolute local path or the URI as given.
        filesystem: the ``pyarrow.fs`` filesystem.
        root: the folder's path on it.
    """

    uri: str
    filesystem: Any
    root: str

    @classmethod
    def of(cls, where: str | Path) -> Location:
        """The folder ``where``: a local path (made absolute) or a pyarrow URI."""
        from pyarrow import fs

        text = str(where)
        if "://" in text:
            try:
                filesystem, root = fs.FileSystem.from_uri(text)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ConfigError(f"{text}: not a filesystem URI pyarrow opens ({exc}).") from None
            return cls(text, filesystem, root.rstrip("/"))
        absolute = str(Path(text).resolve())
        return cls(absolute, fs.LocalFileSystem(), absolute)

    @property
    def local(self) -> Path | None:
        """The folder as a local path, if it is one."""
        from pyarrow import fs

        return Path(self.root) if isinstance(self.filesystem, fs.LocalFileSystem) else None

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def kind(self) -> str:
        """``dir``, ``file`` or ``none``: what is at the folder's place."""
        from pyarrow import fs

        info = self.filesystem.get_file_info(self.root)
        return {fs.FileType.Directory: "dir", fs.FileType.File: "file"}.get(info.type, "none")

    def read(self, name: str) -> bytes | None:
        """The bytes of the file ``name`` in the folder; None when it is not there."""
        from pyarrow import fs

        if self.filesystem.get_file_info(self.path(name)).type != fs.FileType.File:
            return None
        with self.filesystem.open_input_stream(self.path(name)) as fh:
            data: bytes = fh.read()
        return data

    def write(self, name: str, data: bytes) -> None:
        """Write the file ``name`` through a temporary name and a move (no reader sees a
        half-written file; a failure leaves no temporary)."""
        final = self.path(name)
        tmp = self.path(f".{name}.tmp-{socket.gethostname()}-{os.getpid()}")
        try:
            with self.filesystem.open_output_stream(tmp) as fh:
                fh.write(data)
            self.filesystem.move(tmp, final)
        except BaseException:
            try:
                self.filesystem.delete_file(tmp)
            except OSError:
                pass
            raise

    def read_manifest(self, name: str = MANIFEST) -> dict[str, Any] | None:
        """The folder's manifest (JSON file ``name``), None without one."""
        data = self.read(name)
        if data is None:
            return None
        try:
            manifest: dict[str, Any] = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{self.path(name)}: unreadable manifest ({exc}); delete {self.uri} to start over."
            ) from None
        return manifest

    def finished_chunks(self, expected: dict[str, Any], name: str = MANIFEST
                        ) -> dict[str, dict[str, Any]]:  # fmt: skip
        """The chunks an earlier run recorded in the manifest ``name`` whose part files are
        there with the recorded SHA-256; ``{}`` without a manifest.

        Raises:
            ConfigError: the earlier run had other parameters than ``expected``.
        """
        manifest = self.read_manifest(name)
        if manifest is None:
            return {}
        for key, value in expected.items():
            if manifest.get(key) != value:
                raise ConfigError(
                    f"{self.path(name)}: cannot resume: {key} was {manifest.get(key)!r}, now "
                    f"{value!r}; delete {self.uri} or run with the same inputs."
                )
        done: dict[str, dict[str, Any]] = {}
        for key, entry in manifest.get("chunks", {}).items():
            data = self.read(part_name(int(key)))
            if data is not None and sha256(data) == entry.get("sha256"):
                done[key] = entry
        return done

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        self.write(MANIFEST, json.dumps(manifest, indent=1).encode("utf-8"))


def part_name(index: int) -> str:
    """The file of chunk ``index`` (the name the single-file layout's parts folder uses)."""
    return f"chunk-{index:06d}.parquet"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def is_parts(path: str | Path) -> bool:
    """Whether ``path`` names a parts folder: a URI, or a local folder with a manifest."""
    text = str(path)
    return "://" in text or (Path(text) / MANIFEST).is_file()


def read_parts(where: str | Path) -> pa.Table:
    """The rows of a finished parts folder, in chunk order, with the dataset's metadata.

    Raises:
        ConfigError: no manifest, or a run that has not finished (with how far it got).
        OSError: the filesystem fails.
    """
    loc = Location.of(where)
    manifest = loc.read_manifest()
    if manifest is None:
        raise ConfigError(f"{where}: no such dataset ({MANIFEST} is missing).")
    chunks = manifest.get("chunks", {})
    if not manifest.get("complete"):
        raise ConfigError(
            f"{where}: holds an interrupted run ({len(chunks)} of {manifest.get('num_chunks')} "
            "parts written); run deepflow sample again with --resume to finish it."
        )
    tables = []
    for key in sorted(chunks, key=int):
        with loc.filesystem.open_input_file(loc.path(part_name(int(key)))) as fh:
            tables.append(pq.ParquetFile(fh).read())
    return pa.concat_tables(tables)

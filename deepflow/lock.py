"""Lock files: one running deepflow process per output (a dataset, a result folder).

``<output>.lock`` is created exclusively and holds the process id and command line of its
holder; it is removed when the holder finishes. A second process is refused with a message
naming the holder; a lock whose process is gone (killed with SIGKILL) is taken over.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from deepflow.errors import LockedError

__all__ = ["hold_lock", "lock_path"]


def lock_path(output: str | Path) -> Path:
    """The lock file of ``output``: ``<output>.lock`` next to it."""
    p = Path(output)
    return p.with_name(p.name + ".lock")


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _holder(path: Path) -> tuple[int, str]:
    try:
        pid_text, _, command = path.read_text(encoding="utf-8").partition("\n")
        return int(pid_text), command.strip()
    except (OSError, ValueError):  # vanished, or half-written by a process killed at once
        return -1, ""


@contextlib.contextmanager
def hold_lock(output: str | Path, *, what: str) -> Iterator[Path]:
    """Hold the lock of ``output`` for the ``with`` block.

    Args:
        output: the file or folder the lock protects.
        what: how messages name it, e.g. ``dataset out.parquet``.

    Raises:
        LockedError: a live process holds it: ``dataset out.parquet is being written by
            process 4242 (deepflow sample ...); wait for it to finish or stop it (lock
            out.parquet.lock).``
        OSError: the lock cannot be created (a read-only folder, ...).
    """
    path = lock_path(output)
    me = f"{os.getpid()}\n{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}\n"
    for _attempt in range(3):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pid, command = _holder(path)
            if pid != os.getpid() and _alive(pid):
                shown = f" ({command})" if command else ""
                raise LockedError(
                    f"{what} is being written by process {pid}{shown}; wait for it to "
                    f"finish or stop it (lock {path})."
                ) from None
            path.unlink(missing_ok=True)  # its process is gone: a stale lock
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(me)
        break
    else:  # pragma: no cover - three processes racing for a stale lock
        raise LockedError(f"{what}: cannot take the lock {path}; try again.")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)

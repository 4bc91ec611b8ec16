"""Files rlscope writes: atomically (a reader sees the old file or the new one, never half of
either), into output directories that belong to one run and one writer at a time."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlscope.errors import RlscopeError

__all__ = ["write_atomic", "write_json_atomic", "read_json", "last_line", "output_lock", "claim_output", "LOCK_FILE",
           "CorruptFileWarning"]


def write_atomic(path: Path, data: str | bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide results from other users of a shared box
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


class CorruptFileWarning(UserWarning):
    """A file rlscope wrote could not be read back; what it held is treated as absent."""


def read_json(path: Path) -> Any:
    """Parse a JSON file, or return None when it is missing. One that cannot be read or parsed
    (damaged after it was written: writes are atomic) is also None, with a warning naming it, so
    that what depends on it is redone rather than read wrong."""
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        warnings.warn(f"{path}: unreadable ({err}); treated as absent", CorruptFileWarning, stacklevel=2)
        return None


def last_line(log: Path) -> str:
    """The last non-blank line of a log (at most 200 characters): why a run stopped."""
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1][:200] if lines else "no output"


LOCK_FILE = ".rlscope.lock"


@contextlib.contextmanager
def output_lock(directory: Path, command: str, wait: bool = False) -> Iterator[None]:
    """Hold ``directory``'s lock while writing into it: a second rlscope writing there at the same
    time is refused, naming the first (``wait``: waits for it instead). The lock is the kernel's
    (``flock``), so a writer that dies lets go of it at once and a stale lock file means nothing."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            raise RlscopeError(f"{directory} is being written by {holder}; wait for it to finish, "
                               f"or write to another directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"`{command}` (pid {os.getpid()}, since {time.strftime('%H:%M:%S')})\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def claim_output(directory: Path, is_ours: Callable[[Path], bool], *, force: bool, append: bool, what: str,
                 append_flag: str = "--append") -> None:
    """Make sure ``directory`` holds nothing of another run before one writes there.

    An empty or absent directory is taken as it is. One holding an earlier run is refused, with
    the fix: ``force`` removes what rlscope wrote there (the entries ``is_ours`` accepts) and
    ``append`` keeps it, to add to it. Entries that are not rlscope's are the user's and are never
    removed: a directory holding any is refused even with ``force``."""
    if not directory.exists():
        return
    if not directory.is_dir():
        raise RlscopeError(f"{directory} is a file, not a directory; give --output a directory path")
    present = [p for p in directory.iterdir() if p.name != LOCK_FILE]
    if not present or append:
        return
    foreign = sorted(p.name for p in present if not is_ours(p))
    if foreign:
        raise RlscopeError(f"{directory} holds files rlscope did not write ({', '.join(foreign[:5])}"
                           f"{', ...' if len(foreign) > 5 else ''}); give --output a new or empty directory")
    if not force:
        raise RlscopeError(f"{directory} already holds {what}; add --force to replace it, {append_flag} to add to "
                           f"it, or give --output a new directory")
    for path in present:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()

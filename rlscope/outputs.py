"""Output directories: each belongs to one run and is written by one rlscope at a time.

``output_lock`` keeps a second writer out while one writes; ``claim_output`` refuses a directory
that holds an earlier run unless asked to replace it or add to it, and never removes what rlscope
did not write. Claim a directory only while holding its lock, so that ``--force`` cannot remove
what another rlscope is writing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rlscope.errors import RlscopeError

__all__ = ["LOCK_FILE", "output_lock", "claim_output", "only_files"]

LOCK_FILE = ".rlscope.lock"


@contextlib.contextmanager
def output_lock(directory: Path, command: str, wait: bool = False) -> Iterator[None]:
    """Hold ``directory``'s lock while writing into it: a second rlscope writing there at the same
    time is refused, naming the first (``wait``: waits for it instead). The lock is the kernel's
    (``flock``), so a writer that dies lets go of it at once and a stale lock file means nothing."""
    if directory.exists() and not directory.is_dir():
        raise RlscopeError(f"{directory} is a file, not a directory; give --output a directory path")
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


def only_files(directory: Path, suffixes: tuple[str, ...]) -> bool:
    """Whether ``directory`` holds files with these suffixes and nothing else (what rlscope writes
    into a folder of its own, e.g. tables or figures), so that ``--force`` may remove it."""
    return all(p.is_file() and p.suffix in suffixes for p in directory.iterdir())

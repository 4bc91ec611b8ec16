"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = ["write_atomic", "write_json_atomic", "read_json", "last_line", "CorruptFileWarning"]


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

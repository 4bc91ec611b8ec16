"""Errors a user can cause and fix; the CLI prints them as one line and exits with code 2."""

import errno
from typing import Any

__all__ = ["RlscopeError", "ManifestError", "WorkloadError", "ResultsError", "ClaimError", "SkipRun", "TraceError",
           "NestingError", "os_error_message", "schema_problem", "SKIPPED_EXIT"]

# The exit code of a workload's own process (a training script, a profiled loop) that cannot run
# here, its SkipRun reason on the last line of its stderr: the harness records the run as skipped.
SKIPPED_EXIT = 3


class RlscopeError(Exception):
    """Base class: the message says what is wrong, where, and how to fix it."""


class ManifestError(RlscopeError):
    """A manifest file is missing, not YAML, or does not match the schema."""


class WorkloadError(RlscopeError):
    """A manifest names a workload that cannot be imported or called."""


class ResultsError(RlscopeError):
    """An experiment directory lacks the files a later stage needs."""


class ClaimError(RlscopeError):
    """A manifest's claim asks its results for something they do not have (a column, one row)."""


class TraceError(RlscopeError):
    """A trace directory is missing, corrupt, or of another schema version."""


class NestingError(RlscopeError):
    """Operations were closed in another order than they were opened."""


class SkipRun(Exception):
    """Raised by a workload that cannot run here (e.g. it needs a GPU); the run is recorded as skipped."""


_OS_FIXES = {
    errno.ENOSPC: "no space left on the device holding it; free some space, or write somewhere else (--output)",
    errno.EDQUOT: "disk quota exceeded; free some space, or write somewhere else (--output)",
    errno.EACCES: "permission denied; write somewhere you may (--output), or fix the permissions",
    errno.EPERM: "operation not permitted; write somewhere you may (--output), or fix the permissions",
    errno.EROFS: "the file system is read-only; write somewhere else (--output)",
    errno.ENOTDIR: "a part of this path is a file, not a directory; choose another path",
    errno.EISDIR: "it is a directory, where a file was expected; choose another path",
    errno.EEXIST: "it already exists as something else; choose another path",
    errno.ENOENT: "no such file or directory; check the path",
    errno.ENAMETOOLONG: "the path is too long; choose a shorter one",
}


def os_error_message(err: OSError) -> str:
    """An operating-system error as one line: the path, what went wrong, and the fix."""
    path = f"{err.filename}" + (f" -> {err.filename2}" if err.filename2 else "") if err.filename else "a file"
    fix = _OS_FIXES.get(err.errno or -1)
    return f"{path}: {fix}" if fix else f"{path}: {err.strerror or err}"


def schema_problem(err: Any) -> str:
    """The first problem a file's schema (pydantic) found, in one phrase: the field (its path), what
    it should be, and what was found there. ``err``: a ``pydantic.ValidationError``."""
    first = err.errors(include_url=False)[0]
    field = ".".join(str(p) for p in first["loc"] if isinstance(p, int) or not any(c in p for c in "[]("))
    message = str(first["msg"]).replace("Input should be", "should be").removeprefix("Value error, ")
    if not field:
        return message
    found = first.get("input")
    shown = "" if isinstance(found, (dict, list)) else f", found {found!r}"
    return f"field {field!r} {message}{shown}" if message.startswith("should") else f"field {field!r}: {message}{shown}"

"""Errors a user can cause and fix; the CLI prints them as one line and exits with code 2."""

__all__ = ["RlscopeError", "ManifestError", "WorkloadError", "ResultsError", "SkipRun", "TraceError", "NestingError"]


class RlscopeError(Exception):
    """Base class: the message says what is wrong, where, and how to fix it."""


class ManifestError(RlscopeError):
    """A manifest file is missing, not YAML, or does not match the schema."""


class WorkloadError(RlscopeError):
    """A manifest names a workload that cannot be imported or called."""


class ResultsError(RlscopeError):
    """An experiment directory lacks the files a later stage needs."""


class TraceError(RlscopeError):
    """A trace directory is missing, corrupt, or of another schema version."""


class NestingError(RlscopeError):
    """Operations were closed in another order than they were opened."""


class SkipRun(Exception):
    """Raised by a workload that cannot run here (e.g. it needs a GPU); the run is recorded as skipped."""

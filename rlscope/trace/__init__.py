"""Trace bundles: one directory per profiled run, one file set per process inside it."""

from rlscope.trace.reader import ProcessTrace, TraceWarning, read_process, read_trace
from rlscope.trace.schema import SCHEMA_VERSION, Category, Kind
from rlscope.trace.writer import TraceWriter

__all__ = ["SCHEMA_VERSION", "Category", "Kind", "ProcessTrace", "TraceWarning", "TraceWriter", "read_process",
           "read_trace"]

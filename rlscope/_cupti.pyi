"""CUPTI activity collector (libcupti loaded at run time); see csrc/cupti/module.cpp.

``rlscope.collect.cupti`` drives it; ``rlscope.calibrate.residual`` uses the timed probe calls.
"""

from typing import Any

import numpy as np
import numpy.typing as npt

def load(candidates: list[str]) -> str:
    """Open libcupti (reusing a copy already loaded in the process); returns the path in use."""

def loaded() -> bool: ...
def version() -> int:
    """CUPTI API version of the loaded libcupti."""

def timestamp() -> int:
    """CUPTI's current timestamp (CLOCK_MONOTONIC ns once a tracer registered its clock)."""

def crc32(data: bytes) -> int:
    """The CRC-32 that gpu.rows.crc records carry (zlib's; the reader checks them with zlib.crc32)."""

def decode(buffers: list[bytes], kernel_names: list[str]) -> tuple[npt.NDArray[np.int64], list[str], dict[str, int]]:
    """Decode recorded activity buffers: (N x 9 int64 rows as ``ROW_FIELDS``, names, stats with
    ``records``, ``incomplete``, ``other_kinds``)."""

def probe_open(cudart_candidates: list[str]) -> str:
    """Make the first GPU's primary context current; returns the libcudart path timed too ("" if none)."""

def probe_calls(calls: int) -> dict[str, float]:
    """Nanoseconds per call of each probe (``driver_query``, ``driver_launch``, ``runtime_query``)."""

class Tracer:
    def __init__(self, rows_path: str, names_path: str, chunk_rows: int = 65536, buffer_bytes: int = 8388608,
                 dump_dir: str = "") -> None: ...
    def start(self, runtime: bool = True, driver: bool = True, gpu: bool = True, sync: bool = False,
              untraced_apis: list[str] = ..., api_callbacks: bool = False) -> dict[str, Any]:
        """Attach and enable the layers, API calls through CUPTI callbacks with ``api_callbacks``
        (else as activity records): ``{"ok": True, "own_clock"}``, or ``{"ok": False, "code",
        "error", "step", "subscriber"}`` naming the CUPTI call that failed."""
    def record(self, api: bool, gpu: bool) -> None:
        """Stop or resume recording CUDA API calls and GPU activities (alternating windows)."""
    def stop(self) -> dict[str, Any]:
        """Flush, write the last rows and ask CUPTI to detach; returns ``stats()``."""
    def abandon(self) -> None:
        """Forget the tracer without flushing (a forked child's copy)."""
    def stats(self) -> dict[str, Any]:
        """Counts (records, incomplete, other_kinds, dropped, buffers, rows_written, untraced_api_ids,
        detaches), ``kinds_on``, ``cupti_attached``, ``detach_pending``, ``own_clock``,
        ``buffer_processing``."""
    def hooks(self) -> Any:
        """Capsule of the external-correlation push/pop functions."""

class Floor:
    """A bare CUPTI client: the tracer's GPU activity kinds, buffers freed unread, and with ``api``
    the runtime and driver API callbacks enabled doing nothing (bench/gpu_overhead.py's floor)."""
    def __init__(self, buffer_bytes: int = 8388608) -> None: ...
    def start(self, api: bool, untraced_apis: list[str] = ...) -> dict[str, Any]:
        """Attach and enable: ``{"ok": True}``, or ``{"ok": False, "error", "step"}``."""
    def stop(self) -> dict[str, Any]:
        """Every kind off, buffers flushed and freed, CUPTI detached: ``{buffers, bytes, dropped, cupti_attached}``."""

"""Which machine this is, for results that hold only on the machine that measured them
(calibrations, their stored stages).

A host name is not enough: lent and cloud machines are often all called the same (every lent
GPU host here is ``vm``), and a calibration carried from one to another would be reused as if it
had been measured there. The identity is the host name with a short hash of the host name, the
OS's machine id (``/etc/machine-id``, written once per installation) and the UUIDs of the
machine's NVIDIA GPUs (from the driver, where present): a cloned image with the same machine id
still has other GPUs, and a machine keeps its identity across reboots. CPU-only clones of one
image, with its machine id baked in, are not told apart.
"""

from __future__ import annotations

import functools
import hashlib
import socket
from pathlib import Path

__all__ = ["machine_identity"]

_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
_GPU_INFO = Path("/proc/driver/nvidia/gpus")


def _machine_id() -> str:
    for path in _MACHINE_ID_FILES:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text:  # an empty file (some container images) says nothing
            return text
    return ""


def _gpu_uuids() -> list[str]:
    """The NVIDIA GPUs' UUIDs, from the driver's files (``/proc/driver/nvidia/gpus/*/information``):
    read at every profiled process's start, which must not pay for initialising NVML."""
    uuids = []
    for info in sorted(_GPU_INFO.glob("*/information")):
        try:
            for line in info.read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "GPU UUID":
                    uuids.append(value.strip())
        except OSError:
            continue
    return uuids


@functools.cache
def machine_identity() -> str:
    """``host#hash``: the host name, readable, and 8 hex digits of what tells machines of one
    name apart (see the module's docstring)."""
    host = socket.gethostname()
    key = "\n".join([host, _machine_id(), *_gpu_uuids()])
    return f"{host}#{hashlib.sha256(key.encode()).hexdigest()[:8]}"

"""Which machine this is, for results that hold only on the machine that measured them
(calibrations, their stored stages).

A host name is not enough: lent and cloud machines are often all called the same (every lent
GPU host here is ``vm``), and a calibration carried from one to another would be reused as if it
had been measured there. The identity is the host name with a short hash of the host name, the
OS's machine id (``/etc/machine-id``, written once per installation) and the UUIDs of the
machine's NVIDIA GPUs (NVML, where present): a cloned image with the same machine id still has
other GPUs, and a CPU machine keeps its identity across reboots.
"""

from __future__ import annotations

import functools
import hashlib
import socket
from pathlib import Path

__all__ = ["machine_identity"]

_MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))


def _machine_id() -> str:
    for path in _MACHINE_ID_FILES:
        try:
            return path.read_text().strip()
        except OSError:
            continue
    return ""


def _gpu_uuids() -> list[str]:
    """The NVIDIA GPUs' UUIDs, in NVML's order; none without pynvml, a driver or a GPU."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVML's errors (no driver, no GPU) all mean: no GPUs to name
        return []
    try:
        uuids = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(index))
            uuids.append(uuid.decode() if isinstance(uuid, bytes) else str(uuid))
        return uuids
    except Exception:  # noqa: BLE001
        return []
    finally:
        pynvml.nvmlShutdown()


@functools.cache
def machine_identity() -> str:
    """``host#hash``: the host name, readable, and 8 hex digits of what tells machines of one
    name apart (see the module's docstring)."""
    host = socket.gethostname()
    key = "\n".join([host, _machine_id(), *_gpu_uuids()])
    return f"{host}#{hashlib.sha256(key.encode()).hexdigest()[:8]}"

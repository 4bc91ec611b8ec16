"""GPU utilisation as the driver reports it, sampled on a thread while a process is profiled.

Two numbers per GPU and sample, written to ``utilisation.csv`` beside the process's events:

- ``gpu_util_pct``: NVML ``utilization.gpu``, what nvidia-smi shows: the share of the last
  sample period in which *any* kernel was running, however few SMs it kept busy;
- ``sm_util_pct``: NVML GPM ``SM_UTIL`` (Hopper and newer): the share of SMs busy over the
  interval since the previous sample; empty where GPM is not supported.

The analysis sets them against true GPU-bound time (the union of kernel and copy intervals),
which is RL-Scope's point: for RL's tiny kernels with CPU gaps, nvidia-smi reads high while the
GPU is mostly idle.

The thread wakes every ``interval_s`` (2 s) and fetches every utilisation sample the driver took
since the last wake (``nvmlDeviceGetSamples``), each with its own time, instead of asking for the
current value ten times a second. Why: the sampler runs throughout a profiled process, so
whatever it does to the workload is in every calibration window and measured by none, and a
thread that polls NVML often perturbs a CUDA launch-and-synchronise loop. Rare wake-ups leave
less of that, and the driver's samples come at its own rate. GPM's SM utilisation is a
difference of two snapshots, so it comes per wake.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from rlscope.nvidia import NvmlUnavailable, open_nvml
from rlscope.trace.schema import UTILISATION_FILE

__all__ = ["UtilisationSampler", "visible_nvml_indices"]

HEADER = "time_ns,device,gpu_util_pct,sm_util_pct\n"


def visible_nvml_indices(pynvml: Any) -> list[int]:
    """NVML indices of the GPUs CUDA_VISIBLE_DEVICES lets this process see (NVML sees all)."""
    count = pynvml.nvmlDeviceGetCount()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return list(range(count))
    out = []
    for item in (v.strip() for v in visible.split(",") if v.strip()):
        if item.isdigit():
            if int(item) < count:
                out.append(int(item))
            continue
        for i in range(count):
            uuid = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            if uuid.startswith(item) or uuid.startswith("GPU-" + item):
                out.append(i)
    return out


class UtilisationSampler:
    """Collects samples every ``interval_s`` on a daemon thread until :meth:`stop` (which
    collects the last ones)."""

    def __init__(self, directory: Path, interval_s: float = 2.0) -> None:
        self.path = directory / UTILISATION_FILE
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.meta: dict[str, Any] = {"file": UTILISATION_FILE, "status": "off"}

    def start(self) -> bool:
        try:
            pynvml = open_nvml()
        except NvmlUnavailable as why:
            self.meta.update(status="unavailable", reason=str(why))
            return False
        try:
            indices = visible_nvml_indices(pynvml)
        except pynvml.NVMLError as err:
            pynvml.nvmlShutdown()
            self.meta.update(status="unavailable", reason=f"NVML: {err}")
            return False
        self._nvml = pynvml
        self._devices = [(i, pynvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        self._gpm = {i: self._gpm_supported(h) for i, h in self._devices}
        self._file = open(self.path, "w", buffering=1)
        self._file.write(HEADER)
        self.meta.update(status="on", interval_s=self.interval_s, devices=indices,
                         gpm=[i for i, ok in self._gpm.items() if ok])
        self._thread = threading.Thread(target=self._run, name="rlscope-nvml", daemon=True)
        self._thread.start()
        return True

    def stop(self) -> dict[str, Any]:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._file.close()
            self._nvml.nvmlShutdown()
        return self.meta

    def _gpm_supported(self, handle: Any) -> bool:
        try:
            return bool(self._nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
        except (self._nvml.NVMLError, AttributeError):
            return False

    def _run(self) -> None:
        nvml = self._nvml
        seen = {i: self._driver_now_us(h) for i, h in self._devices}  # driver samples taken before are not ours
        previous = {i: self._gpm_sample(h) for i, h in self._devices if self._gpm[i]}
        stopping = False
        while not stopping:
            stopping = self._stop.wait(self.interval_s)
            lines = []
            for i, handle in self._devices:
                lines += self._utilisation(i, handle, seen)
                if i in previous:
                    sample = self._gpm_sample(handle)
                    if sample is not None and previous[i] is not None:
                        lines.append(f"{time.perf_counter_ns()},{i},,{self._sm_util(previous[i], sample)}\n")
                        nvml.nvmlGpmSampleFree(previous[i])
                    previous[i] = sample
            self._file.write("".join(lines))
        for sample in previous.values():
            if sample is not None:
                nvml.nvmlGpmSampleFree(sample)

    def _driver_now_us(self, handle: Any) -> int:
        """Now on the clock of the driver's sample times (µs), which NVML documents only as "CPU
        timestamp": the wall clock or CLOCK_MONOTONIC, whichever its newest sample is nearer to
        (the wall clock where it has none). Sets ``self._offset_ns``, that clock -> perf_counter_ns."""
        wall, monotonic = time.time_ns(), time.monotonic_ns()
        newest = 0
        try:
            _, samples = self._nvml.nvmlDeviceGetSamples(handle, self._nvml.NVML_GPU_UTILIZATION_SAMPLES, 0)
            newest = max((s.timeStamp for s in samples), default=0) * 1000
        except self._nvml.NVMLError:
            pass
        on_monotonic = bool(newest) and abs(newest - monotonic) < abs(newest - wall)
        clock = monotonic if on_monotonic else wall
        self.meta["sample_clock"] = "CLOCK_MONOTONIC" if on_monotonic else "wall clock"
        self._offset_ns = time.perf_counter_ns() - clock
        return clock // 1000

    def _utilisation(self, index: int, handle: Any, seen: dict[int, int]) -> list[str]:
        """CSV lines of the driver's utilisation samples since ``seen[index]`` (µs on its clock),
        timed on perf_counter_ns's clock; the current value where the driver keeps no samples."""
        nvml = self._nvml
        try:
            _, samples = nvml.nvmlDeviceGetSamples(handle, nvml.NVML_GPU_UTILIZATION_SAMPLES, seen[index])
        except nvml.NVMLError as err:
            if getattr(err, "value", None) == nvml.NVML_ERROR_NOT_FOUND:
                return []  # none since the last wake
            self.meta["samples"] = f"current value per wake (nvmlDeviceGetSamples: {err})"
            try:
                util = nvml.nvmlDeviceGetUtilizationRates(handle).gpu
            except nvml.NVMLError:
                return []
            return [f"{time.perf_counter_ns()},{index},{util},\n"]
        offset = self._offset_ns
        lines = []
        for sample in sorted(samples, key=lambda s: s.timeStamp):
            if sample.timeStamp <= seen[index]:
                continue
            seen[index] = sample.timeStamp
            lines.append(f"{sample.timeStamp * 1000 + offset},{index},{sample.sampleValue.uiVal},\n")
        return lines

    def _gpm_sample(self, handle: Any) -> Any:
        nvml = self._nvml
        try:
            sample = nvml.nvmlGpmSampleAlloc()
        except nvml.NVMLError:
            return None
        try:
            return nvml.nvmlGpmSampleGet(handle, sample)
        except nvml.NVMLError:
            nvml.nvmlGpmSampleFree(sample)
            return None

    def _sm_util(self, first: Any, second: Any) -> str:
        nvml = self._nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1, request.sample2 = first, second
        request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError:
            return ""
        return f"{request.metrics[0].value:.2f}"

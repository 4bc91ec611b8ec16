"""Analysis tables of stored traces stay byte for byte what they were when the traces were stored:
a change that moves or reorganises analysis code must not change its results.

The traces: tests/data/traces/{numpy_cpu,torch_cuda} (tests/data/record_traces.py; the CUDA one
recorded on an H100) and the CUPTI collector's fixture; their tables: tests/data/tables/<name>/*.csv. A change
that means to change results regenerates the tables and says why in its commit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlscope.analyze import TABLES, analyze_trace, read_attributed, write_tables
from rlscope.trace.schema import Kind
from tests.conftest import REPO

TRACES = {"numpy_cpu": REPO / "tests/data/traces/numpy_cpu", "torch_cuda": REPO / "tests/data/traces/torch_cuda",
          "cupti_fixture": REPO / "tests/fixtures/cupti/trace"}


@pytest.mark.parametrize("name", sorted(TRACES))
def test_the_analysis_of_a_stored_trace_is_unchanged(tmp_path: Path, name: str) -> None:
    write_tables(analyze_trace(TRACES[name]), tmp_path)
    for table in TABLES:
        expected = (REPO / "tests/data/tables" / name / f"{table}.csv").read_bytes()
        assert (tmp_path / f"{table}.csv").read_bytes() == expected, f"{name}: {table}.csv changed"


def test_the_stored_gpu_trace_holds_work_launched_off_the_operations_threads() -> None:
    """What makes the GPU trace worth keeping: kernels whose launching thread has no operations
    (autograd's, a worker's), which attribution charges through the main thread."""
    (process,) = read_attributed(TRACES["torch_cuda"])
    events = process.events
    api_threads = set(events.loc[events["kind"] == int(Kind.CUDA_API), "tid"])
    operation_threads = set(events.loc[events["kind"] == int(Kind.OPERATION), "tid"])
    assert len(api_threads - operation_threads) >= 2

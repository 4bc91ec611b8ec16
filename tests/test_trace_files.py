"""Trace files: round trip, bounded chunks, crash-truncated files, version checks."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import rlscope
from rlscope.errors import TraceError
from rlscope.trace import SCHEMA_VERSION, TraceWarning, TraceWriter, read_process, read_trace


def write(directory: Path, n: int, chunk: int, complete: bool = True, version: int = SCHEMA_VERSION) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    writer = TraceWriter(directory / "events.arrows", chunk_events=chunk)
    for i in range(n):
        writer.record(0, i, i + 1, f"op{i % 5}")
        assert writer.pending < chunk, "the buffer never holds more than one chunk"
    writer.close()
    meta = {"schema_version": version, "process": "p", "pid": 1, "start_ns": 0, "end_ns": n,
            "complete": complete, "main_tid": 0, "events": writer.events_written}
    (directory / "meta.json").write_text(json.dumps(meta))


def test_round_trip_keeps_names_across_chunks(tmp_path: Path) -> None:
    write(tmp_path / "p.1", 1000, chunk=64)
    events = read_process(tmp_path / "p.1").events
    ops = events[events["kind"] == 0]
    assert len(ops) == 1000
    assert ops["name"].astype(str).tolist()[:6] == ["op0", "op1", "op2", "op3", "op4", "op0"]
    assert (ops["end_ns"] - ops["start_ns"] == 1).all()


def test_each_write_is_recorded_on_the_writing_thread(tmp_path: Path) -> None:
    import threading

    from rlscope.trace import Kind

    write(tmp_path / "p.1", 1000, chunk=64)
    events = read_process(tmp_path / "p.1").events
    writes = events[events["kind"] == int(Kind.PROFILER_WRITE)]
    assert len(writes) >= 1000 // 64 - 1  # all but the last write, made at close
    assert (writes["tid"] == threading.get_ident()).all() and (writes["end_ns"] > writes["start_ns"]).all()
    assert set(writes["name"].astype(str)) == {"rlscope: trace write"}


def test_a_write_is_timed_from_when_its_caller_began_it(tmp_path: Path) -> None:
    """Draining the native buffers (which prepares the next buffer's memory) is part of a write."""
    from rlscope.trace import Kind

    (tmp_path / "p.1").mkdir()
    writer = TraceWriter(tmp_path / "p.1" / "events.arrows", chunk_events=64)
    writer.record(0, 1, 2, "op")
    writer.flush(started_ns=123)
    writer.close()
    (tmp_path / "p.1" / "meta.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION, "process": "p",
                                                            "pid": 1, "start_ns": 0, "end_ns": 2, "main_tid": 0,
                                                            "complete": True}))
    writes = read_process(tmp_path / "p.1").events.query(f"kind == {int(Kind.PROFILER_WRITE)}")
    assert writes["start_ns"].tolist() == [123]


def test_torn_last_chunk_is_dropped_with_a_warning(tmp_path: Path) -> None:
    write(tmp_path / "p.1", 1000, chunk=100, complete=False)
    events = tmp_path / "p.1" / "events.arrows"
    events.write_bytes(events.read_bytes()[:-50])
    # 1000 events and 10 records of writes: 10 full chunks and a last one of 10 rows, torn
    with pytest.warns(TraceWarning, match="torn chunk after 10 complete"):
        trace = read_process(tmp_path / "p.1")
    assert len(trace.events) == 1000


def test_crashed_process_is_read_with_a_warning(tmp_path: Path) -> None:
    write(tmp_path / "p.1", 10, chunk=4, complete=False)
    with pytest.warns(TraceWarning, match="did not finish profiling"):
        events = read_process(tmp_path / "p.1").events
    assert (events["kind"] == 0).sum() == 10


def test_other_schema_version_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "p.1", 3, chunk=4)
    meta = json.loads((tmp_path / "p.1" / "meta.json").read_text())
    meta["schema_version"] = 99
    (tmp_path / "p.1" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceError, match="schema version 99"):
        read_process(tmp_path / "p.1")


def test_missing_or_empty_trace_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace directory"):
        read_trace(tmp_path / "absent")
    with pytest.raises(TraceError, match="holds no process traces"):
        read_trace(tmp_path)


def test_empty_events_file_reads_as_no_events(tmp_path: Path) -> None:
    write(tmp_path / "p.1", 0, chunk=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_process(tmp_path / "p.1").events.empty


def _garble_first_kind_of_chunk(path: Path, chunk: int, value: int) -> None:
    """Rewrite the stream with the first ``kind`` of chunk ``chunk`` (0-based) set to ``value``
    and no checksums: bytes garbled inside a chunk that Arrow still parses, in a version-1
    trace, which only the reader's checks of the values can catch."""
    import pyarrow as pa

    with pa.OSFile(str(path)) as f:
        reader = pa.ipc.open_stream(f)
        batches = list(reader)
    kinds = batches[chunk].column("kind").to_numpy().copy()
    kinds[0] = value
    columns = [pa.array(kinds, pa.int8()) if name == "kind" else batches[chunk].column(name)
               for name in batches[chunk].schema.names]
    batches[chunk] = pa.RecordBatch.from_arrays(columns, schema=batches[chunk].schema)
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)


def test_a_corrupt_chunk_of_a_version_1_trace_is_named_and_can_be_left_out(tmp_path: Path) -> None:
    write(tmp_path / "p.1", 1000, chunk=100, version=1)
    events = tmp_path / "p.1" / "events.arrows"
    _garble_first_kind_of_chunk(events, 3, 123)
    with pytest.raises(TraceError, match=r"events.arrows: chunk 4 \(bytes .*\) is corrupt: unknown event kind "
                                         r".*--drop-corrupt"):
        read_trace(tmp_path)
    with pytest.warns(TraceWarning, match=r"dropped 100 events in 1 corrupt chunk of .*events.arrows: chunk 4"):
        (trace,) = read_trace(tmp_path, drop_corrupt=True)
    ops = trace.events[trace.events["kind"] == 0]
    # chunk 4 held the record of a write and operations 298..396: the others, intact, are kept
    assert len(ops) == 901 and trace.dropped_events == 100
    assert ops["start_ns"].tolist() == [i for i in range(1000) if not 298 <= i < 397]


def test_a_corrupt_chunk_ends_rlscope_analyze_in_one_line_without_a_traceback(tmp_path: Path, cli_env) -> None:
    import subprocess
    import sys

    write(tmp_path / "p.1", 1000, chunk=100, version=1)
    _garble_first_kind_of_chunk(tmp_path / "p.1" / "events.arrows", 5, -16)
    result = subprocess.run([sys.executable, "-m", "rlscope.cli", "analyze", str(tmp_path)], capture_output=True,
                            text=True, env=cli_env)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "chunk 6" in result.stderr
    kept = subprocess.run([sys.executable, "-m", "rlscope.cli", "analyze", str(tmp_path), "--drop-corrupt"],
                          capture_output=True, text=True, env=cli_env)
    assert kept.returncode == 0, kept.stderr
    assert "dropped 100 events in 1 corrupt chunk of" in kept.stderr
    assert (tmp_path / "analysis" / "breakdown.csv").exists()


def test_a_meta_json_of_the_wrong_shape_is_one_error_naming_the_field(tmp_path: Path) -> None:
    with rlscope.profile(tmp_path, gpu=False, transitions=False):
        rlscope.step()
    meta_path = next(tmp_path.glob("*/meta.json"))
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "pid": "12"}))
    wrong_pid = r"meta.json: field 'pid' should be a valid integer, found '12'.*profile the script again"
    with pytest.raises(TraceError, match=wrong_pid):
        read_trace(tmp_path)
    meta_path.write_text(json.dumps([meta]))
    with pytest.raises(TraceError, match="schema version None"):
        read_trace(tmp_path)

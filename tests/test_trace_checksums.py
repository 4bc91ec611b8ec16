"""Checksums: every chunk of events.arrows and every write of gpu.rows is verified, a damaged one
is named with its bytes, and ``drop_corrupt`` leaves out exactly the damaged parts, counted."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rlscope.errors import TraceError
from rlscope.trace import SCHEMA_VERSION, Kind, TraceWarning, TraceWriter, read_process
from rlscope.trace.schema import CHECKSUM_KEYS, EVENTS_FILE, GPU_CRC_RECORD, GPU_ROWS_CRC_FILE, GPU_ROWS_FILE

BASE = 0x0123_4567_0000  # operation i is [BASE + 10 i, BASE + 10 i + 5]: its bytes are found once in the file


def write(directory: Path, n: int = 1000, chunk: int = 100, name=lambda i: f"op{i % 5}",
          version: int = SCHEMA_VERSION) -> Path:
    """Operations i = 0..n-1 in chunks of ``chunk`` rows: chunk 1 holds 0..99, every later one
    the record of the write before and 99 operations (chunk k: 99k - 97 ..)."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = TraceWriter(directory / EVENTS_FILE, chunk_events=chunk)
    for i in range(n):
        writer.record(int(Kind.OPERATION), end(i) - 5, end(i), name(i))
    writer.close()
    meta = {"schema_version": version, "process": "p", "pid": 1, "start_ns": BASE, "end_ns": end(n),
            "complete": True, "main_tid": 0, "events": writer.events_written}
    (directory / "meta.json").write_text(json.dumps(meta))
    return directory / EVENTS_FILE


def end(i: int) -> int:
    return BASE + 10 * i + 5


def chunk_bytes(path: Path) -> list[tuple[int, int]]:
    """Where each chunk lies in the file: (first byte, end), its dictionary delta included."""
    spans = []
    with pa.OSFile(str(path)) as f:
        reader = pa.ipc.open_stream(f)
        while True:
            begin = f.tell()
            try:
                reader.read_next_batch()
            except StopIteration:
                return spans
            spans.append((begin, f.tell()))


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    path.write_bytes(bytes(data))


def operations(directory: Path, drop_corrupt: bool = False) -> list[int]:
    events = read_process(directory, drop_corrupt=drop_corrupt).events
    return ((events.loc[events["kind"] == int(Kind.OPERATION), "start_ns"] - BASE) // 10).tolist()


def test_every_chunk_carries_checksums_and_reads_back_unchanged(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    with pa.OSFile(str(path)) as f:
        reader = pa.ipc.open_stream(f)
        metadata = []
        while True:
            try:
                batch, custom = reader.read_next_batch_with_custom_metadata()
            except StopIteration:
                break
            metadata.append({k.decode(): v.decode() for k, v in custom.items()})
            assert int(metadata[-1]["rlscope.rows"]) == batch.num_rows
    assert len(metadata) == 11 and all(set(m) == set(CHECKSUM_KEYS) for m in metadata)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert operations(tmp_path / "p.1") == list(range(1000))


def test_a_flipped_byte_in_a_data_buffer_is_named_with_its_chunk_and_bytes(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    offset = path.read_bytes().find(struct.pack("<q", end(450)))  # operation 450's end, in chunk 5
    begin, stop = chunk_bytes(path)[4]
    assert begin <= offset < stop
    flip(path, offset + 3)
    with pytest.raises(TraceError) as err:
        read_process(tmp_path / "p.1")
    message = str(err.value)
    assert f"events.arrows: chunk 5 (bytes {begin:,}..{stop:,}) is corrupt: checksum mismatch" in message
    assert "rlscope analyze --drop-corrupt" in message


def test_drop_corrupt_leaves_out_the_damaged_chunk_only_and_counts_its_events(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    flip(path, path.read_bytes().find(struct.pack("<q", end(450))))
    with pytest.warns(TraceWarning, match=r"dropped 100 events in 1 corrupt chunk of .*events.arrows: chunk 5 "):
        trace = read_process(tmp_path / "p.1", drop_corrupt=True)
    kept = ((trace.events.loc[trace.events["kind"] == int(Kind.OPERATION), "start_ns"] - BASE) // 10).tolist()
    assert kept == [i for i in range(1000) if not 397 <= i < 496]  # the chunks after it too
    assert trace.dropped_events == 100 and [d.events for d in trace.dropped] == [100]


def test_a_flipped_byte_in_a_dictionary_delta_condemns_the_chunks_using_its_names(tmp_path: Path) -> None:
    """A name first used at operation 500 arrives in chunk 6's delta; chunk 7 uses it too."""
    path = write(tmp_path / "p.1", name=lambda i: f"phase-{i // 100:02d}")
    offset = path.read_bytes().find(b"phase-05")
    assert chunk_bytes(path)[5][0] <= offset < chunk_bytes(path)[5][1]
    flip(path, offset + 7)
    with pytest.raises(TraceError, match=r"chunk 6 \(bytes .*\) is corrupt: checksum mismatch in the names it adds"):
        read_process(tmp_path / "p.1")
    with pytest.warns(TraceWarning, match=r"dropped 200 events in 2 corrupt chunks .*chunk 7 .*: it uses names from "
                                          r"a corrupt dictionary delta"):
        trace = read_process(tmp_path / "p.1", drop_corrupt=True)
    ops = trace.events[trace.events["kind"] == int(Kind.OPERATION)]
    assert ((ops["start_ns"] - BASE) // 10).tolist() == [i for i in range(1000) if not 496 <= i < 694]
    assert ops["name"].astype(str).tolist()[-1] == "phase-09"  # names after the damaged ones still resolve


def test_a_version_2_chunk_without_checksums_is_corrupt_a_version_1_one_is_not(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    with pa.OSFile(str(path)) as f:
        batches = list(pa.ipc.open_stream(f))
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_stream(f, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)  # no custom metadata
    with pytest.raises(TraceError, match="chunk 1 .* is corrupt: it carries no checksum"):
        read_process(tmp_path / "p.1")
    meta = json.loads((tmp_path / "p.1" / "meta.json").read_text())
    (tmp_path / "p.1" / "meta.json").write_text(json.dumps({**meta, "schema_version": 1}))
    assert operations(tmp_path / "p.1") == list(range(1000))


def test_bytes_arrow_cannot_parse_mid_file_are_corrupt_and_the_loss_is_counted(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    begin, _ = chunk_bytes(path)[2]
    flip(path, begin)  # chunk 3's message marker
    with pytest.raises(TraceError, match=rf"chunk 3 \(bytes {begin:,}\.\.\) is corrupt: Arrow cannot parse it"):
        read_process(tmp_path / "p.1")
    with pytest.warns(TraceWarning, match=r"dropped 810 events in 1 corrupt chunk"):
        trace = read_process(tmp_path / "p.1", drop_corrupt=True)
    # 1,000 operations and the records of 10 writes were written; chunks 1 and 2 held 200
    assert len(trace.events) == 200 and trace.dropped_events == 810


def test_an_end_of_stream_marker_mid_file_is_corrupt(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    begin, _ = chunk_bytes(path)[2]
    data = bytearray(path.read_bytes())
    data[begin + 4:begin + 8] = bytes(4)  # chunk 3's message length 0: Arrow's end-of-stream marker
    path.write_bytes(bytes(data))
    with pytest.raises(TraceError, match=r"chunk 3 \(bytes .*\) is corrupt: it reads as the stream's end"):
        read_process(tmp_path / "p.1")
    with pytest.warns(TraceWarning, match=r"dropped 810 events"):
        assert len(read_process(tmp_path / "p.1", drop_corrupt=True).events) == 200


def crashed(directory: Path) -> None:
    """Make the process's meta.json that of a process that died before it finished."""
    meta = json.loads((directory / "meta.json").read_text())
    (directory / "meta.json").write_text(json.dumps({**meta, "complete": False, "end_ns": None, "events": None}))


def test_a_torn_end_of_a_crashed_process_is_a_warning_not_corruption(tmp_path: Path) -> None:
    path = write(tmp_path / "p.1")
    crashed(tmp_path / "p.1")
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.warns(TraceWarning, match="torn chunk after 10 complete"):
        trace = read_process(tmp_path / "p.1")
    assert trace.dropped == () and len(trace.events) == 1000


@pytest.mark.parametrize("damage", ["cut", "removed"])
def test_a_finished_process_whose_events_were_cut_or_removed_is_corrupt(tmp_path: Path, damage: str) -> None:
    path = write(tmp_path / "p.1")
    if damage == "cut":
        path.write_bytes(path.read_bytes()[:-100])
    else:
        path.unlink()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceWarning)
        cut_or_gone = r"events \d[\d,]*\.\.1,010 is corrupt: the file holds [\d,]+ of the 1,010"
        with pytest.raises(TraceError, match=cut_or_gone):
            read_process(tmp_path / "p.1")
        kept = read_process(tmp_path / "p.1", drop_corrupt=True)
    assert kept.dropped_events == 1010 - len(kept.events)


def test_rlscope_analyze_names_a_damaged_chunk_in_one_line_and_reports_what_it_dropped(tmp_path: Path,
                                                                                        cli_env) -> None:
    path = write(tmp_path / "p.1")
    flip(path, path.read_bytes().find(struct.pack("<q", end(450))))
    command = [sys.executable, "-m", "rlscope.cli", "analyze", str(tmp_path)]
    result = subprocess.run(command, capture_output=True, text=True, env=cli_env)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ") and "chunk 5 (bytes" in result.stderr
    kept = subprocess.run([*command, "--drop-corrupt"], capture_output=True, text=True, env=cli_env)
    assert kept.returncode == 0 and "Traceback" not in kept.stderr, kept.stderr
    assert "dropped 100 events in 1 corrupt chunk of" in kept.stderr
    breakdown = pd.read_csv(tmp_path / "analysis" / "breakdown.csv", keep_default_na=False)
    assert (breakdown["caveat"].str.contains("100 of this process's events were in corrupt parts")).all()
    assert "100 of this process's events" in kept.stdout  # the printed table says it too


# gpu.rows and gpu.rows.crc ----------------------------------------------------------------------

def write_gpu(directory: Path, writes: list[int], uncovered: int = 0) -> tuple[Path, Path]:
    """A process with GPU kernel rows written as the native tracer writes them: ``writes`` rows
    at a time, each write followed by its checksum record; ``uncovered`` rows after the last."""
    write(directory, n=10, chunk=100)
    rows_path, crc_path = directory / GPU_ROWS_FILE, directory / GPU_ROWS_CRC_FILE
    first = 0
    with open(rows_path, "wb") as rows, open(crc_path, "wb") as crc:
        for i, count in enumerate([*writes, uncovered]):
            block = np.zeros((count, 9), dtype="<i8")
            block[:, 0] = int(Kind.GPU_KERNEL)
            block[:, 4] = np.arange(first, first + count) * 10
            block[:, 5] = block[:, 4] + 5
            rows.write(block.tobytes())
            if i < len(writes):
                head = struct.pack("<qqI", first, count, zlib.crc32(block.tobytes()))
                crc.write(head + struct.pack("<I", zlib.crc32(head)))
            first += count
    (directory / "gpu.names").write_text("kernel\n")
    return rows_path, crc_path


def gpu_starts(directory: Path, drop_corrupt: bool = False) -> list[int]:
    return (read_process(directory, drop_corrupt=drop_corrupt).gpu["start_ns"] // 10).tolist()


def test_gpu_rows_are_verified_against_their_checksum_records(tmp_path: Path) -> None:
    write_gpu(tmp_path / "p.1", [10, 20, 30])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpu_starts(tmp_path / "p.1") == list(range(60))


def test_a_damaged_range_of_gpu_rows_is_named_and_drop_corrupt_drops_exactly_it(tmp_path: Path) -> None:
    rows_path, _ = write_gpu(tmp_path / "p.1", [10, 20, 30])
    flip(rows_path, 15 * 72 + 33)  # row 15: in the second write, rows 10..29
    with pytest.raises(TraceError, match=r"gpu.rows: rows 10..29 \(bytes 720..2,160\) is corrupt: checksum mismatch"):
        read_process(tmp_path / "p.1")
    with pytest.warns(TraceWarning, match=r"dropped 20 events in 1 corrupt range of rows of .*gpu.rows"):
        trace = read_process(tmp_path / "p.1", drop_corrupt=True)
    assert (trace.gpu["start_ns"] // 10).tolist() == [*range(10), *range(30, 60)] and trace.dropped_events == 20


def test_gpu_rows_no_record_covers_are_a_torn_end(tmp_path: Path) -> None:
    write_gpu(tmp_path / "p.1", [10, 20], uncovered=5)
    with pytest.warns(TraceWarning, match=r"dropped rows 30..34, which no record of gpu.rows.crc covers"):
        assert gpu_starts(tmp_path / "p.1") == list(range(30))


def test_gpu_rows_whose_checksum_record_is_damaged_cannot_be_vouched_for(tmp_path: Path) -> None:
    _, crc_path = write_gpu(tmp_path / "p.1", [10, 20, 30])
    flip(crc_path, GPU_CRC_RECORD.size + 9)  # record 1's row count
    with pytest.raises(TraceError, match=r"rows 10..29 .* is corrupt: their checksum record \(record 1 of "):
        read_process(tmp_path / "p.1")
    with pytest.warns(TraceWarning, match="dropped 20 events"):
        assert gpu_starts(tmp_path / "p.1", drop_corrupt=True) == [*range(10), *range(30, 60)]
    flip(crc_path, GPU_CRC_RECORD.size + 9)
    crc_path.write_bytes(crc_path.read_bytes()[:-10])  # the last record torn: its rows are the torn end
    with pytest.warns(TraceWarning, match=r"dropped rows 30..59"):
        assert gpu_starts(tmp_path / "p.1") == list(range(30))


def test_the_native_tracer_checksums_as_zlib_does() -> None:
    _cupti = pytest.importorskip("rlscope._cupti", reason="built without the CUPTI collector")
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 8, 9, 64, 1000, 72 * 4096 + 5):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert _cupti.crc32(data) == zlib.crc32(data), size


def write_names(directory: Path, writes: list[list[str]]) -> Path:
    """gpu.names written as the native tracer writes it, each write followed by its record in
    gpu.names.crc: (index of its first name, bytes, CRC-32 of the bytes, CRC-32 of the record)."""
    names_path = directory / "gpu.names"
    first = 0
    with open(names_path, "wb") as names, open(directory / "gpu.names.crc", "wb") as crc:
        for batch in writes:
            text = "".join(f"{n}\n" for n in batch).encode()
            names.write(text)
            head = struct.pack("<qqI", first, len(text), zlib.crc32(text))
            crc.write(head + struct.pack("<I", zlib.crc32(head)))
            first += len(batch)
    return names_path


def test_gpu_names_are_verified_and_a_damaged_write_is_named_not_misread(tmp_path: Path) -> None:
    rows_path, _ = write_gpu(tmp_path / "p.1", [6])
    raw = np.frombuffer(rows_path.read_bytes(), dtype="<i8").reshape(-1, 9).copy()
    raw[:, 6] = np.arange(6) % 3  # rows name kernels 0, 1, 2
    rows_path.write_bytes(raw.tobytes())
    head = struct.pack("<qqI", 0, 6, zlib.crc32(raw.tobytes()))
    (tmp_path / "p.1" / "gpu.rows.crc").write_bytes(head + struct.pack("<I", zlib.crc32(head)))
    names = write_names(tmp_path / "p.1", [["gemm"], ["relu", "softmax"]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_process(tmp_path / "p.1").gpu["name"].tolist() == ["gemm", "relu", "softmax"] * 2
    damaged = bytearray(names.read_bytes())
    damaged[len("gemm\nre")] = ord("\n")  # a newline where none was: every later name would shift
    names.write_bytes(bytes(damaged))
    with pytest.raises(TraceError, match=r"gpu.names: names 1\.\.\d \(bytes 5..18\) is corrupt: checksum mismatch"):
        read_process(tmp_path / "p.1")
    with pytest.warns(TraceWarning, match="1 damaged write"):
        gpu = read_process(tmp_path / "p.1", drop_corrupt=True).gpu
    assert gpu["name"].tolist() == ["gemm", "(corrupt name)", "(corrupt name)"] * 2  # times kept, names not guessed

// What both hot paths share: the row layout of rlscope.trace.schema.ROW_FIELDS, the clock, and
// buffers whose pages are written before recording starts. Included by transitions.hpp and hotpath.cpp.
#pragma once

#include <cstdint>
#include <ctime>
#include <vector>

namespace {

constexpr int64_t kOperation = 0;  // rlscope.trace.schema.Kind.OPERATION
constexpr int64_t kStep = 2;       // rlscope.trace.schema.Kind.STEP
constexpr int64_t kCpuCall = 3;    // rlscope.trace.schema.Kind.CPU_CALL
constexpr size_t kWidth = 9;     // len(ROW_FIELDS)

inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // time.perf_counter_ns's clock on Linux
    return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// A buffer of ``values`` values whose memory is already written: recording then never grows
// it (each doubling copied everything and touched fresh pages) nor page-faults, so an event
// costs the same in a session's first chunk as in a long run's later ones, where calibration
// measures it. The pages are touched here, at a session's start or inside a timed trace write.
void reserve_touched(std::vector<int64_t> &rows, size_t values) {
    rows.resize(values);
    rows.clear();  // keeps the capacity
}

}  // namespace

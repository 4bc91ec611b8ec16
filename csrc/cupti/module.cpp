// rlscope._cupti: GPU activity collector on the CUPTI Activity API (Python bindings).
//
// libcupti is opened at run time (dlopen), so this module builds wherever the CUDA headers
// are found and imports on machines without CUDA; Python decides whether a GPU is there.
//
// Data path, none of it under the GIL: CUPTI hands filled activity buffers to its worker
// thread -> buffer_completed() decodes each record into int64 rows laid out like
// rlscope.trace.schema.ROW_FIELDS -> full chunks, and every second what there is, are written
// with write(2) to <trace>/gpu.rows (raw N x 9 int64, a checksum record per write in
// gpu.rows.crc), new names appended to <trace>/gpu.names. The Python
// analysis (rlscope.analyze.attribution) joins them with the process's events. Timestamps come from CLOCK_MONOTONIC through
// cuptiActivityRegisterTimestampCallback: the clock of time.perf_counter_ns and of the
// CPU-side collectors, so no conversion is needed later.
//
// CUDA API calls: through CUPTI's Callback API by default (api_calls.hpp): each enabled call's
// entry and exit are stamped on its own thread and kept with its correlation id, which the
// kernels, copies and memsets it started carry. With ``api_callbacks=False``, as activity records.
//
// Attribution: rlscope.operation() enter/exit push/pop the operation's trace symbol id through
// the hooks this module exports as a capsule. The API callbacks read the thread's innermost
// operation; with activity records the id is pushed as a CUPTI external correlation id, and
// CUPTI emits an EXTERNAL_CORRELATION record for every API call made inside the operation.
//
// Letting go: once CUPTI has recorded in a process, the process stays slower after every
// activity kind is disabled and the subscriber is gone; only cuptiFinalize gives its speed back.
// CUPTI asks for cuptiFinalize at the exit of a CUDA API call, so stopping a session asks for it
// and then makes one cheap driver call whose exit detaches (attachment.hpp); a session started
// before a detach happens keeps CUPTI attached.
//
// Layout: loader.hpp (libcupti and its entry points), api_calls.hpp (API calls recorded by
// callbacks, each thread's operations), attachment.hpp (subscribing, detaching, correlation
// hooks), tracer.hpp (the Tracer), decode.hpp (activity records -> rows),
// call_probe.hpp (timed CUDA calls), floor.hpp (the bare client the bench compares against),
// this file (the Python bindings).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <utility>
#include <vector>

#include "call_probe.hpp"
#include "decode.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace rlscope::cupti;

#include "loader.hpp"
#include "attachment.hpp"
#include "tracer.hpp"
#include "floor.hpp"

namespace {

CallProbe g_probe;  // rlscope.calibrate.residual's timed CUDA calls

nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> to_array(std::vector<int64_t> &&rows) {
    auto *data = new std::vector<int64_t>(std::move(rows));
    nb::capsule owner(data, [](void *p) noexcept { delete static_cast<std::vector<int64_t> *>(p); });
    return nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(data->data(), {data->size() / kWidth, kWidth}, owner);
}

}  // namespace

NB_MODULE(_cupti, m) {
    m.doc() = "CUPTI activity collector (libcupti loaded at run time)";
    m.def("load", &load, "candidates"_a,
          "Open libcupti (reusing a copy already loaded in the process); returns the path in use.");
    m.def("loaded", []() { return g_api.handle != nullptr; });
    m.def("version", []() {
        require_loaded();
        uint32_t v = 0;
        g_api.GetVersion(&v);
        return v;
    }, "CUPTI API version of the loaded libcupti.");
    m.def("timestamp", []() {
        require_loaded();
        uint64_t t = 0;
        g_api.GetTimestamp(&t);
        return t;
    }, "CUPTI's current timestamp (CLOCK_MONOTONIC ns once a tracer registered its clock).");
    m.def("crc32", [](nb::bytes data) { return crc32(data.c_str(), data.size()); }, "data"_a,
          "The CRC-32 that gpu.rows.crc records carry (zlib's; the reader checks them with zlib.crc32).");
    m.def("decode", [](const std::vector<nb::bytes> &buffers, const std::vector<std::string> &kernel_names) {
        require_loaded();
        Decoder decoder(g_api.GetNextRecord, g_api.GetCallbackName);
        decoder.kernel_names = &kernel_names;
        std::vector<int64_t> rows;
        for (const nb::bytes &buffer : buffers) {  // CUPTI iterates in place: decode a private copy
            const auto *data = reinterpret_cast<const uint8_t *>(buffer.c_str());
            std::vector<uint8_t> copy(data, data + buffer.size());
            decoder.decode(copy.data(), copy.size(), rows);
        }
        nb::dict stats;
        stats["records"] = decoder.stats.records;
        stats["incomplete"] = decoder.stats.incomplete;
        stats["other_kinds"] = decoder.stats.other;
        return nb::make_tuple(to_array(std::move(rows)), decoder.names.names(), stats);
    }, "buffers"_a, "kernel_names"_a,
          "Decode recorded activity buffers in order, as the live tracer did: (N x 9 int64 rows, names, stats).\n"
          "Kernel names come from ``kernel_names`` (the recording's pointers are meaningless here).");
    m.def("probe_open", [](const std::vector<std::string> &cudart_candidates) {
        g_probe.open(cudart_candidates);
        return g_probe.runtime_path();
    }, "cudart_candidates"_a,
          "Make the first GPU's primary context current and prepare the timed calls; returns the libcudart\n"
          "path whose stream query is timed too (empty: none found).");
    m.def("probe_calls", [](size_t calls) {
        std::vector<std::pair<std::string, double>> times;
        {
            nb::gil_scoped_release unlocked;
            times = g_probe.time(calls);
        }
        nb::dict out;
        for (const auto &[name, ns] : times) out[name.c_str()] = ns;
        return out;
    }, "calls"_a,
          "Nanoseconds per call of cuStreamQuery, cuLaunchKernel (an empty kernel) and cudaStreamQuery (if\n"
          "found), each timed over ``calls`` calls in a tight loop.");
    nb::class_<Tracer>(m, "Tracer")
        .def(nb::init<std::string, std::string, size_t, size_t, std::string>(), "rows_path"_a, "names_path"_a,
             "chunk_rows"_a = 1 << 16, "buffer_bytes"_a = 8 << 20, "dump_dir"_a = "")
        .def("start", &Tracer::start, "runtime"_a = true, "driver"_a = true, "gpu"_a = true, "sync"_a = false,
             "untraced_apis"_a = std::vector<std::string>(), "api_callbacks"_a = false, "nvtx"_a = false,
             "Claim CUPTI and record the layers asked for; ``nvtx``: NVTX ranges too (marker activity; NVTX\n"
             "reaches CUPTI only when NVTX_INJECTION64_PATH names this libcupti before the first NVTX call).")
        .def("record", &Tracer::record, "api"_a, "gpu"_a,
             "Stop or resume recording CUDA API calls and GPU activities (calibration's windows).")
        .def("stop", &Tracer::stop)
        .def("abandon", &Tracer::abandon)
        .def("stats", &Tracer::stats)
        .def("hooks", &Tracer::hooks, "Capsule of the external-correlation push/pop functions.");
    nb::class_<Floor>(m, "Floor",
                      "A bare CUPTI client: the tracer's GPU activity kinds, buffers freed unread, and with ``api``\n"
                      "the runtime and driver API callbacks enabled doing nothing (bench/gpu_overhead.py's floor).")
        .def(nb::init<size_t>(), "buffer_bytes"_a = 8 << 20)
        .def("start", &Floor::start, "api"_a, "untraced_apis"_a = std::vector<std::string>())
        .def("stop", &Floor::stop, "Every kind off, buffers flushed and freed, CUPTI detached: {buffers, bytes, dropped}.");
}


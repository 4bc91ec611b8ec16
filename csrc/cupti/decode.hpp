// Decoding of CUPTI activity records into trace rows (rlscope.trace.schema.ROW_FIELDS).
//
// Kept apart from the live tracer so that recorded activity buffers (test fixtures) go
// through exactly the code that decodes a live run. Record iteration is CUPTI's own
// (cuptiActivityGetNextRecord, reached through a function pointer), so record sizes and
// padding are never guessed here.
#pragma once

#include <cupti.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace rlscope::cupti {

// rlscope.trace.schema.Kind
enum Kind : int64_t {
    kCudaApi = 4,
    kGpuKernel = 5,
    kGpuMemcpy = 6,
    kGpuMemset = 7,
    kCorrelation = 8,
    kCudaSync = 9,
    kProfilerOverhead = 10,
    kNvtxRange = 12,
};
constexpr size_t kWidth = 9;  // kind, category, tid, depth, start_ns, end_ns, name, correlation, operation

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel": CUPTI's API names carry a version suffix.
inline std::string without_version(std::string name) {
    const auto cut = name.rfind("_v");
    if (cut != std::string::npos && cut + 2 < name.size() &&
        name.find_first_not_of("0123456789", cut + 2) == std::string::npos)
        name.resize(cut);
    return name;
}

using NextRecordFn = CUptiResult (*)(uint8_t *, size_t, CUpti_Activity **);
using CallbackNameFn = CUptiResult (*)(CUpti_CallbackDomain, uint32_t, const char **);

struct DecodeStats {
    uint64_t records = 0;     // activity records seen
    uint64_t incomplete = 0;  // records without a finished interval (dropped)
    uint64_t other = 0;       // records of kinds not decoded
};

// Names of this process's GPU-side events: ids in order of first appearance. New names are
// also queued in ``fresh`` so the live tracer can append them to its names file.
class NameTable {
public:
    int64_t id(const std::string &name) {
        auto it = ids_.find(name);
        if (it != ids_.end()) return it->second;
        const int64_t sid = static_cast<int64_t>(names_.size());
        ids_.emplace(name, sid);
        names_.push_back(name);
        fresh.push_back(name);
        return sid;
    }
    const std::vector<std::string> &names() const { return names_; }
    std::vector<std::string> fresh;

private:
    std::unordered_map<std::string, int64_t> ids_;
    std::vector<std::string> names_;
};

class Decoder {
public:
    Decoder(NextRecordFn next, CallbackNameFn callback_name) : next_(next), callback_name_(callback_name) {}

    // Append the rows of every record in buffer[0:valid] to ``rows``.
    void decode(uint8_t *buffer, size_t valid, std::vector<int64_t> &rows) {
        CUpti_Activity *record = nullptr;
        while (next_(buffer, valid, &record) == CUPTI_SUCCESS) {
            ++stats.records;
            row(record, rows);
        }
    }

    // The name id of a runtime (driver: false) or driver API, by callback id.
    int64_t api_name(bool driver, uint32_t cbid) {
        const uint64_t key = (static_cast<uint64_t>(driver) << 32) | cbid;
        auto it = api_names_.find(key);
        if (it != api_names_.end()) return it->second;
        const char *name = nullptr;
        std::string text;
        if (callback_name_ &&
            callback_name_(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, cbid, &name) ==
                CUPTI_SUCCESS && name)
            text = name;
        else
            text = std::string(driver ? "driver API " : "runtime API ") + std::to_string(cbid);
        const int64_t sid = names.id(without_version(text));
        api_names_.emplace(key, sid);
        return sid;
    }

    NameTable names;
    DecodeStats stats;
    int64_t offset = 0;  // added to timestamps when CUPTI's clock is not CLOCK_MONOTONIC
    // Added to correlation ids: CUPTI numbers them afresh once it has been detached, so each
    // attachment of one tracer gets its own range and a kernel never meets another's launch.
    int64_t correlation_base = 0;
    // Recorded buffers (test fixtures) hold kernel-name pointers into the recording process, so
    // they are saved zeroed and the names supplied here, one per kernel record in order.
    const std::vector<std::string> *kernel_names = nullptr;

private:
    static bool finished(uint64_t start, uint64_t end) { return start != 0 && end >= start; }

    void push(std::vector<int64_t> &rows, int64_t kind, int64_t category, int64_t tid, int64_t depth,
              uint64_t start, uint64_t end, int64_t name, int64_t correlation, int64_t operation) {
        const int64_t shift = start ? offset : 0;
        if (correlation > 0) correlation += correlation_base;
        const int64_t r[kWidth] = {kind, category, tid, depth, static_cast<int64_t>(start) + shift,
                                   static_cast<int64_t>(end) + shift, name, correlation, operation};
        rows.insert(rows.end(), r, r + kWidth);
    }

    void row(CUpti_Activity *record, std::vector<int64_t> &rows) {
        switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            auto *k = reinterpret_cast<CUpti_ActivityKernel10 *>(record);
            if (!finished(k->start, k->end)) { ++stats.incomplete; return; }
            // tid and operation are filled in by the analysis (rlscope.analyze.attribution) from the
            // launching API call.
            const char *name = k->name;
            if (kernel_names) name = next_kernel_ < kernel_names->size() ? (*kernel_names)[next_kernel_++].c_str() : nullptr;
            push(rows, kGpuKernel, k->deviceId, 0, k->streamId, k->start, k->end,
                 names.id(name ? name : "(unnamed kernel)"), k->correlationId, -1);
            return;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            auto *m = reinterpret_cast<CUpti_ActivityMemcpy6 *>(record);
            if (!finished(m->start, m->end)) { ++stats.incomplete; return; }
            push(rows, kGpuMemcpy, m->deviceId, 0, m->streamId, m->start, m->end, names.id(memcpy_name(m->copyKind)),
                 m->correlationId, -1);
            return;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            auto *m = reinterpret_cast<CUpti_ActivityMemset4 *>(record);
            if (!finished(m->start, m->end)) { ++stats.incomplete; return; }
            push(rows, kGpuMemset, m->deviceId, 0, m->streamId, m->start, m->end, names.id("Memset"),
                 m->correlationId, -1);
            return;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME:
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            auto *a = reinterpret_cast<CUpti_ActivityAPI *>(record);
            if (!finished(a->start, a->end)) { ++stats.incomplete; return; }
            const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
            // category: 0 runtime API, 1 driver API. tid: low 32 bits of pthread_self(), as
            // CUPTI reports it; the analysis maps it back to the thread's Python ident.
            push(rows, kCudaApi, driver ? 1 : 0, a->threadId, 0, a->start, a->end, api_name(driver, a->cbid),
                 a->correlationId, -1);
            return;
        }
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
            auto *c = reinterpret_cast<CUpti_ActivityExternalCorrelation *>(record);
            // The external id is the trace symbol id of the innermost rlscope.operation.
            push(rows, kCorrelation, c->externalKind, 0, 0, 0, 0, -1, c->correlationId,
                 static_cast<int64_t>(c->externalId));
            return;
        }
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
            auto *s = reinterpret_cast<CUpti_ActivitySynchronization2 *>(record);
            if (!finished(s->start, s->end)) { ++stats.incomplete; return; }
            push(rows, kCudaSync, 0, 0, static_cast<int32_t>(s->streamId), s->start, s->end, names.id(sync_name(s->type)),
                 s->correlationId, -1);
            return;
        }
        case CUPTI_ACTIVITY_KIND_MARKER: {
            // NVTX ranges (XLA's per-thunk annotations in rlscope's precise jax-scopes mode): a
            // start record carries the name, the end record only the id; one row per closed range.
            auto *m = reinterpret_cast<CUpti_ActivityMarker2 *>(record);
            if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) {
                const int64_t tid = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
                open_markers_[m->id] = {m->timestamp, tid, names.id(m->name ? m->name : "(unnamed range)")};
            } else if (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) {
                auto it = open_markers_.find(m->id);
                if (it == open_markers_.end()) { ++stats.incomplete; return; }
                const auto [start, tid, name] = it->second;
                open_markers_.erase(it);
                push(rows, kNvtxRange, 0, tid, 0, start, m->timestamp, name, 0, -1);
            } else
                ++stats.other;  // instantaneous markers: nothing rlscope reads
            return;
        }
        case CUPTI_ACTIVITY_KIND_OVERHEAD: {
            auto *o = reinterpret_cast<CUpti_ActivityOverhead3 *>(record);
            if (!finished(o->start, o->end)) { ++stats.incomplete; return; }
            const int64_t tid = o->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? o->objectId.pt.threadId : 0;
            push(rows, kProfilerOverhead, 0, tid, 0, o->start, o->end, names.id(overhead_name(o->overheadKind)),
                 o->correlationId, -1);
            return;
        }
        default:
            ++stats.other;
        }
    }

    static const char *memcpy_name(uint8_t kind) {
        switch (kind) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "Memcpy HtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "Memcpy DtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "Memcpy DtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "Memcpy HtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "Memcpy PtoP";
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "Memcpy HtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "Memcpy AtoH";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "Memcpy AtoA";
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "Memcpy AtoD";
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "Memcpy DtoA";
        default: return "Memcpy";
        }
    }

    static const char *sync_name(CUpti_ActivitySynchronizationType type) {
        switch (type) {
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE: return "sync: event";
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT: return "sync: stream wait event";
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE: return "sync: stream";
        case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE: return "sync: context";
        default: return "sync";
        }
    }

    static const char *overhead_name(CUpti_ActivityOverheadKind kind) {
        switch (kind) {
        case CUPTI_ACTIVITY_OVERHEAD_DRIVER_COMPILER: return "overhead: driver compiler";
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_BUFFER_FLUSH: return "overhead: CUPTI buffer flush";
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_INSTRUMENTATION: return "overhead: CUPTI instrumentation";
        case CUPTI_ACTIVITY_OVERHEAD_CUPTI_RESOURCE: return "overhead: CUPTI resource";
        case CUPTI_ACTIVITY_OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING: return "overhead: module loading";
        case CUPTI_ACTIVITY_OVERHEAD_LAZY_FUNCTION_LOADING: return "overhead: lazy function loading";
        case CUPTI_ACTIVITY_OVERHEAD_COMMAND_BUFFER_FULL: return "overhead: command buffer full";
        case CUPTI_ACTIVITY_OVERHEAD_ACTIVITY_BUFFER_REQUEST: return "overhead: activity buffer request";
        default: return "overhead";
        }
    }

    NextRecordFn next_;
    CallbackNameFn callback_name_;
    size_t next_kernel_ = 0;
    std::unordered_map<uint64_t, int64_t> api_names_;
    struct OpenMarker {
        uint64_t start;
        int64_t tid, name;
    };
    std::unordered_map<uint32_t, OpenMarker> open_markers_;  // NVTX ranges whose end has not come yet
};

}  // namespace rlscope::cupti

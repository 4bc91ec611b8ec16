// The bare CUPTI client that rlscope's collector is measured against (bench/gpu_overhead.py's
// modes ``floor`` and ``floor-api``): what CUPTI itself costs a loop for the activity kinds the
// tracer's GPU layer enables (kernels, copies, memsets and CUPTI's overhead records), with every
// buffer handed back unread, and with ``api`` the runtime and driver API callbacks enabled as the
// tracer enables them (less the same untraced calls) but doing nothing. It attaches and detaches
// as the tracer does (attachment.hpp), so a session of either costs the same to start and stop
// apart from the tracer's own work: decoding, writing, stamping API calls. No clock callback, no
// flushing thread: what is left when nothing is done with the records. Included once, by
// module.cpp, after tracer.hpp.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "attachment.hpp"
#include "tracer.hpp"

namespace nb = nanobind;

namespace {

class Floor {
public:
    explicit Floor(size_t buffer_bytes) : buffer_bytes_(buffer_bytes) {}
    ~Floor() {
        if (running_) stop();
    }
    Floor(const Floor &) = delete;
    Floor &operator=(const Floor &) = delete;

    // Subscribe and enable the kinds (and with ``api`` the callbacks). Returns {"ok": True}, or
    // {"ok": False, "error": str, "step": str} where CUPTI refused.
    nb::dict start(bool api, const std::vector<std::string> &untraced_apis) {
        failed_ = false;
        nb::dict out = start_locked(api, untraced_apis);
        if (failed_) settle_detach();  // a failed start leaves CUPTI detached, as a stop does
        return out;
    }

    // Every kind off, CUPTI's buffers handed back (and freed unread), detached before returning.
    nb::dict stop() {
        if (running_) {
            nb::gil_scoped_release unlocked;
            {
                std::lock_guard<std::mutex> lock(g_attach.mutex);
                release();
            }
            settle_detach();
            running_ = false;
        }
        nb::dict out;
        out["buffers"] = buffers_.load();
        out["bytes"] = bytes_.load();
        out["dropped"] = dropped_.load();
        out["cupti_attached"] = g_attach.attached.load();
        return out;
    }

private:
    nb::dict start_locked(bool api, const std::vector<std::string> &untraced_apis) {
        require_loaded();
        nb::dict out;
        std::lock_guard<std::mutex> lock(g_attach.mutex);
        if (g_tracer || g_floor.load()) return failure(out, "start", CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
        char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
        CUptiResult r = attach(old_name, sizeof(old_name) - 1);
        if (r != CUPTI_SUCCESS) return failure(out, "cuptiSubscribe", r);
        g_floor = this;
        buffers_ = bytes_ = dropped_ = 0;
        if ((r = g_api.ActivityRegisterCallbacks(&Floor::buffer_requested, &Floor::buffer_completed)) != CUPTI_SUCCESS)
            return release_failure(out, "cuptiActivityRegisterCallbacks", r);
        for (CUpti_ActivityKind kind : kinds())
            if ((r = g_api.ActivityEnable(kind)) != CUPTI_SUCCESS) return release_failure(out, "cuptiActivityEnable", r);
        api_ = api;
        if (api) {
            for (CUpti_CallbackDomain domain : {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_CB_DOMAIN_DRIVER_API})
                if ((r = g_api.EnableDomain(1, g_attach.subscriber, domain)) != CUPTI_SUCCESS)
                    return release_failure(out, "cuptiEnableDomain", r);
            for (const auto &[domain, cbid] : Tracer::api_ids(true, true, untraced_apis))
                g_api.EnableCallback(0, g_attach.subscriber, domain, cbid);
        }
        running_ = true;
        out["ok"] = true;
        return out;
    }

    // The tracer's GPU layer's kinds: kernels, copies, memsets (kGpuKinds) and CUPTI's overhead records.
    static std::vector<CUpti_ActivityKind> kinds() {
        std::vector<CUpti_ActivityKind> all(std::begin(kGpuKinds), std::end(kGpuKinds));
        all.push_back(CUPTI_ACTIVITY_KIND_OVERHEAD);
        return all;
    }

    // With g_attach.mutex held.
    void release() {
        if (g_attach.attached) {
            for (CUpti_ActivityKind kind : kinds()) g_api.ActivityDisable(kind);
            if (api_) {  // request_detach enables both domains again, for the one exit it needs
                g_api.EnableDomain(0, g_attach.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
                g_api.EnableDomain(0, g_attach.subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
            }
            g_api.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
            request_detach();
        }
        void *self = this;
        g_floor.compare_exchange_strong(self, nullptr);
    }

    // g_attach.mutex held: let go of CUPTI; the caller's detach happens at the next CUDA API exit
    // (settle_detach, once the mutex is released: see start()).
    nb::dict release_failure(nb::dict &out, const char *step, CUptiResult code) {
        release();
        failed_ = true;
        return failure(out, step, code);
    }

    static nb::dict failure(nb::dict &out, const char *step, CUptiResult code) {
        out["ok"] = false;
        out["error"] = result_name(code);
        out["step"] = step;
        return out;
    }

    // CUPTI's buffer callbacks run on its own thread, until stop() has flushed (after which
    // g_floor is cleared): the counters are the Floor's, kept while it lives.
    static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
        auto *floor = static_cast<Floor *>(g_floor.load(std::memory_order_acquire));
        const size_t bytes = floor ? floor->buffer_bytes_ : (8u << 20);
        *buffer = static_cast<uint8_t *>(std::aligned_alloc(8, bytes));
        *size = *buffer ? bytes : 0;
        *max_records = 0;
    }

    static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t, size_t valid) {
        if (auto *floor = static_cast<Floor *>(g_floor.load(std::memory_order_acquire))) {
            ++floor->buffers_;
            floor->bytes_ += valid;
            size_t dropped = 0;
            if (g_api.ActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) floor->dropped_ += dropped;
        }
        std::free(buffer);
    }

    size_t buffer_bytes_;
    bool running_ = false, api_ = false, failed_ = false;
    std::atomic<uint64_t> buffers_{0}, bytes_{0}, dropped_{0};
};

}  // namespace

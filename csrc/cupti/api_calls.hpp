// CUDA API calls recorded by the CUPTI Callback API rather than as activity records, and the
// operation each thread is in. Included once, by attachment.hpp.
//
// Why: with the RUNTIME/DRIVER activity kinds on, CUPTI instruments every CUDA call, queries
// included, and builds an activity record for each; on a loop of tiny kernels that cost more
// than the calls. Here CUPTI calls back only for the API ids the tracer enables, at entry and
// exit, and the callback stamps both ends with CLOCK_MONOTONIC (the clock of every other
// event), keeps the call's correlation id (kernels, copies and memsets carry it) and the
// thread's innermost rlscope.operation, and appends two rows to a buffer of its own thread.
// The tracer takes the handed-over rows on CUPTI's buffer thread, whenever an activity buffer
// completes (kernels keep them coming), and every thread's rows at stop.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_set>
#include <utility>
#include <vector>

#include "decode.hpp"
#include "loader.hpp"

namespace {

using rlscope::cupti::kWidth;

// The operations open on this thread, innermost last: (CUPTI attachment generation the id
// was pushed into, 0 for none; the operation's trace symbol id).
thread_local std::vector<std::pair<uint64_t, int64_t>> t_operations;

// One thread's recorded calls; the owning thread appends, the tracer takes them.
struct ApiThreadRows {
    std::mutex mutex;
    std::vector<int64_t> rows;  // kWidth values a row; the name is a placeholder, api_name_key()
};

// Every thread's buffers, and the rows handed over by full buffers and by threads that ended.
struct ApiCalls {
    std::mutex mutex;
    std::unordered_set<ApiThreadRows *> threads;
    std::vector<int64_t> pending;
    std::atomic<bool> recording{false};  // the tracer's callbacks are on
    std::atomic<bool> by_callback{false};  // this session records API calls here, not as activities
};
ApiCalls g_api_calls;

constexpr size_t kHandOverValues = 4096 * kWidth;  // a thread's buffer moves to pending at this size

// The name column of a recorded row until the tracer names it: -2 - (driver << 32 | cbid).
inline int64_t api_name_key(bool driver, uint32_t cbid) {
    return -2 - ((static_cast<int64_t>(driver) << 32) | cbid);
}
inline bool is_api_name_key(int64_t name) { return name <= -2; }
inline std::pair<bool, uint32_t> api_of_key(int64_t name) {
    const int64_t key = -2 - name;
    return {(key >> 32) != 0, static_cast<uint32_t>(key & 0xFFFFFFFF)};
}

// This thread's buffer, registered at first use; an ending thread hands its rows to pending.
struct ApiThreadSlot {
    ApiThreadRows *rows = nullptr;
    ~ApiThreadSlot() {
        if (!rows) return;
        std::lock_guard<std::mutex> lock(g_api_calls.mutex);
        g_api_calls.threads.erase(rows);
        g_api_calls.pending.insert(g_api_calls.pending.end(), rows->rows.begin(), rows->rows.end());
        delete rows;
    }
};
thread_local ApiThreadSlot t_api_slot;

ApiThreadRows *thread_rows() {
    if (!t_api_slot.rows) {
        auto *rows = new ApiThreadRows;
        rows->rows.reserve(kHandOverValues + 2 * kWidth);
        std::lock_guard<std::mutex> lock(g_api_calls.mutex);
        g_api_calls.threads.insert(rows);
        t_api_slot.rows = rows;
    }
    return t_api_slot.rows;
}

// The correlation id of the runtime API call this thread is in (0: none). CUPTI calls back for
// the driver calls a runtime call makes, with the runtime call's id; its activity records leave
// them out (cudaLaunchKernel is recorded, the cuLaunchKernel inside it is not), and so does this.
thread_local uint32_t t_runtime_call = 0;

// At the exit of an enabled API call: its row (kCudaApi; category 0 runtime, 1 driver; tid the
// low 32 bits of pthread_self(), as CUPTI's activity records give it) and, inside an operation,
// a kCorrelation row tying its correlation id to the operation. Entry stamps the start. A driver
// call made inside a runtime call is not recorded (t_runtime_call).
void record_api_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const CUpti_CallbackData *call) {
    const bool driver = domain == CUPTI_CB_DOMAIN_DRIVER_API;
    if (call->callbackSite == CUPTI_API_ENTER) {
        *call->correlationData = monotonic_ns();
        if (!driver) t_runtime_call = call->correlationId;
        return;
    }
    if (driver && t_runtime_call != 0 && call->correlationId == t_runtime_call) return;
    if (!driver) t_runtime_call = 0;
    const uint64_t start = *call->correlationData, end = monotonic_ns();
    if (start == 0 || start > end) return;  // entered before the callbacks were on
    const auto correlation = static_cast<int64_t>(call->correlationId);
    const int64_t operation = t_operations.empty() ? -1 : t_operations.back().second;
    ApiThreadRows *mine = thread_rows();
    std::vector<int64_t> full;
    {
        std::lock_guard<std::mutex> lock(mine->mutex);
        const int64_t api[kWidth] = {rlscope::cupti::kCudaApi, driver ? 1 : 0,
                                     static_cast<int64_t>(static_cast<uint32_t>(pthread_self())), 0,
                                     static_cast<int64_t>(start), static_cast<int64_t>(end),
                                     api_name_key(driver, cbid), correlation, -1};
        mine->rows.insert(mine->rows.end(), api, api + kWidth);
        if (operation >= 0) {
            const int64_t link[kWidth] = {rlscope::cupti::kCorrelation, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0,
                                          0, 0, 0, 0, -1, correlation, operation};
            mine->rows.insert(mine->rows.end(), link, link + kWidth);
        }
        if (mine->rows.size() >= kHandOverValues) {
            full.swap(mine->rows);
            mine->rows.reserve(kHandOverValues + 2 * kWidth);
        }
    }
    if (!full.empty()) {  // the thread's own lock is released first: take_api_rows takes them the other way
        std::lock_guard<std::mutex> lock(g_api_calls.mutex);
        g_api_calls.pending.insert(g_api_calls.pending.end(), full.begin(), full.end());
    }
}

// The rows recorded so far: pending ones, and with ``every_thread`` those still in the threads'
// buffers too (at stop, once the callbacks are off).
std::vector<int64_t> take_api_rows(bool every_thread) {
    std::lock_guard<std::mutex> lock(g_api_calls.mutex);
    std::vector<int64_t> out;
    out.swap(g_api_calls.pending);
    if (every_thread)
        for (ApiThreadRows *rows : g_api_calls.threads) {
            std::lock_guard<std::mutex> own(rows->mutex);
            out.insert(out.end(), rows->rows.begin(), rows->rows.end());
            rows->rows.clear();
        }
    return out;
}

}  // namespace

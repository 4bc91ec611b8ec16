// The API-call recorder of csrc/cupti/api_calls.hpp without CUPTI: callbacks are made by hand,
// as CUPTI makes them (entry, then exit with the same correlationData), on several threads at
// once while another thread takes the rows, as the tracer does. Prints "ok" or what failed.
#include "api_calls.hpp"

#include <cstdio>
#include <set>
#include <thread>

namespace {

int failures = 0;
#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::printf("failed: %s (line %d)\n", #cond, __LINE__);                  \
            ++failures;                                                              \
        }                                                                            \
    } while (0)

void api_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, uint32_t correlation, bool enter = true) {
    uint64_t shared = 0;  // CUPTI's correlationData: zero until the entry callback writes it
    CUpti_CallbackData data{};
    data.correlationId = correlation;
    data.correlationData = &shared;
    if (enter) {
        data.callbackSite = CUPTI_API_ENTER;
        record_api_call(domain, cbid, &data);
    }
    data.callbackSite = CUPTI_API_EXIT;
    record_api_call(domain, cbid, &data);
}

const int64_t *row(const std::vector<int64_t> &rows, size_t i) { return rows.data() + i * kWidth; }

void one_thread_rows() {
    t_operations.emplace_back(0, 42);
    api_call(CUPTI_CB_DOMAIN_RUNTIME_API, 13, 7);  // inside operation 42
    t_operations.pop_back();
    api_call(CUPTI_CB_DOMAIN_DRIVER_API, 307, 8);  // outside any operation
    api_call(CUPTI_CB_DOMAIN_DRIVER_API, 307, 9, /*enter=*/false);  // its entry was not seen: dropped
    const std::vector<int64_t> rows = take_api_rows(true);
    CHECK(rows.size() == 3 * kWidth);
    if (rows.size() != 3 * kWidth) return;
    const int64_t *api = row(rows, 0), *link = row(rows, 1), *driver = row(rows, 2);
    CHECK(api[0] == rlscope::cupti::kCudaApi && api[1] == 0 && api[4] > 0 && api[5] >= api[4]);
    CHECK(api[7] == 7 && api[8] == -1 && is_api_name_key(api[6]));
    CHECK(api_of_key(api[6]) == std::make_pair(false, 13u));
    CHECK(api[2] == static_cast<int64_t>(static_cast<uint32_t>(pthread_self())));
    CHECK(link[0] == rlscope::cupti::kCorrelation && link[7] == 7 && link[8] == 42);
    CHECK(driver[0] == rlscope::cupti::kCudaApi && driver[1] == 1 && driver[7] == 8);
    CHECK(api_of_key(driver[6]) == std::make_pair(true, 307u));
    CHECK(take_api_rows(true).empty());
}

// A driver call made inside a runtime call, with its correlation id (as CUPTI gives it): only the
// runtime call is recorded, as CUPTI's activity records do.
void nested_driver_call() {
    t_operations.emplace_back(0, 5);
    uint64_t outer = 0, inner = 0;
    CUpti_CallbackData runtime{}, driver{};
    runtime.correlationId = driver.correlationId = 11;
    runtime.correlationData = &outer;
    driver.correlationData = &inner;
    runtime.callbackSite = driver.callbackSite = CUPTI_API_ENTER;
    record_api_call(CUPTI_CB_DOMAIN_RUNTIME_API, 211, &runtime);
    record_api_call(CUPTI_CB_DOMAIN_DRIVER_API, 307, &driver);
    runtime.callbackSite = driver.callbackSite = CUPTI_API_EXIT;
    record_api_call(CUPTI_CB_DOMAIN_DRIVER_API, 307, &driver);
    record_api_call(CUPTI_CB_DOMAIN_RUNTIME_API, 211, &runtime);
    api_call(CUPTI_CB_DOMAIN_DRIVER_API, 307, 11);  // after the runtime call: its own row again
    t_operations.pop_back();
    const std::vector<int64_t> rows = take_api_rows(true);
    CHECK(rows.size() == 4 * kWidth);
    if (rows.size() != 4 * kWidth) return;
    const int64_t *outer_row = row(rows, 0), *link = row(rows, 1), *after = row(rows, 2);
    CHECK(outer_row[0] == rlscope::cupti::kCudaApi && outer_row[1] == 0 && outer_row[7] == 11);
    CHECK(link[0] == rlscope::cupti::kCorrelation && link[7] == 11 && link[8] == 5);
    CHECK(after[1] == 1 && after[7] == 11 && row(rows, 3)[0] == rlscope::cupti::kCorrelation);
}

// Threads calling at once, two of them ending before the last take, one thread taking rows
// meanwhile: every call arrives once.
void many_threads_rows() {
    constexpr uint32_t kThreads = 4, kCalls = 20000;
    std::vector<int64_t> taken;
    std::atomic<bool> done{false};
    std::thread taker([&] {
        while (!done) {
            std::vector<int64_t> some = take_api_rows(false);
            taken.insert(taken.end(), some.begin(), some.end());
        }
    });
    std::vector<std::thread> workers;
    for (uint32_t t = 0; t < kThreads; ++t)
        workers.emplace_back([t] {
            t_operations.emplace_back(0, t);
            for (uint32_t i = 0; i < kCalls; ++i) api_call(CUPTI_CB_DOMAIN_RUNTIME_API, 1, 1 + t * kCalls + i);
            t_operations.pop_back();
        });
    for (auto &w : workers) w.join();
    done = true;
    taker.join();
    std::vector<int64_t> rest = take_api_rows(true);
    taken.insert(taken.end(), rest.begin(), rest.end());
    std::set<int64_t> calls, links;
    for (size_t i = 0; i + kWidth <= taken.size(); i += kWidth) {
        const int64_t *r = taken.data() + i;
        (r[0] == rlscope::cupti::kCudaApi ? calls : links).insert(r[7]);
        if (r[0] == rlscope::cupti::kCorrelation) CHECK(r[8] == (r[7] - 1) / kCalls);
    }
    CHECK(calls.size() == kThreads * kCalls && links.size() == kThreads * kCalls);
    CHECK(taken.size() == 2 * kThreads * kCalls * kWidth);
}

}  // namespace

int main() {
    g_api_calls.recording = true;
    one_thread_rows();
    nested_driver_call();
    many_threads_rows();
    if (failures == 0) std::printf("ok\n");
    return failures == 0 ? 0 : 1;
}

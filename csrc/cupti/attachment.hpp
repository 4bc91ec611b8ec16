// This process's hold on CUPTI (subscribe, ask for a detach, detach at the next API exit) and
// the external-correlation hooks rlscope.operation() calls. Included once, by module.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "api_calls.hpp"
#include "loader.hpp"

namespace {

// This process's hold on CUPTI, shared by the tracers it runs one after another.
struct Attachment {
    std::mutex mutex;  // taken to subscribe, to ask for a detach, to call it off, and to detach
    CUpti_SubscriberHandle subscriber = nullptr;
    std::atomic<bool> attached{false};        // subscribed (and not yet finalized)
    std::atomic<bool> detach_pending{false};  // detach at the next API exit
    std::atomic<uint64_t> generation{1};      // one more at every detach: older correlation pushes are gone
    std::atomic<uint64_t> detaches{0};
};
Attachment g_attach;
// The bench's bare client (floor.hpp) while it runs: CUPTI has one client at a time. Atomic: CUPTI's
// buffer thread reads it.
std::atomic<void *> g_floor{nullptr};

// Called with g_attach.mutex held; the only place cuptiFinalize is called.
void detach_now() {
    g_attach.detach_pending = false;
    g_attach.attached = false;  // first: correlation pushes stop before CUPTI goes
    g_attach.subscriber = nullptr;
    ++g_attach.generation;
    g_api.Finalize();
    ++g_attach.detaches;
}

// The subscriber's callback: while a detach waits (runtime and driver domains enabled), the
// next API exit detaches; otherwise it records the API calls the tracer enabled (api_calls.hpp).
void CUPTIAPI on_api_call(void *, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const auto *call = static_cast<const CUpti_CallbackData *>(data);
    if (!g_attach.detach_pending.load(std::memory_order_acquire)) {
        if (g_api_calls.recording.load(std::memory_order_relaxed)) record_api_call(domain, cbid, call);
        return;
    }
    if (call->callbackSite != CUPTI_API_EXIT) return;
    std::unique_lock<std::mutex> lock(g_attach.mutex, std::try_to_lock);
    if (lock.owns_lock() && g_attach.detach_pending) detach_now();  // else: being re-attached, or the next exit
}

// With g_attach.mutex held: subscribe unless attached (a detach still waiting is called off).
CUptiResult attach(char *old_name, size_t old_size) {
    if (g_attach.detach_pending) {
        g_attach.detach_pending = false;
        g_api.EnableDomain(0, g_attach.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
        g_api.EnableDomain(0, g_attach.subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
    }
    if (g_attach.attached) return CUPTI_SUCCESS;
    CUptiResult r;
    if (g_api.Subscribe_v2) {
        CUpti_SubscriberParams params{};
        params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
        params.subscriberName = "rlscope";
        params.oldSubscriberName = old_name;
        params.oldSubscriberSize = old_size;
        r = g_api.Subscribe_v2(&g_attach.subscriber, &on_api_call, nullptr, &params);
    } else {
        r = g_api.Subscribe(&g_attach.subscriber, &on_api_call, nullptr);
    }
    g_attach.attached = r == CUPTI_SUCCESS;
    return r;
}

// Without g_attach.mutex held: make the CUDA API exit that a waiting detach needs, with the
// cheapest driver call there is, so CUPTI is gone when a session's stop returns. Why: until it
// is, another CUPTI client that starts (torch.profiler, Nsight) fails to initialise. libcuda is
// only looked up, never loaded: a process that never loaded it has nothing to detach from.
void settle_detach() {
    if (!g_attach.detach_pending.load(std::memory_order_acquire)) return;
    static int (*get_current)(void **) = [] {
        void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        return libcuda ? reinterpret_cast<int (*)(void **)>(dlsym(libcuda, "cuCtxGetCurrent")) : nullptr;
    }();
    void *context = nullptr;
    if (get_current) get_current(&context);
}

// With g_attach.mutex held, every activity kind off and the buffers flushed: detach at the next
// CUDA API exit.
void request_detach() {
    if (!g_attach.attached || g_attach.detach_pending) return;
    g_attach.detach_pending = true;
    g_api.EnableDomain(1, g_attach.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    g_api.EnableDomain(1, g_attach.subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
}

// The hooks rlscope._hotpath.Operations calls on operation enter/exit (capsule payload). Each
// thread keeps its open operations (t_operations, which API callbacks read). Where API calls
// are activity records, the id is also pushed as CUPTI's external correlation id, and each open
// operation remembers the attachment it pushed into (0: none), so an exit pops only what CUPTI
// still holds, and nothing is pushed while CUPTI is detached (any CUPTI call would attach it again).
struct CorrelationHooks {
    void (*push)(int64_t);
    void (*pop)();
};
void push_correlation(int64_t id) {
    uint64_t generation = 0;
    if (!g_api_calls.by_callback.load(std::memory_order_relaxed) && g_attach.attached.load(std::memory_order_acquire) &&
        g_api.PushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, static_cast<uint64_t>(id)) ==
            CUPTI_SUCCESS)
        generation = g_attach.generation.load();
    t_operations.emplace_back(generation, id);
}
void pop_correlation() {
    if (t_operations.empty()) return;  // entered before the hooks were set
    const uint64_t generation = t_operations.back().first;
    t_operations.pop_back();
    if (generation != 0 && generation == g_attach.generation.load() && g_attach.attached.load())
        g_api.PopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
}
CorrelationHooks g_hooks{push_correlation, pop_correlation};


const CUpti_ActivityKind kGpuKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

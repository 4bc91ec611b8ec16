// Loading libcupti at run time (dlopen, reusing a copy already in the process), the entry points
// rlscope uses (dlsym), and the small helpers every other part needs: the CLOCK_MONOTONIC
// timestamp callback and a write(2) loop. Included once, by module.cpp.
#pragma once

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include <cupti.h>

#include "decode.hpp"  // the record iterator and callback-name types

namespace {

// The libcupti entry points used here, resolved with dlsym.
struct CuptiApi {
    void *handle = nullptr;
    std::string path;
    CUptiResult (*GetVersion)(uint32_t *) = nullptr;
    CUptiResult (*GetResultString)(CUptiResult, const char **) = nullptr;
    CUptiResult (*GetTimestamp)(uint64_t *) = nullptr;
    CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *) = nullptr;
    CUptiResult (*Subscribe_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
                                CUpti_SubscriberParams *) = nullptr;
    CUptiResult (*EnableDomain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain) = nullptr;
    CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) = nullptr;
    CUptiResult (*Finalize)() = nullptr;
    CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                             CUpti_BuffersCallbackCompleteFunc) = nullptr;
    CUptiResult (*ActivityRegisterTimestampCallback)(CUpti_TimestampCallbackFunc) = nullptr;
    CUptiResult (*ActivityEnable)(CUpti_ActivityKind) = nullptr;
    CUptiResult (*ActivityDisable)(CUpti_ActivityKind) = nullptr;
    CUptiResult (*ActivityFlushAll)(uint32_t) = nullptr;
    CUptiResult (*ActivityEnableRuntimeApi)(CUpti_CallbackId, uint8_t) = nullptr;
    CUptiResult (*ActivityEnableDriverApi)(CUpti_CallbackId, uint8_t) = nullptr;
    CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *) = nullptr;
    CUptiResult (*PushExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
    CUptiResult (*PopExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t *) = nullptr;
    rlscope::cupti::NextRecordFn GetNextRecord = nullptr;
    rlscope::cupti::CallbackNameFn GetCallbackName = nullptr;
};
CuptiApi g_api;

template <typename F>
void resolve(F &fn, const char *symbol, bool required = true) {
    fn = reinterpret_cast<F>(dlsym(g_api.handle, symbol));
    if (!fn && required) throw std::runtime_error(std::string("libcupti lacks ") + symbol + "; CUDA 12 or newer is needed");
}

std::string result_name(CUptiResult code) {
    const char *text = nullptr;
    if (g_api.GetResultString && g_api.GetResultString(code, &text) == CUPTI_SUCCESS && text) return text;
    return "CUPTI error " + std::to_string(static_cast<int>(code));
}

// Load libcupti: the copy already in the process if a framework loaded one (two copies in
// one process would fight over the driver's profiling hooks), else the first candidate path.
std::string load(const std::vector<std::string> &candidates) {
    if (g_api.handle) return g_api.path;
    std::string errors;
    void *handle = nullptr;
    for (const char *soname : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"})
        if ((handle = dlopen(soname, RTLD_NOW | RTLD_NOLOAD))) break;
    for (size_t i = 0; !handle && i < candidates.size(); ++i) {
        handle = dlopen(candidates[i].c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!handle) errors += std::string("\n  ") + dlerror();
    }
    if (!handle) throw std::runtime_error("could not load libcupti:" + (errors.empty() ? std::string(" no candidate") : errors));
    g_api.handle = handle;
    link_map *map = nullptr;
    g_api.path = dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map ? map->l_name : "libcupti";
    resolve(g_api.GetVersion, "cuptiGetVersion");
    resolve(g_api.GetResultString, "cuptiGetResultString");
    resolve(g_api.GetTimestamp, "cuptiGetTimestamp");
    resolve(g_api.Subscribe, "cuptiSubscribe");
    resolve(g_api.Subscribe_v2, "cuptiSubscribe_v2", false);
    resolve(g_api.EnableDomain, "cuptiEnableDomain");
    resolve(g_api.EnableCallback, "cuptiEnableCallback");
    resolve(g_api.Finalize, "cuptiFinalize");
    resolve(g_api.ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks");
    resolve(g_api.ActivityRegisterTimestampCallback, "cuptiActivityRegisterTimestampCallback", false);
    resolve(g_api.ActivityEnable, "cuptiActivityEnable");
    resolve(g_api.ActivityDisable, "cuptiActivityDisable");
    resolve(g_api.ActivityFlushAll, "cuptiActivityFlushAll");
    resolve(g_api.ActivityEnableRuntimeApi, "cuptiActivityEnableRuntimeApi", false);
    resolve(g_api.ActivityEnableDriverApi, "cuptiActivityEnableDriverApi", false);
    resolve(g_api.ActivityGetNumDroppedRecords, "cuptiActivityGetNumDroppedRecords");
    resolve(g_api.PushExternalCorrelationId, "cuptiActivityPushExternalCorrelationId");
    resolve(g_api.PopExternalCorrelationId, "cuptiActivityPopExternalCorrelationId");
    resolve(g_api.GetNextRecord, "cuptiActivityGetNextRecord");
    resolve(g_api.GetCallbackName, "cuptiGetCallbackName", false);
    return g_api.path;
}

void require_loaded() {
    if (!g_api.handle) throw std::runtime_error("libcupti is not loaded; call rlscope._cupti.load() first");
}

uint64_t CUPTIAPI monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

void write_all(int fd, const void *data, size_t size) {
    const char *p = static_cast<const char *>(data);
    while (size > 0) {
        const ssize_t n = ::write(fd, p, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            return;  // disk full or closed: the reader sees a short file and says so
        }
        p += n;
        size -= static_cast<size_t>(n);
    }
}

}  // namespace

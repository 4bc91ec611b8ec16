// rlscope._cupti: GPU activity collector on the CUPTI Activity API.
//
// libcupti is opened at run time (dlopen), so this module builds wherever the CUDA headers
// are found and imports on machines without CUDA; Python decides whether a GPU is there.
//
// Data path, none of it under the GIL: CUPTI hands filled activity buffers to its worker
// thread -> buffer_completed() decodes each record into int64 rows laid out like
// rlscope.trace.schema.ROW_FIELDS -> full chunks are written with write(2) to
// <trace>/gpu.rows (raw N x 9 int64), new names appended to <trace>/gpu.names. The Python
// reader joins them with the process's events. Timestamps come from CLOCK_MONOTONIC through
// cuptiActivityRegisterTimestampCallback: the clock of time.perf_counter_ns and of the
// CPU-side collectors, so no conversion is needed later.
//
// Attribution: rlscope.operation() enter/exit push/pop a CUPTI external correlation id (the
// operation's trace symbol id) through the hooks this module exports as a capsule; CUPTI
// then emits an EXTERNAL_CORRELATION record for every API call made inside the operation.
//
// Letting go: once CUPTI has recorded in a process, the process stays slower after every
// activity kind is disabled and the subscriber is gone; only cuptiFinalize gives its speed back
// (SB3 PPO on CUDA on the H100: 15-20% of an iteration, bench/ppo_cuda_process_states.py states F
// and D). CUPTI asks for cuptiFinalize at the exit of a CUDA API call, so stopping a session only
// asks for it: the subscriber's callback detaches at the next API exit on any thread, and a
// session started before then keeps CUPTI attached.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "call_probe.hpp"
#include "decode.hpp"

namespace nb = nanobind;
using namespace nb::literals;
using namespace rlscope::cupti;

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
    NextRecordFn GetNextRecord = nullptr;
    CallbackNameFn GetCallbackName = nullptr;
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

// Called with g_attach.mutex held; the only place cuptiFinalize is called.
void detach_now() {
    g_attach.detach_pending = false;
    g_attach.attached = false;  // first: correlation pushes stop before CUPTI goes
    g_attach.subscriber = nullptr;
    ++g_attach.generation;
    g_api.Finalize();
    ++g_attach.detaches;
}

// The subscriber's callback: enabled (runtime and driver domains) only while a detach waits.
void CUPTIAPI on_api_call(void *, CUpti_CallbackDomain domain, CUpti_CallbackId, const void *data) {
    if (!g_attach.detach_pending.load(std::memory_order_acquire)) return;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    if (static_cast<const CUpti_CallbackData *>(data)->callbackSite != CUPTI_API_EXIT) return;
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

// With g_attach.mutex held, every activity kind off and the buffers flushed: detach at the next
// CUDA API exit.
void request_detach() {
    if (!g_attach.attached || g_attach.detach_pending) return;
    g_attach.detach_pending = true;
    g_api.EnableDomain(1, g_attach.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
    g_api.EnableDomain(1, g_attach.subscriber, CUPTI_CB_DOMAIN_DRIVER_API);
}

// The hooks rlscope._hotpath.Operations calls on operation enter/exit (capsule payload). Per
// thread, each open operation remembers the attachment it pushed its id in (0: none), so an
// exit pops only what CUPTI still holds, and nothing is pushed while CUPTI is detached (any
// CUPTI call would attach it again).
struct CorrelationHooks {
    void (*push)(int64_t);
    void (*pop)();
};
thread_local std::vector<uint64_t> t_pushed;
void push_correlation(int64_t id) {
    uint64_t generation = 0;
    if (g_attach.attached.load(std::memory_order_acquire) &&
        g_api.PushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, static_cast<uint64_t>(id)) ==
            CUPTI_SUCCESS)
        generation = g_attach.generation.load();
    t_pushed.push_back(generation);
}
void pop_correlation() {
    if (t_pushed.empty()) return;  // entered before the hooks were set
    const uint64_t generation = t_pushed.back();
    t_pushed.pop_back();
    if (generation != 0 && generation == g_attach.generation.load() && g_attach.attached.load())
        g_api.PopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
}
CorrelationHooks g_hooks{push_correlation, pop_correlation};


const CUpti_ActivityKind kGpuKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                        CUPTI_ACTIVITY_KIND_MEMSET};

class Tracer;
Tracer *g_tracer = nullptr;  // CUPTI's buffer callbacks carry no user data: one tracer per process

class Tracer {
public:
    Tracer(std::string rows_path, std::string names_path, size_t chunk_rows, size_t buffer_bytes,
           std::string dump_dir)
        : rows_path_(std::move(rows_path)), names_path_(std::move(names_path)), chunk_values_(chunk_rows * kWidth),
          buffer_bytes_(buffer_bytes), dump_dir_(std::move(dump_dir)) {
        rows_.reserve(chunk_values_ * 2);  // a chunk plus one activity buffer's worth, allocated once
    }
    ~Tracer() {
        if (running_) stop();
        close_files();
    }
    Tracer(const Tracer &) = delete;
    Tracer &operator=(const Tracer &) = delete;

    // Claim CUPTI and start recording. Returns {"ok": True} or {"ok": False, "code": int,
    // "error": str, "step": str, "subscriber": str}: the caller turns failures into messages.
    nb::dict start(bool runtime, bool driver, bool gpu, bool sync, const std::vector<std::string> &untraced_apis) {
        require_loaded();
        nb::dict out;
        if (g_tracer) return failure(out, "start", CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, "rlscope");
        std::lock_guard<std::mutex> lock(g_attach.mutex);
        char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
        CUptiResult r = attach(old_name, sizeof(old_name) - 1);
        if (r != CUPTI_SUCCESS) return failure(out, "cuptiSubscribe", r, old_name);
        rows_fd_ = ::open(rows_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        names_fd_ = ::open(names_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (rows_fd_ < 0 || names_fd_ < 0) {
            const std::string why = std::strerror(errno);
            release();
            close_files();
            throw std::runtime_error("cannot create " + rows_path_ + ": " + why);
        }
        decoder_ = std::make_unique<Decoder>(g_api.GetNextRecord, g_api.GetCallbackName);
        g_tracer = this;
        runtime_ = runtime;
        driver_ = driver;
        gpu_ = gpu;
        sync_ = sync;
        untraced_.clear();
        if (runtime) find_untraced(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, untraced_apis);
        if (driver) find_untraced(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, untraced_apis);
        if ((r = register_callbacks()) != CUPTI_SUCCESS) return release_failure(out, "cuptiActivityRegisterCallbacks", r);
        if ((r = set_kinds(true, true)) != CUPTI_SUCCESS) return release_failure(out, "cuptiActivityEnable", r);
        running_ = true;
        out["ok"] = true;
        out["own_clock"] = own_clock_;
        return out;
    }

    // Flush everything CUPTI holds, write the last rows and let go of CUPTI (detached at the next
    // CUDA API exit).
    nb::dict stop() {
        if (running_) {
            nb::gil_scoped_release unlocked;  // buffer callbacks run now, possibly on CUPTI's thread
            {
                std::lock_guard<std::mutex> lock(g_attach.mutex);
                release();
                if (g_tracer == this) g_tracer = nullptr;
            }
            std::lock_guard<std::mutex> lock(mutex_);
            write_rows();
            running_ = false;
        }
        close_files();
        return stats();
    }

    // Calibration's alternating windows (rlscope.collect.windows): stop or resume recording
    // CUDA API calls and GPU activities, so that one process can compare stretches with and
    // without them. Only the layers start() enabled come back. Recording neither turns every
    // activity kind off, CUPTI's own overhead records included, and keeps CUPTI attached:
    // detaching at every switch (cuptiFinalize, hundreds of times a run) crashed a JAX process
    // whose XLA threads were inside CUDA at the time (SIGSEGV, SIGFPE: 2 of 15 windows runs).
    // Only a session's stop detaches, once.
    void record(bool api, bool gpu) {
        if (running_) set_kinds(api, gpu);
    }

    // In a forked child: CUPTI's state belongs to the parent; drop everything without a call.
    void abandon() {
        running_ = false;
        on_.clear();
        g_attach.attached = g_attach.detach_pending = false;
        g_attach.subscriber = nullptr;
        if (g_tracer == this) g_tracer = nullptr;
        rows_.clear();
        close_files();
    }

    nb::dict stats() {
        std::lock_guard<std::mutex> lock(mutex_);
        nb::dict out;
        out["records"] = decoder_ ? decoder_->stats.records : 0;
        out["incomplete"] = decoder_ ? decoder_->stats.incomplete : 0;
        out["other_kinds"] = decoder_ ? decoder_->stats.other : 0;
        out["dropped"] = dropped_;
        out["buffers"] = buffers_;
        out["rows_written"] = rows_written_;
        out["own_clock"] = own_clock_;
        out["untraced_api_ids"] = untraced_.size();
        out["kinds_on"] = std::vector<int>(on_.begin(), on_.end());  // CUpti_ActivityKind values
        out["cupti_attached"] = g_attach.attached.load();
        out["detach_pending"] = g_attach.detach_pending.load();
        out["detaches"] = g_attach.detaches.load();  // in this process so far
        // Which threads decoded and wrote the buffers, and for how long: [thread ident, buffers, ns].
        nb::list processing;
        for (const auto &[thread, spent] : processing_)
            processing.append(nb::make_tuple(thread, spent.first, spent.second));
        out["buffer_processing"] = processing;
        return out;
    }

    nb::capsule hooks() { return nb::capsule(&g_hooks, "rlscope.correlation_hooks"); }

private:
    // The callback ids of the APIs named in ``names`` (any version suffix ignored): set_kinds()
    // stops recording them. Recording an API call costs CUPTI about a microsecond, far more than
    // the bookkeeping queries frameworks make around every launch take themselves.
    void find_untraced(CUpti_CallbackDomain domain, uint32_t size, const std::vector<std::string> &names) {
        if (names.empty() || !g_api.GetCallbackName || !g_api.ActivityEnableRuntimeApi || !g_api.ActivityEnableDriverApi)
            return;
        for (uint32_t cbid = 1; cbid < size; ++cbid) {
            const char *name = nullptr;
            if (g_api.GetCallbackName(domain, cbid, &name) != CUPTI_SUCCESS || !name) continue;
            const std::string text = without_version(name);
            for (const std::string &skip : names)
                if (text == skip) untraced_.emplace_back(domain, cbid);
        }
    }

    // Buffer and clock callbacks: once per attachment (cuptiFinalize forgets them), with the
    // attachment's range of correlation ids. Called with g_attach.mutex held, after every record
    // of the attachment before was flushed.
    CUptiResult register_callbacks() {
        own_clock_ = g_api.ActivityRegisterTimestampCallback &&
                     g_api.ActivityRegisterTimestampCallback(&monotonic_ns) == CUPTI_SUCCESS;
        std::lock_guard<std::mutex> lock(mutex_);
        decoder_->correlation_base = static_cast<int64_t>(g_attach.generation.load() - 1) << 32;
        if (!own_clock_) {  // older CUPTI: shift its clock onto CLOCK_MONOTONIC
            uint64_t cupti_now = 0;
            g_api.GetTimestamp(&cupti_now);
            decoder_->offset = static_cast<int64_t>(monotonic_ns()) - static_cast<int64_t>(cupti_now);
        }
        return g_api.ActivityRegisterCallbacks(&Tracer::buffer_requested, &Tracer::buffer_completed);
    }

    // Turn each activity kind of the layers start() was given on or off: API calls (with their
    // external correlations, and synchronisations if asked for) with ``api``, kernels, copies and
    // memsets with ``gpu``, CUPTI's overhead records with either. Returns the first failure.
    CUptiResult set_kinds(bool api, bool gpu) {
        CUptiResult first = CUPTI_SUCCESS;
        auto toggle = [&](CUpti_ActivityKind kind, bool on) {
            if (on == (on_.count(kind) > 0)) return;
            const CUptiResult r = on ? g_api.ActivityEnable(kind) : g_api.ActivityDisable(kind);
            if (r != CUPTI_SUCCESS) {
                if (first == CUPTI_SUCCESS) first = r;
                return;
            }
            if (on) on_.insert(kind);
            else on_.erase(kind);
        };
        toggle(CUPTI_ACTIVITY_KIND_RUNTIME, runtime_ && api);
        toggle(CUPTI_ACTIVITY_KIND_DRIVER, driver_ && api);
        toggle(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, (runtime_ || driver_) && api);
        toggle(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, sync_ && api);
        if (api)  // enabling a kind (again) traces every API of it: untrace the skipped ones
            for (const auto &[domain, cbid] : untraced_)
                (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? g_api.ActivityEnableRuntimeApi
                                                        : g_api.ActivityEnableDriverApi)(cbid, 0);
        for (CUpti_ActivityKind kind : kGpuKinds) toggle(kind, gpu_ && gpu);
        toggle(CUPTI_ACTIVITY_KIND_OVERHEAD, api || gpu);
        return first;
    }

    // With g_attach.mutex held: every kind off, what was recorded handed to buffer_completed,
    // and CUPTI asked to detach.
    void release() {
        if (!g_attach.attached) return;  // a failed start: never attached
        set_kinds(false, false);
        g_api.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        request_detach();
    }

    nb::dict failure(nb::dict &out, const char *step, CUptiResult code, const char *subscriber) {
        out["ok"] = false;
        out["code"] = static_cast<int>(code);
        out["error"] = result_name(code);
        out["step"] = step;
        out["subscriber"] = subscriber;
        return out;
    }

    nb::dict release_failure(nb::dict &out, const char *step, CUptiResult code) {  // g_attach.mutex held
        release();
        if (g_tracer == this) g_tracer = nullptr;
        close_files();
        return failure(out, step, code, "");
    }

    void close_files() {
        if (rows_fd_ >= 0) ::close(rows_fd_);
        if (names_fd_ >= 0) ::close(names_fd_);
        rows_fd_ = names_fd_ = -1;
    }

    static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
        const size_t bytes = g_tracer ? g_tracer->buffer_bytes_ : (1u << 20);
        *buffer = static_cast<uint8_t *>(std::aligned_alloc(8, bytes));
        *size = *buffer ? bytes : 0;
        *max_records = 0;
    }

    static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t, size_t valid) {
        if (g_tracer) g_tracer->consume(context, stream, buffer, valid);
        std::free(buffer);
    }

    void consume(CUcontext context, uint32_t stream, uint8_t *buffer, size_t valid) {
        const uint64_t began = monotonic_ns();
        std::lock_guard<std::mutex> lock(mutex_);
        ++buffers_;
        if (!dump_dir_.empty() && valid > 0) dump(buffer, valid);
        decoder_->decode(buffer, valid, rows_);
        size_t dropped = 0;
        if (g_api.ActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) dropped_ += dropped;
        if (!decoder_->names.fresh.empty()) {  // names first: rows never refer to an unwritten name
            std::string text;
            for (const std::string &name : decoder_->names.fresh) {
                text += name;
                text += '\n';
            }
            decoder_->names.fresh.clear();
            write_all(names_fd_, text.data(), text.size());
        }
        if (rows_.size() >= chunk_values_) write_rows();
        auto &spent = processing_[static_cast<uint64_t>(pthread_self())];
        spent.first += 1;
        spent.second += monotonic_ns() - began;
    }

    void write_rows() {
        if (rows_.empty() || rows_fd_ < 0) return;
        write_all(rows_fd_, rows_.data(), rows_.size() * sizeof(int64_t));
        rows_written_ += rows_.size() / kWidth;
        rows_.clear();  // keeps the capacity
    }

    // Raw activity buffers, for recording decoder test fixtures (RLSCOPE_CUPTI_DUMP_DIR):
    // bufferN.bin with kernel-name pointers zeroed (they point into this process) and
    // bufferN.kernels with those names, one line per kernel record.
    void dump(const uint8_t *buffer, size_t valid) {
        std::vector<uint8_t> copy(buffer, buffer + valid);
        std::string kernels;
        CUpti_Activity *record = nullptr;
        while (g_api.GetNextRecord(copy.data(), valid, &record) == CUPTI_SUCCESS) {
            if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL)
                continue;
            auto *k = reinterpret_cast<CUpti_ActivityKernel10 *>(record);
            kernels += k->name ? k->name : "";
            kernels += '\n';
            k->name = nullptr;
        }
        const std::string base = dump_dir_ + "/buffer" + std::to_string(buffers_);
        for (const auto &[suffix, data, size] :
             {std::tuple<const char *, const void *, size_t>{".bin", copy.data(), valid},
              std::tuple<const char *, const void *, size_t>{".kernels", kernels.data(), kernels.size()}}) {
            const int fd = ::open((base + suffix).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0) return;
            write_all(fd, data, size);
            ::close(fd);
        }
    }

    std::string rows_path_, names_path_;
    size_t chunk_values_, buffer_bytes_;
    std::string dump_dir_;
    std::mutex mutex_;
    std::unique_ptr<Decoder> decoder_;
    std::vector<int64_t> rows_;
    std::set<int> on_;  // the activity kinds on now (set_kinds() switches them)
    int rows_fd_ = -1, names_fd_ = -1;
    bool running_ = false, own_clock_ = false;
    bool runtime_ = false, driver_ = false, gpu_ = false, sync_ = false;  // the layers start() enabled
    std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>> untraced_;
    uint64_t dropped_ = 0, buffers_ = 0, rows_written_ = 0;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> processing_;  // thread -> (buffers, ns)
};

CallProbe g_probe;  // rlscope.collect.cupti_residual's timed CUDA calls

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
             "untraced_apis"_a = std::vector<std::string>())
        .def("record", &Tracer::record, "api"_a, "gpu"_a,
             "Stop or resume recording CUDA API calls and GPU activities (calibration's windows).")
        .def("stop", &Tracer::stop)
        .def("abandon", &Tracer::abandon)
        .def("stats", &Tracer::stats)
        .def("hooks", &Tracer::hooks, "Capsule of the external-correlation push/pop functions.");
}

// The Tracer: enables CUPTI's activity kinds and API callbacks, takes the filled activity buffers
// on CUPTI's worker thread, decodes them into int64 rows and writes full chunks to gpu.rows
// (names to gpu.names), none of it under the GIL. Included once, by module.cpp.
//
// Every write of rows is followed by a checksum record in gpu.rows.crc (rlscope.trace.schema's
// GPU_CRC_RECORD), and every write of names by one in gpu.names.crc, so the reader can tell damaged
// rows and names from good ones. A thread of the tracer's
// hands CUPTI's completed records and every thread's API calls to gpu.rows once a second
// (RLSCOPE_FLUSH_INTERVAL_S, as rlscope.collect.flusher does for the CPU side), so a process
// killed without warning loses about that much.
#pragma once

#include <nanobind/nanobind.h>

#include <fcntl.h>
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "attachment.hpp"
#include "crc32.hpp"
#include "decode.hpp"

namespace nb = nanobind;
using namespace rlscope::cupti;

namespace {

class Tracer;
Tracer *g_tracer = nullptr;  // CUPTI's buffer callbacks carry no user data: one tracer per process

// Seconds between the tracer's time-bound writes: RLSCOPE_FLUSH_INTERVAL_S (checked by
// rlscope.collect.flusher before a session starts), 1 if unset; "inf" turns them off (0 returned).
std::chrono::nanoseconds flush_interval() {
    const char *text = std::getenv("RLSCOPE_FLUSH_INTERVAL_S");
    double seconds = 1.0;
    if (text && *text) {
        char *end = nullptr;
        const double value = std::strtod(text, &end);
        if (end != text && value > 0) seconds = value;
    }
    if (!(seconds < 1e9)) return std::chrono::nanoseconds(0);
    return std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
}

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
    //
    // ``api_callbacks``: record API calls through the Callback API (api_calls.hpp) instead of
    // activity records.
    nb::dict start(bool runtime, bool driver, bool gpu, bool sync, const std::vector<std::string> &untraced_apis,
                   bool api_callbacks, bool nvtx) {
        require_loaded();
        nb::dict out;
        if (g_tracer || g_floor.load())
            return failure(out, "start", CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
                           g_tracer ? "rlscope" : "the bench's bare CUPTI client (rlscope._cupti.Floor)");
        std::lock_guard<std::mutex> lock(g_attach.mutex);
        char old_name[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 1] = {0};
        CUptiResult r = attach(old_name, sizeof(old_name) - 1);
        if (r != CUPTI_SUCCESS) return failure(out, "cuptiSubscribe", r, old_name);
        rows_fd_ = ::open(rows_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        names_fd_ = ::open(names_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        crc_fd_ = ::open((rows_path_ + ".crc").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        names_crc_fd_ = ::open((names_path_ + ".crc").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (rows_fd_ < 0 || names_fd_ < 0 || crc_fd_ < 0 || names_crc_fd_ < 0) {
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
        nvtx_ = nvtx;
        by_callback_ = api_callbacks;
        // Recording an API call costs CUPTI about a microsecond, far more than the bookkeeping
        // queries frameworks make around every launch take themselves: set_kinds() leaves these out.
        untraced_ = api_ids(runtime, driver, untraced_apis);
        take_api_rows(true);  // a row a thread added after the last session's stop took them: not ours
        g_api_calls.by_callback = api_callbacks;
        if ((r = register_callbacks()) != CUPTI_SUCCESS) return release_failure(out, "cuptiActivityRegisterCallbacks", r);
        if ((r = set_kinds(true, true)) != CUPTI_SUCCESS) return release_failure(out, "cuptiActivityEnable", r);
        running_ = true;
        start_flusher();
        out["ok"] = true;
        out["own_clock"] = own_clock_;
        return out;
    }

    // Flush everything CUPTI holds, write the last rows and let go of CUPTI (detached at the
    // CUDA API exit that settle_detach makes).
    nb::dict stop() {
        if (running_) {
            nb::gil_scoped_release unlocked;  // buffer callbacks run now, possibly on CUPTI's thread
            stop_flusher();
            {
                std::lock_guard<std::mutex> lock(g_attach.mutex);
                release();
                if (g_tracer == this) g_tracer = nullptr;
            }
            settle_detach();
            std::lock_guard<std::mutex> lock(mutex_);
            append_api_rows(take_api_rows(true));  // the callbacks are off: every thread's rows
            write_fresh_names();
            write_rows();
            g_api_calls.by_callback = false;
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
        (void)flusher_.release();  // the thread is the parent's: neither joined nor destroyed here
        on_.clear();
        callbacks_on_ = false;
        g_api_calls.recording = g_api_calls.by_callback = false;
        g_api_calls.threads.clear();  // the parent's threads: not in this process
        g_api_calls.pending.clear();
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

    // Every (domain, callback id) of the runtime (``runtime``) and driver (``driver``) APIs named
    // in ``names`` (version suffix left off).
    using ApiIds = std::vector<std::pair<CUpti_CallbackDomain, CUpti_CallbackId>>;
    static ApiIds api_ids(bool runtime, bool driver, const std::vector<std::string> &names) {
        using Domain = std::tuple<CUpti_CallbackDomain, uint32_t, bool>;
        ApiIds ids;
        if (names.empty() || !g_api.GetCallbackName) return ids;
        for (const auto &[domain, size, on] : {Domain{CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, runtime},
                                               Domain{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, driver}}) {
            for (uint32_t cbid = 1; on && cbid < size; ++cbid) {
                const char *name = nullptr;
                if (g_api.GetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && name &&
                    std::find(names.begin(), names.end(), without_version(name)) != names.end())
                    ids.emplace_back(domain, cbid);
            }
        }
        return ids;
    }

private:
    // Turn the API callbacks on or off: the enabled domains whole, less the untraced APIs. Off
    // before on: a callback never sees a half-made set.
    CUptiResult set_callbacks(bool on) {
        if (on == callbacks_on_) return CUPTI_SUCCESS;
        if (!on) g_api_calls.recording = false;
        CUptiResult first = CUPTI_SUCCESS;
        auto check = [&](CUptiResult r) {
            if (r != CUPTI_SUCCESS && first == CUPTI_SUCCESS) first = r;
        };
        if (runtime_) check(g_api.EnableDomain(on, g_attach.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API));
        if (driver_) check(g_api.EnableDomain(on, g_attach.subscriber, CUPTI_CB_DOMAIN_DRIVER_API));
        if (on)
            for (const auto &[domain, cbid] : untraced_) check(g_api.EnableCallback(0, g_attach.subscriber, domain, cbid));
        callbacks_on_ = on;
        if (on) g_api_calls.recording = true;
        return first;
    }

    // Rows recorded by the API callbacks, named and numbered like decoded activity records.
    // Called with mutex_ held.
    void append_api_rows(std::vector<int64_t> &&rows) {
        for (size_t i = 0; i + kWidth <= rows.size(); i += kWidth) {
            int64_t &name = rows[i + 6], &correlation = rows[i + 7];
            if (is_api_name_key(name)) {
                const auto [driver, cbid] = api_of_key(name);
                name = decoder_->api_name(driver, cbid);
            }
            if (correlation > 0) correlation += decoder_->correlation_base;
        }
        rows_.insert(rows_.end(), rows.begin(), rows.end());
    }

    // Names first: rows never refer to an unwritten name. Each write is followed by its record in
    // gpu.names.crc, as rows' are: (index of its first name, bytes, CRC-32 of those bytes, CRC-32
    // of the record's first 20 bytes). Called with mutex_ held.
    void write_fresh_names() {
        if (decoder_->names.fresh.empty()) return;
        std::string text;
        for (const std::string &name : decoder_->names.fresh) {
            text += name;
            text += '\n';
        }
        const uint64_t count = decoder_->names.fresh.size();
        decoder_->names.fresh.clear();
        write_all(names_fd_, text.data(), text.size());
        write_record(names_crc_fd_, names_written_, text.size(), crc32(text.data(), text.size()));
        names_written_ += count;
    }

    // One checksum record (rlscope.trace.schema's GPU_CRC_RECORD), little-endian.
    static void write_record(int fd, uint64_t first, uint64_t count, uint32_t crc) {
        unsigned char record[24];
        std::memcpy(record, &first, 8);
        std::memcpy(record + 8, &count, 8);
        std::memcpy(record + 16, &crc, 4);
        const uint32_t record_crc = crc32(record, 20);
        std::memcpy(record + 20, &record_crc, 4);
        write_all(fd, record, sizeof(record));
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
        const bool activity = !by_callback_;
        toggle(CUPTI_ACTIVITY_KIND_RUNTIME, activity && runtime_ && api);
        toggle(CUPTI_ACTIVITY_KIND_DRIVER, activity && driver_ && api);
        toggle(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, activity && (runtime_ || driver_) && api);
        toggle(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, sync_ && api);
        toggle(CUPTI_ACTIVITY_KIND_MARKER, nvtx_ && api);  // NVTX ranges: CPU-side, like the API calls
        if (by_callback_) {
            const CUptiResult r = set_callbacks((runtime_ || driver_) && api);
            if (r != CUPTI_SUCCESS && first == CUPTI_SUCCESS) first = r;
        } else if (api && g_api.ActivityEnableRuntimeApi && g_api.ActivityEnableDriverApi)
            // enabling a kind (again) traces every API of it: untrace the skipped ones
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
        for (int *fd : {&rows_fd_, &names_fd_, &crc_fd_, &names_crc_fd_}) {
            if (*fd >= 0) ::close(*fd);
            *fd = -1;
        }
    }

    // The time bound (flush_interval()): every interval, CUPTI's completed activity buffers, full
    // or not, are handed over (cuptiActivityFlushAll(0), which CUPTI means to be called at
    // intervals from a thread of the client's), and every thread's recorded API calls with them,
    // and all rows so far are written. CUPTI's own periodic flush (cuptiActivityFlushPeriod)
    // would not do: it returns full buffers only, which a slow loop takes minutes to fill.
    void start_flusher() {
        const std::chrono::nanoseconds interval = flush_interval();
        if (interval.count() == 0) return;
        stop_flusher_ = false;
        flusher_ = std::make_unique<std::thread>([this, interval] {
            std::unique_lock<std::mutex> lock(flusher_mutex_);
            while (!flusher_wake_.wait_for(lock, interval, [this] { return stop_flusher_; })) {
                lock.unlock();
                flush_now();
                lock.lock();
            }
        });
    }

    void stop_flusher() {
        if (!flusher_) return;
        {
            std::lock_guard<std::mutex> lock(flusher_mutex_);
            stop_flusher_ = true;
        }
        flusher_wake_.notify_all();
        flusher_->join();
        flusher_.reset();
    }

    void flush_now() {
        {
            std::lock_guard<std::mutex> attach(g_attach.mutex);  // not while a stop detaches
            if (g_tracer != this || !g_attach.attached) return;
            g_api.ActivityFlushAll(0);  // completed buffers to buffer_completed, on this thread
        }
        std::lock_guard<std::mutex> lock(mutex_);
        append_api_rows(take_api_rows(true));
        write_fresh_names();
        write_rows();
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
        append_api_rows(take_api_rows(false));
        size_t dropped = 0;
        if (g_api.ActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS) dropped_ += dropped;
        write_fresh_names();
        if (rows_.size() >= chunk_values_) write_rows();
        auto &spent = processing_[static_cast<uint64_t>(pthread_self())];
        spent.first += 1;
        spent.second += monotonic_ns() - began;
    }

    // Rows, then their checksum record: (first row, rows, CRC-32 of their bytes, CRC-32 of the
    // record's first 20 bytes), little-endian. Called with mutex_ held.
    void write_rows() {
        if (rows_.empty() || rows_fd_ < 0) return;
        const size_t bytes = rows_.size() * sizeof(int64_t);
        write_all(rows_fd_, rows_.data(), bytes);
        const uint64_t rows = rows_.size() / kWidth;
        write_record(crc_fd_, rows_written_, rows, crc32(rows_.data(), bytes));
        rows_written_ += rows;
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
    int rows_fd_ = -1, names_fd_ = -1, crc_fd_ = -1, names_crc_fd_ = -1;
    std::unique_ptr<std::thread> flusher_;  // the time-bound writes (start_flusher)
    std::mutex flusher_mutex_;
    std::condition_variable flusher_wake_;
    bool stop_flusher_ = false;
    bool running_ = false, own_clock_ = false;
    bool runtime_ = false, driver_ = false, gpu_ = false, sync_ = false, nvtx_ = false;  // the layers start() enabled
    bool by_callback_ = false, callbacks_on_ = false;  // API calls through callbacks
    ApiIds untraced_;
    uint64_t dropped_ = 0, buffers_ = 0, rows_written_ = 0, names_written_ = 0;
    std::map<uint64_t, std::pair<uint64_t, uint64_t>> processing_;  // thread -> (buffers, ns)
};

}  // namespace

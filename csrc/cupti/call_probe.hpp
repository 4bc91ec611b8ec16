// Timing cheap CUDA calls in tight loops, for rlscope.calibrate.residual.
//
// Why: once CUPTI has recorded API calls in a process, every later CUDA call there costs more,
// recorded or not, until cuptiFinalize. Calibration's unprofiled windows follow a recording, so
// their differences cannot contain that cost; a dedicated process that detaches between
// probes can measure it. libcuda (and libcudart, where found) are opened at run time, like
// libcupti, so the module still imports on machines without CUDA.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <ctime>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace rlscope::cupti {

class CallProbe {
public:
    // Make the device's primary context current on this thread, load a kernel that does nothing
    // and, if one of ``cudart_candidates`` loads, the runtime's stream query.
    void open(const std::vector<std::string> &cudart_candidates) {
        if (open_) return;
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!cuda) throw std::runtime_error(std::string("cannot load libcuda.so.1: ") + dlerror());
        auto symbol = [&](auto &fn, const char *name) {
            fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(cuda, name));
            if (!fn) throw std::runtime_error(std::string("libcuda lacks ") + name);
        };
        CUresult (*init)(unsigned) = nullptr;
        CUresult (*device_get)(CUdevice *, int) = nullptr;
        CUresult (*retain)(CUcontext *, CUdevice) = nullptr;
        CUresult (*set_current)(CUcontext) = nullptr;
        CUresult (*load_data)(CUmodule *, const void *) = nullptr;
        CUresult (*get_function)(CUfunction *, CUmodule, const char *) = nullptr;
        symbol(init, "cuInit");
        symbol(device_get, "cuDeviceGet");
        symbol(retain, "cuDevicePrimaryCtxRetain");
        symbol(set_current, "cuCtxSetCurrent");
        symbol(load_data, "cuModuleLoadData");
        symbol(get_function, "cuModuleGetFunction");
        symbol(stream_query_, "cuStreamQuery");
        symbol(launch_, "cuLaunchKernel");
        symbol(synchronize_, "cuCtxSynchronize");
        CUdevice device = 0;
        CUcontext context = nullptr;
        CUmodule module = nullptr;
        check(init(0), "cuInit");
        check(device_get(&device, 0), "cuDeviceGet");
        check(retain(&context, device), "cuDevicePrimaryCtxRetain");
        check(set_current(context), "cuCtxSetCurrent");
        static const char kNoop[] =
            ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry rlscope_noop()\n{\n\tret;\n}\n";
        check(load_data(&module, kNoop), "cuModuleLoadData");
        check(get_function(&noop_, module, "rlscope_noop"), "cuModuleGetFunction");
        for (const std::string &path : cudart_candidates) {
            void *cudart = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (!cudart) continue;
            runtime_query_ = reinterpret_cast<int (*)(void *)>(dlsym(cudart, "cudaStreamQuery"));
            if (runtime_query_) {
                runtime_path_ = path;
                runtime_query_(nullptr);  // the runtime initialises itself at its first call
                break;
            }
        }
        open_ = true;
    }

    // Nanoseconds per call of each probe, timed over ``calls`` calls (launches synchronised once,
    // after the loop): driver_query (cuStreamQuery), driver_launch (cuLaunchKernel of the empty
    // kernel), and runtime_query (cudaStreamQuery) where the runtime was found.
    std::vector<std::pair<std::string, double>> time(size_t calls) {
        if (!open_) throw std::runtime_error("the call probe is not open; call probe_open() first");
        std::vector<std::pair<std::string, double>> out;
        uint64_t began = now();
        for (size_t i = 0; i < calls; ++i) stream_query_(nullptr);
        out.emplace_back("driver_query", per_call(began, calls));
        began = now();
        for (size_t i = 0; i < calls; ++i) launch_(noop_, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
        synchronize_();
        out.emplace_back("driver_launch", per_call(began, calls));
        if (runtime_query_) {
            began = now();
            for (size_t i = 0; i < calls; ++i) runtime_query_(nullptr);
            out.emplace_back("runtime_query", per_call(began, calls));
        }
        return out;
    }

    const std::string &runtime_path() const { return runtime_path_; }

private:
    static void check(CUresult r, const char *what) {
        if (r != CUDA_SUCCESS) throw std::runtime_error(std::string(what) + " failed (CUresult " + std::to_string(r) + ")");
    }
    static uint64_t now() {
        timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
    }
    static double per_call(uint64_t began, size_t calls) {
        return calls ? static_cast<double>(now() - began) / static_cast<double>(calls) : 0.0;
    }

    bool open_ = false;
    CUresult (*stream_query_)(CUstream) = nullptr;
    CUresult (*launch_)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void **, void **) = nullptr;
    CUresult (*synchronize_)() = nullptr;
    int (*runtime_query_)(void *) = nullptr;
    CUfunction noop_ = nullptr;
    std::string runtime_path_;
};

}  // namespace rlscope::cupti

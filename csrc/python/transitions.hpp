// Python -> native-module calls. The Python side (rlscope/collect/python.py) decides what a
// callable is (target category and name id) once; this caches that per callable. It serves both
// event sources: sys.monitoring callbacks (3.12+: on_call returns DISABLE for non-targets) and a
// C profile function installed with PyEval_SetProfile (3.11), which unlike a Python profile
// function costs almost nothing for the calls it must ignore. Included once, by hotpath.cpp.
#pragma once

#include <nanobind/nanobind.h>
#include <Python.h>
#include <pythread.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "rows.hpp"

namespace nb = nanobind;

namespace {

// What the classification cache is keyed by: the callable, or for a builtin its method record
// and what it is bound to (``Collector::lookup``).
struct Key {
    const void *callable;
    const void *owner;
    bool operator==(const Key &other) const { return callable == other.callable && owner == other.owner; }
};
struct KeyHash {
    size_t operator()(const Key &k) const {
        return std::hash<const void *>()(k.callable) * 31 + std::hash<const void *>()(k.owner);
    }
};

struct Info {
    int64_t category = 0;  // 0: not a target
    int64_t name = 0;
    PyObject *ref = nullptr;  // a weak reference to the callable, for those cached by address
};

struct ThreadStack {
    uint64_t generation = 0;
    std::vector<int64_t> starts;
};
thread_local ThreadStack t_stack;
uint64_t g_generation = 0;

class Collector {
public:
    Collector(nb::callable classify, nb::object disable, nb::callable on_full, size_t flush_rows)
        : classify_(std::move(classify)), disable_(std::move(disable)), on_full_(std::move(on_full)),
          flush_values_(flush_rows * kWidth) {
        generation_ = ++g_generation;  // stacks left by an earlier collector are ignored
        reserve_touched(rows_, flush_values_ + kWidth);
    }
    ~Collector() {
        for (PyObject *o : owned_) Py_DECREF(o);
        for (auto &entry : cache_) Py_XDECREF(entry.second.ref);
    }
    Collector(const Collector &) = delete;
    Collector &operator=(const Collector &) = delete;

    Info lookup(PyObject *func) {
        // A builtin bound to an instance (tensor.argmax on 3.11) is a new object on every call,
        // but its PyMethodDef is the same static record: key those by the record and what they
        // are bound to: the instance's type (a record inherited from object, like __reduce_ex__,
        // serves every type: torch's and set's are not the same target) or the module.
        const bool builtin = PyCFunction_Check(func);
        Key key{func, nullptr};
        if (builtin) {
            PyObject *self = PyCFunction_GET_SELF(func);
            PyObject *owner = self == nullptr || PyModule_Check(self) ? self : reinterpret_cast<PyObject *>(Py_TYPE(self));
            key = Key{reinterpret_cast<PyCFunctionObject *>(func)->m_ml, owner};
        }
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            if (it->second.ref == nullptr || alive(it->second.ref, func)) return it->second;
            Py_DECREF(it->second.ref);  // that callable died and this one took its address
            cache_.erase(it);
        }
        Info info;
        bool cacheable = true;
        nb::object result = classify_(nb::handle(func));  // (category, name id, cacheable) or None
        if (!result.is_none()) {
            nb::tuple t = nb::borrow<nb::tuple>(result);
            info.category = nb::cast<int64_t>(t[0]);
            info.name = nb::cast<int64_t>(t[1]);
            cacheable = nb::cast<bool>(t[2]);
        }
        if (builtin) {
            if (key.owner != nullptr) {
                Py_INCREF(const_cast<PyObject *>(static_cast<const PyObject *>(key.owner)));  // its address stays its own
                owned_.push_back(const_cast<PyObject *>(static_cast<const PyObject *>(key.owner)));
            }
            cache_.emplace(key, info);
        } else if (cacheable) {
            // A weak reference tells a later callable at the same address from this one, without
            // keeping this one alive: callables of the program must die when the program drops
            // them (TorchDynamo's compilation depends on it). The few that take no weak
            // reference (numpy's ufuncs) are module-level definitions: those are kept.
            info.ref = PyWeakref_NewRef(func, nullptr);
            if (info.ref == nullptr) {
                PyErr_Clear();
                Py_INCREF(func);
                owned_.push_back(func);
            }
            cache_.emplace(key, info);
        }
        return info;
    }

    static bool alive(PyObject *ref, PyObject *func) {
#if PY_VERSION_HEX >= 0x030D0000
        PyObject *object = nullptr;
        if (PyWeakref_GetRef(ref, &object) < 0) PyErr_Clear();
        Py_XDECREF(object);  // only its address is compared
        return object == func;
#else
        return PyWeakref_GetObject(ref) == func;
#endif
    }

    void enter() {
        ThreadStack &s = t_stack;
        if (s.generation != generation_) {
            s.generation = generation_;
            s.starts.clear();
        }
        s.starts.push_back(now_ns());
    }

    void leave(const Info &info) {
        const int64_t end = now_ns();
        ThreadStack &s = t_stack;
        if (s.generation != generation_ || s.starts.empty()) return;  // began before this collector
        const int64_t start = s.starts.back();
        s.starts.pop_back();
        const int64_t row[kWidth] = {kCpuCall, info.category, static_cast<int64_t>(PyThread_get_thread_ident()),
                                     static_cast<int64_t>(s.starts.size()), start, end, info.name, 0, -1};
        rows_.insert(rows_.end(), row, row + kWidth);
        if (rows_.size() >= flush_values_) {
            // Inside an event callback no further events fire, so the writer's own calls
            // into numpy/pyarrow are not recorded as the workload's.
            paused_ = true;
            on_full_();
            paused_ = false;
        }
    }

    // sys.monitoring callbacks as plain C functions (METH_FASTCALL, bound to the collector
    // object), so no argument conversion happens. CALL returns DISABLE for call sites whose
    // callee is not a target; the second serves C_RETURN and C_RAISE.
    static PyObject *fast_on_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
        Collector *c = nb::inst_ptr<Collector>(nb::handle(self));
        if (nargs < 3 || c->paused_) Py_RETURN_NONE;
        Info info = c->lookup(args[2]);
        if (info.category == 0) return Py_NewRef(c->disable_.ptr());
        c->enter();
        Py_RETURN_NONE;
    }

    static PyObject *fast_on_c_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
        Collector *c = nb::inst_ptr<Collector>(nb::handle(self));
        if (nargs >= 3 && !c->paused_) {
            Info info = c->lookup(args[2]);
            if (info.category != 0) c->leave(info);
        }
        Py_RETURN_NONE;
    }

    static int profile_callback(PyObject *self, PyFrameObject *, int what, PyObject *arg) {
        if (what != PyTrace_C_CALL && what != PyTrace_C_RETURN && what != PyTrace_C_EXCEPTION) return 0;
        Collector *c = nb::inst_ptr<Collector>(nb::handle(self));
        if (c->paused_) return 0;
        Info info = c->lookup(arg);
        if (info.category == 0) return 0;
        if (what == PyTrace_C_CALL)
            c->enter();
        else
            c->leave(info);
        return 0;
    }

    // Install the C profile function on the calling thread (the Python object is its argument).
    static void install_profile(nb::handle self) { PyEval_SetProfile(&Collector::profile_callback, self.ptr()); }
    static void uninstall_profile() { PyEval_SetProfile(nullptr, nullptr); }

    size_t pending() const { return rows_.size() / kWidth; }

    // Move the buffered rows out as an N x 9 int64 array.
    nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> drain(bool refill);

    bool paused_ = false;

private:
    nb::callable classify_;
    nb::object disable_;
    nb::callable on_full_;
    size_t flush_values_;
    std::unordered_map<Key, Info, KeyHash> cache_;
    std::vector<PyObject *> owned_;
    std::vector<int64_t> rows_;
    uint64_t generation_;
};

}  // namespace

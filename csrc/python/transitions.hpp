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
const char kTypeKey = 0;  // the owner half of a key by type
PyObject *g_func_name = nullptr, *g_self_name = nullptr;  // interned "__func__", "__self__"

class Collector {
public:
    Collector(nb::callable classify, nb::object disable, nb::callable on_full, size_t flush_rows)
        : classify_(std::move(classify)), disable_(std::move(disable)), on_full_(std::move(on_full)),
          flush_values_(flush_rows * kWidth) {
        generation_ = ++g_generation;  // stacks left by an earlier collector are ignored
        if (!g_func_name) {
            g_func_name = PyUnicode_InternFromString("__func__");
            g_self_name = PyUnicode_InternFromString("__self__");
        }
        reserve_touched(rows_, flush_values_ + kWidth);
    }
    ~Collector() {
        for (PyObject *o : owned_) Py_DECREF(o);
        for (auto &entry : cache_) Py_XDECREF(entry.second.ref);
    }
    Collector(const Collector &) = delete;
    Collector &operator=(const Collector &) = delete;

    // How a classification is reused (rlscope.collect.python.cache_mode).
    // kNever: a miss the next call may turn into a target (a nanobind method called on an object
    // that does not hold it): nothing is remembered, not even weakly.
    enum CacheMode : int { kNotCached = 0, kByCallable = 1, kByType = 2, kByFunctionAndType = 3, kNever = 4 };

    // ``arg0``: the call's first argument where the event gives one (sys.monitoring), else null;
    // the Python side reads it only for a method that names no class of its own (nanobind's).
    Info lookup(PyObject *func, PyObject *arg0) {
        Key key = key_of(func);
        auto it = cache_.find(key);
        if (it != cache_.end()) {
            if (it->second.ref == nullptr || alive(it->second.ref, func)) return it->second;
            Py_DECREF(it->second.ref);  // that callable died and this one took its address
            cache_.erase(it);
        }
        Info info;
        nb::object first = arg0 ? nb::borrow(arg0) : nb::none();
        nb::tuple result = nb::borrow<nb::tuple>(classify_(nb::handle(func), first));  // (category, name id, mode)
        info.category = nb::cast<int64_t>(result[0]);
        info.name = nb::cast<int64_t>(result[1]);
        int mode = nb::cast<int>(result[2]);
        if (mode == kNever) return info;
        if (info.category == 0 && mode == kNotCached) mode = kByCallable;  // a non-target: remembered weakly
        if (PyCFunction_Check(func)) {
            keep(key.owner);  // its address stays its own
            cache_.emplace(key, info);
        } else if (mode == kByType || mode == kByFunctionAndType) {
            if (type_modes_.emplace(Py_TYPE(func), mode).second) keep(Py_TYPE(func));  // its address stays its own
            key = key_of(func);
            if (key.owner == nullptr) return info;  // a bound method without __func__/__self__ after all
            if (mode == kByFunctionAndType) {  // (a key by type holds the type, kept above)
                keep(key.callable);
                keep(key.owner);
            }
            cache_.emplace(key, info);
        } else if (mode == kByCallable) {
            // A weak reference tells a later callable at the same address from this one, without
            // keeping this one alive: callables of the program must die when the program drops
            // them (TorchDynamo's compilation depends on it). The few that take no weak
            // reference (numpy's ufuncs) are module-level definitions: those are kept.
            info.ref = PyWeakref_NewRef(func, nullptr);
            if (info.ref == nullptr) {
                PyErr_Clear();
                keep(func);
            }
            cache_.emplace(key, info);
        }
        return info;
    }

    // The cache key of a callable. A builtin bound to an instance (tensor.argmax on 3.11) is a
    // new object on every call, but its PyMethodDef is the same static record: keyed by the
    // record and what it is bound to: the instance's type (a record inherited from object, like
    // __reduce_ex__, serves every type: torch's and set's are not the same target) or the
    // module. Types the Python side declared classified per type (a callable instance such as
    // jaxlib's StrongLRUCache) are keyed by the type; bound methods made anew at every call
    // (nanobind's, all of jaxlib's) by the underlying function and the type of the bound object.
    // Anything else by the callable itself.
    Key key_of(PyObject *func) {
        if (PyCFunction_Check(func)) {
            PyObject *self = PyCFunction_GET_SELF(func);
            PyObject *owner = self == nullptr || PyModule_Check(self) ? self : reinterpret_cast<PyObject *>(Py_TYPE(self));
            return Key{reinterpret_cast<PyCFunctionObject *>(func)->m_ml, owner};
        }
        auto mode = type_modes_.find(Py_TYPE(func));
        if (mode == type_modes_.end()) return Key{func, nullptr};
        if (mode->second == kByType) return Key{Py_TYPE(func), &kTypeKey};
        if (PyMethod_Check(func))
            return Key{PyMethod_GET_FUNCTION(func), Py_TYPE(PyMethod_GET_SELF(func))};
        PyObject *function = PyObject_GetAttr(func, g_func_name);
        PyObject *self = function ? PyObject_GetAttr(func, g_self_name) : nullptr;
        Key key{func, nullptr};
        if (function && self) key = Key{function, Py_TYPE(self)};  // both outlive the call: cached ones are kept
        else PyErr_Clear();
        Py_XDECREF(function);
        Py_XDECREF(self);
        return key;
    }

    // Keep an object alive for the collector's life (what a cache key points to).
    void keep(const void *object) {
        if (object == nullptr || object == &kTypeKey) return;
        PyObject *o = const_cast<PyObject *>(static_cast<const PyObject *>(object));
        Py_INCREF(o);
        owned_.push_back(o);
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
        if (nargs < 3 || c->skip()) Py_RETURN_NONE;
        Info info = c->lookup(args[2], nargs > 3 ? args[3] : nullptr);
        if (info.category == 0) return Py_NewRef(c->disable_.ptr());
        c->enter();
        Py_RETURN_NONE;
    }

    static PyObject *fast_on_c_return(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
        Collector *c = nb::inst_ptr<Collector>(nb::handle(self));
        if (nargs >= 3 && !c->skip()) {
            Info info = c->lookup(args[2], nargs > 3 ? args[3] : nullptr);
            if (info.category != 0) c->leave(info);
        }
        Py_RETURN_NONE;
    }

    static int profile_callback(PyObject *self, PyFrameObject *, int what, PyObject *arg) {
        if (what != PyTrace_C_CALL && what != PyTrace_C_RETURN && what != PyTrace_C_EXCEPTION) return 0;
        Collector *c = nb::inst_ptr<Collector>(nb::handle(self));
        if (c->skip()) return 0;
        Info info = c->lookup(arg, nullptr);
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
    nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> drain(bool refill, bool copy);

    // Whether the calling thread's calls go unrecorded: while ``paused_`` (a recording thread
    // writing the trace), and always on ``ignored_``, the session's flusher thread, which
    // writes while the workload's threads go on being recorded.
    bool skip() const { return paused_ || (ignored_ != 0 && PyThread_get_thread_ident() == ignored_); }

    bool paused_ = false;
    unsigned long ignored_ = 0;

private:
    nb::callable classify_;
    nb::object disable_;
    nb::callable on_full_;
    size_t flush_values_;
    std::unordered_map<Key, Info, KeyHash> cache_;
    std::unordered_map<PyTypeObject *, int> type_modes_;  // types whose callables are keyed by key_of's rules
    std::vector<PyObject *> owned_;
    std::vector<int64_t> rows_;
    uint64_t generation_;
};

}  // namespace

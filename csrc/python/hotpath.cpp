// Native hot paths of the Python-side collectors; both record rows of int64 laid out like
// rlscope.trace.schema.ROW_FIELDS into buffers that Python drains into the trace writer.
//
// Collector: Python -> native-module calls. The Python side (rlscope/collect/python.py) decides
// what a callable is (target category and name id) once; this caches that per callable. It
// serves both event sources: sys.monitoring callbacks (3.12+: on_call returns DISABLE for
// non-targets) and a C profile function installed with PyEval_SetProfile (3.11), which unlike a
// Python profile function costs almost nothing for the calls it must ignore.
//
// Operations: rlscope.operation() enter/exit, a few per training step, kept off the Python
// interpreter so that annotations cost little even while a profile function is installed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <Python.h>
#include <pythread.h>

#include <cstdint>
#include <ctime>
#include <unordered_map>
#include <vector>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

constexpr int64_t kOperation = 0;  // rlscope.trace.schema.Kind.OPERATION
constexpr int64_t kStep = 2;       // rlscope.trace.schema.Kind.STEP
constexpr int64_t kCpuCall = 3;    // rlscope.trace.schema.Kind.CPU_CALL
constexpr size_t kWidth = 9;     // len(ROW_FIELDS)

inline int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // time.perf_counter_ns's clock on Linux
    return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// Layout of the "rlscope.correlation_hooks" capsule exported by rlscope._cupti.
struct CorrelationHooks {
    void (*push)(int64_t);
    void (*pop)();
};

// A buffer of ``values`` values whose memory is already written: recording then never grows
// it (each doubling copied everything and touched fresh pages) nor page-faults, so an event
// costs the same in a session's first chunk as in a long run's later ones, where calibration
// measures it. The pages are touched here, at a session's start or inside a timed trace write.
void reserve_touched(std::vector<int64_t> &rows, size_t values) {
    rows.resize(values);
    rows.clear();  // keeps the capacity
}

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

// Operation stacks per thread; names are mapped to trace symbol ids once per name object.
class Operations {
public:
    Operations(nb::callable symbol, nb::callable on_full, size_t flush_rows)
        : symbol_(std::move(symbol)), on_full_(std::move(on_full)), flush_values_(flush_rows * kWidth) {
        reserve_touched(rows_, flush_values_ + kWidth);
    }
    ~Operations() {
        for (auto &kv : ids_) Py_DECREF(kv.first);
        for (auto &kv : stacks_)
            for (auto &frame : kv.second) Py_DECREF(frame.name);
    }
    Operations(const Operations &) = delete;
    Operations &operator=(const Operations &) = delete;

    void enter(nb::handle name) { push(name, now_ns()); }

    void push(nb::handle name, int64_t start) {
        const int64_t sid = id_of(name.ptr());
        Py_INCREF(name.ptr());
        stacks_[PyThread_get_thread_ident()].push_back(Frame{name.ptr(), sid, start});
        if (hooks_) hooks_->push(sid);
    }

    // GPU attribution: call these on every enter/exit (rlscope._cupti's external correlation
    // push/pop, passed as a capsule), or stop calling them (None).
    void set_correlation_hooks(nb::object capsule) {
        if (capsule.is_none()) {
            hooks_ = nullptr;
            return;
        }
        void *p = PyCapsule_GetPointer(capsule.ptr(), "rlscope.correlation_hooks");
        if (!p) throw nb::python_error();
        hooks_ = static_cast<const CorrelationHooks *>(p);
    }

    // The calling thread's open operations, outermost first: [(name, start_ns), ...].
    nb::list current_stack() const {
        nb::list out;
        auto it = stacks_.find(PyThread_get_thread_ident());
        if (it != stacks_.end())
            for (const Frame &f : it->second) out.append(nb::make_tuple(nb::handle(f.name), f.start));
        return out;
    }

    // Returns None, or the name of the operation still open inside (the nesting error to raise).
    nb::object exit(nb::handle name) {
        const int64_t end = now_ns();
        const int64_t tid = static_cast<int64_t>(PyThread_get_thread_ident());
        auto it = stacks_.find(static_cast<unsigned long>(tid));
        if (it == stacks_.end() || it->second.empty()) return nb::str("");
        std::vector<Frame> &stack = it->second;
        const Frame top = stack.back();
        if (top.sid != id_of(name.ptr())) return nb::borrow(top.name);
        stack.pop_back();
        Py_DECREF(top.name);
        if (hooks_) hooks_->pop();
        const int64_t row[kWidth] = {kOperation, 0, tid, static_cast<int64_t>(stack.size()), top.start, end, top.sid,
                                     0, -1};
        rows_.insert(rows_.end(), row, row + kWidth);
        if (rows_.size() >= flush_values_) on_full_();
        return nb::none();
    }

    // rlscope.step(): the iteration since the previous step() ends now; ``phase`` names it.
    void step(nb::handle phase) {
        const int64_t now = now_ns();
        if (last_step_ >= 0) add_step(phase, last_step_, now);
        last_step_ = now;
    }

    // End the open iteration at ``end`` (phase change, end of profiling); no new one starts.
    void close_step(nb::handle phase, int64_t end) {
        if (last_step_ >= 0) add_step(phase, last_step_, end);
        last_step_ = -1;
    }

    // Names still open, per thread: {thread ident: [outer, ..., inner]}.
    nb::dict open_operations() const {
        nb::dict out;
        for (const auto &kv : stacks_) {
            if (kv.second.empty()) continue;
            nb::list names;
            for (const Frame &f : kv.second) names.append(nb::handle(f.name));
            out[nb::int_(kv.first)] = names;
        }
        return out;
    }

    size_t pending() const { return rows_.size() / kWidth; }

    nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> drain(bool refill) { return take_rows(rows_, refill); }

    // The buffered rows; ``refill``: prepare the next buffer (not after the last drain).
    static nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> take_rows(std::vector<int64_t> &rows, bool refill) {
        auto *data = new std::vector<int64_t>(std::move(rows));
        rows = std::vector<int64_t>();
        if (refill) reserve_touched(rows, data->capacity());
        nb::capsule owner(data, [](void *p) noexcept { delete static_cast<std::vector<int64_t> *>(p); });
        return nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(data->data(), {data->size() / kWidth, kWidth}, owner);
    }

private:
    void add_step(nb::handle phase, int64_t start, int64_t end) {
        const int64_t row[kWidth] = {kStep, 0, static_cast<int64_t>(PyThread_get_thread_ident()), 0, start, end,
                                     id_of(phase.ptr()), 0, -1};
        rows_.insert(rows_.end(), row, row + kWidth);
        if (rows_.size() >= flush_values_) on_full_();
    }

    struct Frame {
        PyObject *name;
        int64_t sid;
        int64_t start;
    };

    int64_t id_of(PyObject *name) {
        auto it = ids_.find(name);
        if (it != ids_.end()) return it->second;
        const int64_t sid = nb::cast<int64_t>(symbol_(nb::handle(name)));
        Py_INCREF(name);  // the key stays alive, so its address cannot be reused
        ids_.emplace(name, sid);
        return sid;
    }

    nb::callable symbol_, on_full_;
    size_t flush_values_;
    std::unordered_map<PyObject *, int64_t> ids_;
    std::unordered_map<unsigned long, std::vector<Frame>> stacks_;
    std::vector<int64_t> rows_;
    int64_t last_step_ = -1;
    const CorrelationHooks *hooks_ = nullptr;
};

// What rlscope.step() reports to, kept natively so that a step is one call into C: as Python
// frames a 3.11 profile function would see it, and it would cost ten times more under profiling
// than without, a cost no calibration event accounts for.
struct Stepper {
    nb::object owner;       // the Operations object the iterations are recorded in, or None
    Operations *ops = nullptr;
    nb::object phase;       // the phase the iterations belong to
    nb::object callback;    // instead of recording: a Python callable (an uninstrumented run's first step)
    nb::object on_window;   // alternating windows: on_window(start_ns, end_ns, iterations) once one is over
    int64_t window_ns = 0;
    int64_t window_start = -1;  // -1: before the first step
    int64_t iterations = 0;
};
Stepper g_stepper;

void step_now() {
    Stepper &s = g_stepper;
    if (s.ops == nullptr) {
        if (s.callback.is_valid() && !s.callback.is_none()) s.callback();
        return;
    }
    s.ops->step(s.phase);
    if (!s.on_window.is_valid() || s.on_window.is_none()) return;
    ++s.iterations;
    const int64_t now = now_ns();
    if (s.window_start >= 0 && now - s.window_start < s.window_ns) return;
    nb::object on_window = s.on_window;  // the callback may rebind the stepper
    on_window(s.window_start, now, s.iterations);
    if (g_stepper.on_window.is(on_window)) {
        g_stepper.window_start = now_ns();  // switching layers is in no window
        g_stepper.iterations = 0;
    }
}

void bind_step(nb::object ops, nb::object phase, nb::object callback, nb::object on_window, double window_ms) {
    Stepper fresh;
    if (!ops.is_none()) {
        fresh.ops = nb::inst_ptr<Operations>(ops);
        fresh.owner = ops;
    }
    fresh.phase = phase;
    fresh.callback = callback;
    fresh.on_window = on_window;
    fresh.window_ns = static_cast<int64_t>(window_ms * 1e6);
    g_stepper = std::move(fresh);
}

}  // namespace

nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> Collector::drain(bool refill) { return Operations::take_rows(rows_, refill); }

PyMethodDef g_fast_defs[] = {
    {"on_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&Collector::fast_on_call)), METH_FASTCALL,
     "sys.monitoring CALL callback"},
    {"on_c_return", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&Collector::fast_on_c_return)),
     METH_FASTCALL, "sys.monitoring C_RETURN / C_RAISE callback"},
};

NB_MODULE(_hotpath, m) {
    m.doc() = "Native hot paths of rlscope's Python-side collectors (calls into native modules, operations).";
    nb::class_<Collector>(m, "Collector")
        .def(nb::init<nb::callable, nb::object, nb::callable, size_t>(), "classify"_a, "disable"_a.none(), "on_full"_a,
             "flush_rows"_a)
        .def("monitoring_callbacks",
             [](nb::handle_t<Collector> self) {
                 nb::object call = nb::steal(PyCFunction_NewEx(&g_fast_defs[0], self.ptr(), nullptr));
                 nb::object ret = nb::steal(PyCFunction_NewEx(&g_fast_defs[1], self.ptr(), nullptr));
                 return nb::make_tuple(call, ret);
             },
             "(on_call, on_c_return) as plain C functions, the cheapest callables sys.monitoring can call.")
        .def("install_profile", [](nb::handle_t<Collector> self) { Collector::install_profile(self); },
             "Make this collector the profile function of the calling thread (sys.setprofile's C form).")
        .def_static("uninstall_profile", &Collector::uninstall_profile)
        .def("pending", &Collector::pending, "Rows buffered since the last drain.")
        .def("drain", &Collector::drain, "refill"_a = true,
             "Take the buffered rows as an N x 9 int64 array; ``refill=False`` for the last drain.")
        .def_rw("paused", &Collector::paused_, "While True, calls are not recorded (the writer's own flushes).");
    nb::class_<Operations>(m, "Operations")
        .def(nb::init<nb::callable, nb::callable, size_t>(), "symbol"_a, "on_full"_a, "flush_rows"_a)
        .def("enter", &Operations::enter, "name"_a)
        .def("push", &Operations::push, "name"_a, "start_ns"_a, "Reopen an operation (in a forked child).")
        .def("set_correlation_hooks", &Operations::set_correlation_hooks, "hooks"_a.none())
        .def("current_stack", &Operations::current_stack)
        .def("exit", &Operations::exit, "name"_a,
             "Close ``name``; returns None, or the name still open inside it (empty: nothing was open).")
        .def("step", &Operations::step, "phase"_a)
        .def("close_step", &Operations::close_step, "phase"_a, "end_ns"_a)
        .def("open_operations", &Operations::open_operations)
        .def("pending", &Operations::pending)
        .def("drain", &Operations::drain, "refill"_a = true);
    m.def("step", &step_now, "Mark an iteration boundary, so results can be given per iteration.");
    m.def("set_step_phase", [](nb::object phase) { g_stepper.phase = phase; }, "phase"_a,
          "The phase the following iterations belong to.");
    m.def("bind_step", &bind_step, "ops"_a.none() = nb::none(), "phase"_a.none() = nb::none(),
          "callback"_a.none() = nb::none(), "on_window"_a.none() = nb::none(), "window_ms"_a = 0.0,
          "What step() does from now on: record an iteration in ``ops`` under ``phase`` (calling "
          "``on_window(start_ns, end_ns, iterations)`` whenever ``window_ms`` have passed), call "
          "``callback``, or (no arguments) nothing.");
    // Drop the references at interpreter exit, while Python objects may still be released.
    nb::module_::import_("atexit").attr("register")(nb::cpp_function([]() { g_stepper = Stepper(); }));
}

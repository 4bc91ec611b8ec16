// Native hot paths of the Python-side collectors; both record rows of int64 laid out like
// rlscope.trace.schema.ROW_FIELDS into buffers that Python drains into the trace writer.
//
// Collector (transitions.hpp): Python -> native-module calls.
// Operations: rlscope.operation() enter/exit, a few per training step, kept off the Python
// interpreter so that annotations cost little even while a profile function is installed.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <Python.h>
#include <pythread.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "rows.hpp"
#include "transitions.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// Layout of the "rlscope.correlation_hooks" capsule exported by rlscope._cupti.
struct CorrelationHooks {
    void (*push)(int64_t);
    void (*pop)();
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
    // Returns the time of the call.
    int64_t step(nb::handle phase) {
        const int64_t start = last_step_;
        last_step_ = pass_step();
        if (start >= 0) add_step(phase, start, last_step_);
        return last_step_;
    }

    // A step() whose iteration is not recorded (between a sampled session's windows): only
    // counted, and its time kept.
    int64_t pass_step() {
        last_call_ = now_ns();
        ++calls_;
        return last_call_;
    }

    // Rows stop (no iteration open, so a phase change or the end writes none) or start again
    // (the next recorded iteration starts at the last call).
    void set_rows(bool rows) { last_step_ = rows ? last_call_ : -1; }

    // (step() calls so far, time of the last one or -1): where a sampled session's run ends.
    nb::tuple step_position() const { return nb::make_tuple(calls_, last_call_); }

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

    nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> drain(bool refill, bool copy) { return take_rows(rows_, refill, copy); }

    // The buffered rows; ``refill``: prepare the next buffer (not after the last drain). With
    // ``copy`` the rows are copied out and the buffer kept, its pages still written: what a
    // time-bound write of a few rows does (rlscope.collect.flusher) rather than prepare a whole
    // new buffer every second.
    static nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> take_rows(std::vector<int64_t> &rows, bool refill, bool copy) {
        std::vector<int64_t> *data;
        if (copy) {
            data = new std::vector<int64_t>(rows.begin(), rows.end());
            rows.clear();  // keeps the capacity
        } else {
            data = new std::vector<int64_t>(std::move(rows));
            rows = std::vector<int64_t>();
            if (refill) reserve_touched(rows, data->capacity());
        }
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
    int64_t last_step_ = -1;   // start of the open iteration; -1: none open (closed by close_step)
    int64_t last_call_ = -1;   // the last step() call, whether or not close_step came after it
    int64_t calls_ = 0;
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
    nb::object on_window;   // windows: on_window(start_ns, end_ns, iterations) once one is over
    int64_t window_ns = 0;
    int64_t window_start = -1;  // -1: before the first step
    int64_t iterations = 0;
    int64_t countdown = 0;  // while counting: the window is over after this many more steps
    bool counting = false;  // on_window's last call returned a number of steps (not None: after window_ms)
    bool rows = true;       // record each iteration as a row (off: step() only counts, Operations::pass_step)
};
Stepper g_stepper;

void step_now() {
    Stepper &s = g_stepper;
    if (s.ops == nullptr) {
        if (s.callback.is_valid() && !s.callback.is_none()) s.callback();
        return;
    }
    const int64_t called = s.rows ? s.ops->step(s.phase) : s.ops->pass_step();
    if (!s.on_window.is_valid() || s.on_window.is_none()) return;
    ++s.iterations;
    if (s.counting && --s.countdown > 0) return;
    const int64_t now = s.counting ? called : now_ns();  // counted steps: the stretch ends at this call
    if (!s.counting && s.window_start >= 0 && now - s.window_start < s.window_ns) return;
    nb::object on_window = s.on_window;  // the callback may rebind the stepper
    const int64_t start = s.window_start, iterations = s.iterations;
    // The stretch is handed over before the call: if the callback raises, the next window starts
    // afresh (no step counted twice), and the error goes on to the caller's rlscope.step().
    s.window_start = now;
    s.iterations = 0;
    s.counting = false;
    nb::object next = on_window(start, now, iterations);
    if (g_stepper.on_window.is(on_window)) {
        g_stepper.window_start = now_ns();  // switching layers is in no window
        // An int: the next window is over after that many steps (at least one); else after window_ms.
        if (nb::isinstance<nb::int_>(next)) {
            g_stepper.counting = true;
            g_stepper.countdown = std::max<int64_t>(1, nb::cast<int64_t>(next));
        }
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

nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> Collector::drain(bool refill, bool copy) {
    return Operations::take_rows(rows_, refill, copy);
}

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
        .def("drain", &Collector::drain, "refill"_a = true, "copy"_a = false,
             "Take the buffered rows as an N x 9 int64 array; ``refill=False`` for the last drain, ``copy=True``\n"
             "to copy them out and keep the buffer.")
        .def_rw("paused", &Collector::paused_, "While True, calls are not recorded (the writer's own flushes).")
        .def("ignore_thread", [](Collector &c, unsigned long ident) { c.ignored_ = ident; }, "ident"_a,
             "Record nothing on thread ``ident`` (threading.get_ident(); 0: none): rlscope's flusher thread.");
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
        .def("step_position", &Operations::step_position,
             "(step() calls so far, the time of the last one or -1), rows recorded for them or not.")
        .def("open_operations", &Operations::open_operations)
        .def("pending", &Operations::pending)
        .def("drain", &Operations::drain, "refill"_a = true, "copy"_a = false);
    m.def("step", &step_now, "Mark an iteration boundary, so results can be given per iteration.");
    m.def("set_step_phase", [](nb::object phase) { g_stepper.phase = phase; }, "phase"_a,
          "The phase the following iterations belong to.");
    m.def("set_step_rows",
          [](bool rows) {
              if (g_stepper.ops != nullptr && rows != g_stepper.rows) g_stepper.ops->set_rows(rows);
              g_stepper.rows = rows;
          },
          "rows"_a,
          "Whether the following iterations are recorded as rows (False: step() only counts them and keeps "
          "the time of the last call, Operations.step_position).");

    m.def("bind_step", &bind_step, "ops"_a.none() = nb::none(), "phase"_a.none() = nb::none(),
          "callback"_a.none() = nb::none(), "on_window"_a.none() = nb::none(), "window_ms"_a = 0.0,
          "What step() does from now on: record an iteration in ``ops`` under ``phase`` (calling "
          "``on_window(start_ns, end_ns, iterations)`` whenever ``window_ms`` have passed, or once as many "
          "steps as its last call returned, if an int), call "
          "``callback``, or (no arguments) nothing.");
    // Drop the references at interpreter exit, while Python objects may still be released.
    nb::module_::import_("atexit").attr("register")(nb::cpp_function([]() { g_stepper = Stepper(); }));
}

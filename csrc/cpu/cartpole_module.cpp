// Python bindings of the multi-threaded CartPole: arrays are views into the C++ buffers.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "cartpole.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <typename T>
using Rows = nb::ndarray<nb::numpy, T, nb::ndim<2>, nb::c_contig>;
template <typename T>
using Column = nb::ndarray<nb::numpy, T, nb::ndim<1>, nb::c_contig>;
using Actions = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename T>
void bind_cartpole(nb::module_ &m, const char *name) {
    using Env = rlscope::CartPole<T>;
    nb::class_<Env>(m, name)
        .def(nb::init<size_t, unsigned, uint64_t, size_t>(), "num_envs"_a, "num_threads"_a = 1, "seed"_a = 0,
             "min_envs_per_thread"_a = 1024)
        .def_prop_ro("num_envs", &Env::num_envs)
        .def_prop_ro("num_threads", &Env::num_threads)
        .def("reset", &Env::reset, "seed"_a, "Reset every environment from a new seed.")
        .def(
            "step",
            [](Env &env, Actions actions) {
                if (actions.shape(0) != env.num_envs())
                    throw nb::value_error(("actions has " + std::to_string(actions.shape(0)) +
                                           " entries, expected one per environment (" +
                                           std::to_string(env.num_envs()) + ")")
                                              .c_str());
                nb::gil_scoped_release release;
                env.step(actions.data());
            },
            "actions"_a, "Step every environment once (int64 actions, 1 pushes right); releases the GIL.")
        .def_prop_ro("state", [](nb::handle_t<Env> self) {
            Env &env = nb::cast<Env &>(self);
            return Rows<T>(env.state(), {env.num_envs(), 4}, self);
        })
        .def_prop_ro("final_state", [](nb::handle_t<Env> self) {
            Env &env = nb::cast<Env &>(self);
            return Rows<T>(env.final_state(), {env.num_envs(), 4}, self);
        })
        .def_prop_ro("reward", [](nb::handle_t<Env> self) {
            Env &env = nb::cast<Env &>(self);
            return Column<float>(env.reward(), {env.num_envs()}, self);
        })
        .def_prop_ro("terminated", [](nb::handle_t<Env> self) {
            Env &env = nb::cast<Env &>(self);
            return Column<uint8_t>(env.terminated(), {env.num_envs()}, self);
        })
        .def_prop_ro("truncated", [](nb::handle_t<Env> self) {
            Env &env = nb::cast<Env &>(self);
            return Column<uint8_t>(env.truncated(), {env.num_envs()}, self);
        })
        .def_prop_ro("elapsed", [](nb::handle_t<Env> self) {
            Env &env = nb::cast<Env &>(self);
            return Column<int32_t>(env.elapsed(), {env.num_envs()}, self);
        });
}

}  // namespace

NB_MODULE(_cartpole_cpu, m) {
    m.doc() = "Multi-threaded CartPole-v1 whose state Python shares without copies.";
    bind_cartpole<float>(m, "CartPoleF32");
    bind_cartpole<double>(m, "CartPoleF64");
}

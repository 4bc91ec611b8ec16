"""Can Python 3.11 see calls into jaxlib and numpy ufuncs, and at what cost? The numbers behind
the decision not to hook them (docs/results/reliability_py311.json).

    python bench/unseen_calls_py311.py --other-python /path/to/python3.12 --out docs/results/reliability_py311.json

3.11's profile hook reports a call only when the callee is a builtin function or method
descriptor, so a jitted function (``PjitFunction``), a ufunc or a nanobind function is called
unseen. The one way to make such a call seen is to have the program call a builtin instead: a
forwarding builtin, made here with ``PyCFunction_NewEx`` over ``PyObject_Vectorcall`` (whose
signature is METH_FASTCALL|METH_KEYWORDS's), bound to the callee. This script measures, with
this interpreter:

* ``cost``: ns per call of a tiny jitted function, of a scalar ``np.add`` and of an
  ``operator.itemgetter`` (the wrapper's own cost, out of the noise), called directly and through
  the forwarding builtin, unprofiled and under ``rlscope.profile`` (best and median of
  interleaved rounds);
* ``workload``: a jitted scan-and-update step (named scopes inside, ``block_until_ready``
  after) under ``rlscope prof``, its jitted function called directly or (``--wrap``) through
  the forwarding builtin: the ``train_step`` operation's Backend share and Python->Backend
  calls per iteration, here and with ``--other-python`` (3.12+, unwrapped);
* what the forwarding builtin lacks of the object it replaces (attributes, ``isinstance``).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import operator
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_KEEP: list[Any] = []  # method definitions must outlive the builtins made from them


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


def forwarding_builtin(func: Any, name: str) -> Any:
    """A builtin function bound to ``func`` that calls it with its own arguments: what 3.11's
    profile hook reports as ``c_call`` / ``c_return``, classified by ``func``'s type."""
    new = ctypes.pythonapi.PyCFunction_NewEx
    new.restype, new.argtypes = ctypes.py_object, [ctypes.POINTER(_MethodDef), ctypes.py_object, ctypes.py_object]
    method = _MethodDef(name.encode(), ctypes.cast(ctypes.pythonapi.PyObject_Vectorcall, ctypes.c_void_p).value,
                        0x80 | 0x02, None)  # METH_FASTCALL | METH_KEYWORDS
    _KEEP.append(method)
    return new(ctypes.byref(method), func, None)


def _cases(wrap: bool) -> dict[str, tuple[Any, tuple]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    jitted = jax.jit(lambda a: a + 1)
    x = jnp.ones(4)
    jitted(x).block_until_ready()
    # itemgetter: a native callable of a few tens of ns (not a target), so that the wrapper's own
    # cost stands out of the noise that the jitted call's ~10 us carry
    cases = {"jit": (jitted, (x,)), "ufunc": (np.add, (1.0, 2.0)), "itemgetter": (operator.itemgetter(0), ((1,),))}
    if wrap:
        cases.update({f"{k}_wrapped": (forwarding_builtin(f, k), args) for k, (f, args) in list(cases.items())})
    return cases


def _per_call_ns(func: Any, args: tuple, n: int) -> float:
    a, b = (args + (None, None))[:2]
    if len(args) == 1:
        start = time.perf_counter_ns()
        for _ in range(n):
            func(a)
    else:
        start = time.perf_counter_ns()
        for _ in range(n):
            func(a, b)
    return (time.perf_counter_ns() - start) / n


def cost(rounds: int, n: int) -> dict[str, Any]:
    """ns per call of each case, unprofiled and profiled: medians over interleaved rounds."""
    import rlscope

    cases = _cases(wrap=sys.version_info < (3, 12))
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for profiled in (False, True):
            samples: dict[str, list[float]] = {k: [] for k in cases}
            for r in range(rounds):
                for name, (func, args) in cases.items():
                    if profiled:  # a directory per round: a session's folder is named by process and pid
                        with rlscope.profile(f"{tmp}/{r}", process=name, gpu=False):
                            samples[name].append(_per_call_ns(func, args, n))
                    else:
                        samples[name].append(_per_call_ns(func, args, n))
            for name, values in samples.items():  # the best round: the load of other processes only adds
                out.setdefault(name, {})["profiled_ns" if profiled else "unprofiled_ns"] = round(min(values), 1)
                out[name]["profiled_median_ns" if profiled else "unprofiled_median_ns"] = round(
                    statistics.median(values), 1)
        calls = _recorded_calls(Path(tmp))
    for name, values in out.items():
        values["profiling_adds_ns"] = round(values["profiled_ns"] - values["unprofiled_ns"], 1)
        values["recorded_calls_per_call"] = round(calls.get(name, 0) / (rounds * n), 3)
    for name in [k for k in out if k.endswith("_wrapped")]:
        base = out[name.removesuffix("_wrapped")]
        out[name]["wrapper_adds_unprofiled_ns"] = round(out[name]["unprofiled_ns"] - base["unprofiled_ns"], 1)
    return out


def _recorded_calls(trace: Path) -> dict[str, int]:
    """Calls recorded per process name, over the rounds' traces in ``trace``."""
    from rlscope.trace.reader import read_trace
    from rlscope.trace.schema import Kind

    counts: dict[str, int] = {}
    for round_dir in trace.iterdir():
        for process in read_trace(round_dir):
            name = process.meta["process"]
            counts[name] = counts.get(name, 0) + int((process.events["kind"] == int(Kind.CPU_CALL)).sum())
    return counts


def workload(iterations: int, wrap: bool) -> None:
    """A jitted scan-and-update step, each iteration one ``train_step`` operation."""
    import jax
    import jax.numpy as jnp

    import rlscope

    @jax.jit
    def update(params: dict, obs: Any) -> tuple[dict, Any]:
        with jax.named_scope("rollout"):
            def body(carry: dict, o: Any) -> tuple[dict, Any]:
                return carry, jnp.tanh(o @ carry["w"] + carry["b"]).sum()
            _, out = jax.lax.scan(body, params, obs)
        with jax.named_scope("sgd"):
            params = jax.tree.map(lambda p: p - 0.01 * jnp.ones_like(p) * out.mean(), params)
        return params, out.mean()

    step = forwarding_builtin(update, "update") if wrap else update
    params = {"w": jnp.ones((64, 64)) * 0.01, "b": jnp.zeros(64)}
    obs = jax.random.normal(jax.random.PRNGKey(0), (256, 64))
    params, loss = step(params, obs)
    loss.block_until_ready()
    for _ in range(iterations):
        rlscope.step()
        with rlscope.operation("train_step"):
            params, loss = step(params, obs)
            loss.block_until_ready()


def profiled_workload(python: str, iterations: int, wrap: bool) -> dict[str, Any]:
    """``train_step``'s Backend share and Python->Backend calls per iteration under `rlscope prof`."""
    import pandas as pd

    with tempfile.TemporaryDirectory() as tmp:
        command = [python, "-m", "rlscope.cli", "prof", "--output", f"{tmp}/trace", "--no-gpu", "--", python,
                   __file__, "workload", "--iterations", str(iterations)] + (["--wrap"] if wrap else [])
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp, timeout=600)  # rlscope as installed
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
        breakdown = pd.read_csv(f"{tmp}/trace/analysis/breakdown.csv")
        transitions = pd.read_csv(f"{tmp}/trace/analysis/transitions.csv")
        version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True).stdout.strip()
    ours = breakdown[(breakdown["operation"] == "train_step") & (breakdown["thread"] == "main")]
    by_layer = ours.groupby("cpu")["time_ns"].sum()
    calls = transitions[(transitions["operation"] == "train_step")
                        & (transitions["transition"] == "Python->Backend")]["per_iteration"].sum()
    return {"python": version, "wrapped": wrap, "iterations": iterations,
            "train_step_s": round(float(by_layer.sum()) / 1e9, 4),
            "backend_pct": round(100 * float(by_layer.get("Backend", 0)) / float(by_layer.sum()), 1),
            "python_pct": round(100 * float(by_layer.get("Python", 0)) / float(by_layer.sum()), 1),
            "python_to_backend_per_iteration": round(float(calls), 2),
            # start-up (imports, tracing, compilation) included: what wrapping the jitted entry does not reach
            "process_python_to_backend_calls": int(transitions.loc[
                transitions["transition"] == "Python->Backend", "count"].sum())}


def what_the_wrapper_lacks() -> dict[str, Any]:
    """Attributes and type checks of the replaced objects that programs use and the builtin lacks."""
    import jax
    import numpy as np

    jitted = jax.jit(lambda a: a)
    wrapped_jit, wrapped_ufunc = forwarding_builtin(jitted, "f"), forwarding_builtin(np.add, "add")
    return {
        "jit": [a for a in ("lower", "trace", "eval_shape", "__wrapped__", "clear_cache")
                if hasattr(jitted, a) and not hasattr(wrapped_jit, a)],
        "ufunc": [a for a in ("reduce", "accumulate", "at", "outer", "nin", "identity")
                  if hasattr(np.add, a) and not hasattr(wrapped_ufunc, a)]
        + ([] if isinstance(wrapped_ufunc, np.ufunc) else ["isinstance(f, np.ufunc)"]),
    }


def _cost_in(python: str, rounds: int, n: int) -> dict[str, Any]:
    done = subprocess.run([python, __file__, "cost", "--rounds", str(rounds), "--n", str(n)], capture_output=True,
                          text=True, cwd=REPO, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{python} cost failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="all", choices=["all", "cost", "workload"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--n", type=int, default=20000, help="calls per round and case")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--wrap", action="store_true",
                        help="workload: call the jitted step through a forwarding builtin")
    parser.add_argument("--other-python", default=None, help="a Python >= 3.12 with rlscope and jax installed")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.mode == "cost":
        print(json.dumps(cost(args.rounds, args.n)))
        return
    if args.mode == "workload":
        workload(args.iterations, args.wrap)
        return
    interpreters = [sys.executable] + ([args.other_python] if args.other_python else [])
    result: dict[str, Any] = {
        "command": " ".join(["python", "bench/unseen_calls_py311.py", *sys.argv[1:]]),
        "machine": f"{platform.node()}: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
                   f"{platform.system()} {platform.release()}",
        "date": datetime.date.today().isoformat(),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                 cwd=REPO).stdout.strip(),
        "cost_ns_per_call": {}, "workload": [], "wrapper_lacks": what_the_wrapper_lacks(),
    }
    for python in interpreters:
        version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True).stdout.strip()
        result["cost_ns_per_call"][version] = _cost_in(python, args.rounds, args.n)
        print(f"python {version}: ns per call", json.dumps(result["cost_ns_per_call"][version], indent=1))
    result["workload"].append(profiled_workload(sys.executable, args.iterations, wrap=False))
    if sys.version_info < (3, 12):
        result["workload"].append(profiled_workload(sys.executable, args.iterations, wrap=True))
    if args.other_python:
        result["workload"].append(profiled_workload(args.other_python, args.iterations, wrap=False))
    for row in result["workload"]:
        print(row)
    print("the forwarding builtin lacks:", result["wrapper_lacks"])
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

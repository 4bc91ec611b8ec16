"""Cost of rlscope annotations when profiling is off: ns per operation() enter/exit.

    python bench/disabled_api.py
"""

from __future__ import annotations

import platform
import timeit

import rlscope

N = 2_000_000


def main() -> None:
    assert not rlscope.enabled()
    env = {"rlscope": rlscope}
    base = min(timeit.repeat("pass", number=N, repeat=5, globals=env))
    with_op = min(timeit.repeat("with rlscope.operation('inference'): pass", number=N, repeat=5, globals=env))
    op = rlscope.operation("inference")
    env["op"] = op
    reused = min(timeit.repeat("with op: pass", number=N, repeat=5, globals=env))
    step = min(timeit.repeat("rlscope.step()", number=N, repeat=5, globals=env))
    print(f"python {platform.python_version()}, {N:,} iterations, best of 5")
    print(f"with rlscope.operation(name): {1e9 * (with_op - base) / N:6.1f} ns per enter/exit")
    print(f"with op (object reused):      {1e9 * (reused - base) / N:6.1f} ns per enter/exit")
    print(f"rlscope.step():               {1e9 * (step - base) / N:6.1f} ns per call")


if __name__ == "__main__":
    main()

"""The data-collection throughput figure (Fig. 4): K = 1 and K = 1000 are separate lines, a
backend keeps its colour in every figure, and a CPU simulator with its policy on a GPU says so."""

from __future__ import annotations

import matplotlib
import pandas as pd
from matplotlib.colors import to_hex

from rlscope.plot.datacollection import fusion_throughput
from rlscope.plot.throughput import BACKEND_COLORS, backend_label, throughput_vs_envs

matplotlib.use("Agg")


def _results(column: str) -> pd.DataFrame:
    rows = [{"status": "ok", "backend": b, "device": "cuda", "num_envs": n, "fused_steps": k, column: float(n * k)}
            for b in ("gymnasium", "jax") for k in (1, 1000) for n in (1, 64, 4096)]
    return pd.DataFrame(rows)


def _lines(fig) -> dict[tuple[str, str], int]:
    """(colour, dash pattern) of each drawn data line -> its number of points."""
    (ax,) = fig.axes
    return {(to_hex(line.get_color()), str(line.get_linestyle())): len(line.get_xdata())
            for line in ax.get_lines() if len(line.get_xdata()) > 1}


def test_each_k_is_its_own_line_in_its_backends_colour():
    lines = _lines(throughput_vs_envs(_results("samples_per_s"), {"scale": "quick"}))
    assert len(lines) == 4 and set(lines.values()) == {3}
    assert {colour for colour, _ in lines} == {BACKEND_COLORS["gymnasium"], BACKEND_COLORS["jax"]}
    assert len({style for _, style in lines}) == 2  # K = 1 and K = 1000 drawn differently


def test_a_backend_has_the_same_colour_in_the_fusion_figure():
    lines = _lines(fusion_throughput(_results("steps_per_s"), {"scale": "quick"}))
    assert {colour for colour, _ in lines} == {BACKEND_COLORS["gymnasium"], BACKEND_COLORS["jax"]}


def test_labels_say_where_simulator_and_policy_ran():
    assert backend_label({"backend": "gymnasium", "device": "cuda"}).endswith("(simulator cpu, policy cuda)")
    assert backend_label({"backend": "jax", "device": "cuda"}).endswith("(cuda)")
    assert backend_label({"backend": "numpy", "device": "cpu"}).endswith("(cpu)")


def test_the_fused_kernels_precisions_and_recording_are_separate_lines_in_shades_of_one_colour():
    rows = [{"status": "ok", "backend": "cuda_fused_policy", "device": "cuda", "num_envs": n, "fused_steps": k,
             "precision": p, "record": r, "samples_per_s": float(n)}
            for p, r, k in (("fp32", False, 1000), ("fp16", False, 1000), ("fp16", True, 128)) for n in (1024, 65536)]
    frame = pd.DataFrame(rows)
    labels = set(frame.apply(backend_label, axis=1))
    assert len(labels) == 3 and any("records the trajectory" in label for label in labels)
    lines = _lines(throughput_vs_envs(frame, {"scale": "full"}))
    assert len(lines) == 3 and len({colour for colour, _ in lines}) == 3


def test_runs_of_two_sessions_are_never_averaged_at_one_point():
    """A grid completed on a second host: its point at an N the first host also ran is drawn
    apart (hollow, dotted), not averaged into the first host's line."""
    from rlscope.plot.sessions import split_sessions

    rows = [{"status": "ok", "backend": "cpp", "device": "cpu", "num_envs": n, "fused_steps": 1,
             "samples_per_s": float(n), "session": "host A"} for n in (1, 64, 4096)]
    rows += [{"status": "ok", "backend": "cpp", "device": "cpu", "num_envs": n, "fused_steps": 1,
              "samples_per_s": float(n) * 2, "session": "host B"} for n in (4096, 65536)]
    frame = pd.DataFrame(rows)
    frame["curve"] = "cpp"
    main, other = split_sessions(frame, "curve", "num_envs")
    assert set(main["session"]) == {"host A"} and set(other["session"]) == {"host B"}
    (ax,) = throughput_vs_envs(frame, {"scale": "full"}).axes
    drawn = {(line.get_linestyle(), tuple(line.get_xdata()), tuple(line.get_ydata())) for line in ax.get_lines()
             if len(line.get_xdata()) > 1}
    assert ("-", (1, 64, 4096), (1.0, 64.0, 4096.0)) in drawn  # host A's line, its own values only
    assert (":", (4096, 65536), (8192.0, 131072.0)) in drawn  # host B's, apart
    assert any("another session" in text.get_text() for text in ax.get_legend().get_texts())


def test_each_brax_pipeline_is_its_own_curve():
    from rlscope.plot.datacollection import simulator_comparison

    rows = [{"status": "ok", "environment": "ant", "brax_backend": pipeline, "num_envs": n, "device": "cuda",
             "steps_per_s": float(n) * factor} for pipeline, factor in (("mjx", 1), ("spring", 3)) for n in (16, 256)]
    (ax,) = simulator_comparison(pd.DataFrame(rows), {"scale": "full"}).axes
    labels = {text.get_text() for text in ax.get_legend().get_texts()}
    assert {"ant (mjx)", "ant (spring)"} <= labels
    ys = sorted(tuple(line.get_ydata()) for line in ax.get_lines() if len(line.get_xdata()) > 1)
    assert ys == [(16.0, 256.0), (48.0, 768.0)]  # not averaged together


def test_curves_whose_own_sessions_differ_name_them():
    rows = [{"status": "ok", "backend": b, "device": "cpu", "num_envs": n, "fused_steps": 1,
             "samples_per_s": float(n), "session": f"2026-11-2{i} (host {h}), commit abc"}
            for i, (b, h) in enumerate((("cpp", "A"), ("numpy", "B"))) for n in (1, 64)]
    (ax,) = throughput_vs_envs(pd.DataFrame(rows), {"scale": "full"}).axes
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any(label.endswith("[host A]") and label.startswith("C++") for label in labels)
    assert any(label.endswith("[host B]") and label.startswith("NumPy") for label in labels)

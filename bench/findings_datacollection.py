"""The data-collection study's findings, written from its results (docs/results/datacollection.md).

Each function returns the Markdown of one generated block of prose: the sentences are fixed
here, every measured number in them is read from the records under ``docs/results/``
(``datacollection/*.jsonl`` and ``*.csv`` from the benchmarks, ``h100/<experiment>/results.csv``
from ``rlscope run``), so a new run changes the page when ``make docs`` runs.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from fused_inference import TRAJECTORY_BYTES, UNFUSED as _UNFUSED_BENCH
from tables_common import DATACOLLECTION, H100, markdown_table, read_jsonl, short_sci, span

_UNFUSED_MANIFEST = ("jax", "torch_graph", "cuda")


def _log2(n: int) -> str:
    return f"2^{n.bit_length() - 1}"


def fused_roofline_findings() -> str:
    """Why the fused CartPole kernel is issue-bound, and the unfused one's memory traffic."""
    records = {r["kernel"]: r for r in read_jsonl(DATACOLLECTION / "roofline_h100.jsonl")}
    fused = [records[k] for k in ("fused", "fused-fast") if k in records]
    divergence = [r["warp_inst_per_step_x32"] - r["thread_inst_per_step"] for r in fused]
    unfused = records["unfused"]
    return (f"The fused kernel is issue-bound, not FP32-bound: integer work (random bits, reset draws, the episode "
            f"counter) and warp divergence take the slots. Issued lane-slots exceed thread instructions by "
            f"{span(divergence, '{:.1f}')} per step because a warp runs the reset branch whenever any of its 32 "
            f"environments resets. The unfused kernel against memory: ncu measured "
            f"{unfused['dram_bytes_per_step']:.1f} DRAM bytes per env-step ({unfused['counted_bytes_per_step']} "
            f"counted: state, episode length, two RNG words and the episode counter, each read and written) and it "
            f"reaches {unfused['achieved_bandwidth_gbs']:,.0f} GB/s, **{unfused['fraction_of_copy_bandwidth']:.0%} of "
            f"the measured copy bandwidth**.\n")


def _bench() -> pd.DataFrame:
    """``bench/fused_inference.py``'s rounds: median, min and max samples/s per N and configuration."""
    data = pd.read_csv(DATACOLLECTION / "fused_inference_bench_h100.csv")
    return data.groupby(["num_envs", "config"])["samples_per_s"].agg(["median", "min", "max"])


def fused_inference_findings() -> str:
    """The fused simulation+policy kernel against the unfused ways: its target, the trajectory
    buffer's stores, and the fp32 variant, from the side-by-side bench and the manifest."""
    bench = _bench()
    median = bench["median"].unstack()
    spread = ((bench["max"] - bench["min"]) / bench["median"]).unstack()
    large = median.index[median.index >= 2 ** 16]
    small = median.index[median.index < 2 ** 16]
    fused_cols = ["fused fp32", "fused fp16"]
    best = median[list(_UNFUSED_BENCH)].max(axis=1)
    best_name = median.loc[large, list(_UNFUSED_BENCH)].idxmax(axis=1).unique()
    names = {"jax scan": "JAX's `lax.scan`", "torch graph": "PyTorch's CUDA graph",
             "cuda sim + torch policy": "the CUDA simulator stepped with the PyTorch policy"}
    target = (median.loc[large, "fused fp16"] / best[large])

    manifest = pd.read_csv(H100 / "fused_inference" / "results.csv")
    manifest = manifest[manifest["status"] == "ok"]
    runs = manifest.drop_duplicates(["run_id", "repetition"])
    repetitions = manifest["repetition"].nunique()
    per_run = manifest.groupby(["backend", "precision", "record", "num_envs"], dropna=False)["samples_per_s"].median()
    fp16 = per_run.xs(("cuda_fused_policy", "fp16", False), level=("backend", "precision", "record"))
    unfused = manifest[manifest["backend"].isin(_UNFUSED_MANIFEST)].groupby(["num_envs", "backend"])[
        "samples_per_s"].median().unstack().max(axis=1)
    shared = [n for n in fp16.index if n in unfused.index and n >= 2 ** 16]
    manifest_ratios = ", ".join(f"{fp16[n] / unfused[n]:.1f}x" for n in shared)
    at = ", ".join(_log2(n) for n in shared)

    stored = median.loc[large, "fused fp16 + trajectory"] * TRAJECTORY_BYTES / 1e9
    of_statistics = median.loc[large, "fused fp16 + trajectory"] / median.loc[large, "fused fp16"]
    copy = read_jsonl(DATACOLLECTION / "compare_h100.jsonl")[0]["device"]["copy_bandwidth_gbs"] / 2
    biggest = median.index.max()
    met = "met" if target.min() >= 10 else "not met"
    return "\n".join([
        f"Round-to-round spread (max − min over the median) was {span(spread.loc[large, fused_cols].max(), '{:.1%}')} "
        f"for the statistics-only fused kernels at N ≥ 2^16, and up to "
        f"{spread.loc[small, 'fused fp16 + trajectory'].max():.0%} "
        f"for the trajectory mode at N < 2^16, where a launch lasts a few milliseconds.",
        "",
        f"- **Target ≥ 10× the best unfused peer at N ≥ 2^16 (argmax, statistics only): {met}**, "
        f"{span(target, '{:.1f}x')}; the best unfused peer is {' and '.join(names[b] for b in best_name)} there. "
        f"The manifest (each configuration in its own process, {runs['run_id'].nunique()} runs × {repetitions} "
        f"repetitions in {runs['run_seconds'].sum():.0f} s; `h100/fused_inference/results.csv`, figure below) "
        f"gives {manifest_ratios} at {at}.",
        f"- **With a T = 128 trajectory buffer** (obs, action, reward, done: {TRAJECTORY_BYTES} bytes per env-step) "
        f"the kernel stores {span(stored, '{:.0f}')} GB/s at N ≥ 2^16, {span(stored / copy, '{:.0%}')} of what a "
        f"device-to-device copy writes ({copy:,.0f} GB/s, half of `compare_h100.jsonl`'s read-and-write rate). "
        f"Storing is not what limits it: it runs at {span(of_statistics, '{:.0%}')} of the statistics-only rate.",
        f"- **fp32 fused** ({short_sci(median.loc[biggest, 'fused fp32'])} at {_log2(int(biggest))}) is "
        f"{median.loc[biggest, 'fused fp32'] / median.loc[biggest, 'jax scan']:.2f}x JAX's `lax.scan`.",
    ]) + "\n"


def fused_fp16_bound() -> str:
    """The fp16 kernel's tanh bound: arithmetic from the GPU's documented special-function rate,
    against the rate the bench measured at the largest N."""
    median = _bench()["median"].unstack()
    device = read_jsonl(DATACOLLECTION / "compare_h100.jsonl")[0]["device"]
    biggest = median.index.max()
    tanh_per_sample, mufu_per_clock = 2 * 64, 16
    cap = device["sms"] * mufu_per_clock * device["max_sm_clock_mhz"] * 1e6 / tanh_per_sample
    measured = median.loc[biggest, "fused fp16"]
    return (f"The fp16 kernel is bound by the special-function pipe, not the tensor cores: every sample takes "
            f"{tanh_per_sample} tanh (64 hidden units × 2 layers), and Hopper has no packed tanh: `tanh.approx.f16x2` "
            f"and `.bf16x2` both compile to two scalar `MUFU.TANH` plus a `PRMT` (SASS read on the device). At "
            f"{mufu_per_clock} MUFU operations per clock per SM, tanh alone caps the kernel at {device['sms']} × "
            f"{mufu_per_clock} × {device['max_sm_clock_mhz'] / 1e3:.2f} GHz / {tanh_per_sample} = {short_sci(cap)} "
            f"samples/s; the measured {short_sci(measured)} at {_log2(int(biggest))} is {measured / cap:.0%} of that. "
            f"A polynomial tanh on the FMA pipe for part of the units is the next step.\n")


def fig5_native_calls() -> str:
    """What the collector of each recorded commit saw in one K = 1 iteration of XLA data
    collection (``bench/native_calls.py``), and for each call the last commit sees and the first
    did not, the commit that first saw it."""
    records = read_jsonl(DATACOLLECTION / "fig5_native_calls_cpu.jsonl")
    rows = []
    for record in records:
        calls = "; ".join(f"`{c['name']}` ({c['layer']}, {c['ns'] / 1e3:,.1f} µs)" for c in record["calls"])
        rows.append([f"`{record['commit'][:7]}`", len(record["calls"]), calls])
    table = markdown_table(["commit", "native calls seen", "each: layer charged, duration"], rows)
    first_seen = []
    for name in (c["name"] for c in records[-1]["calls"]):
        if any(c["name"] == name for c in records[0]["calls"]):
            continue
        commit = next(r["commit"] for r in records if any(c["name"] == name for c in r["calls"]))
        first_seen.append(f"`{name}` from `{commit[:7]}`")
    return (f"One iteration (the middle one of {records[0]['iterations']}) at N = {records[0]['num_envs']:,}, "
            f"Python {records[0]['python']}, in the order the commits were made:\n\n{table}\n"
            f"Seen by the last and not the first: {', '.join(first_seen) or 'nothing'}.\n")


TABLES: dict[str, Callable[[], str]] = {
    "fig5_native_calls": fig5_native_calls,
    "fused_roofline_findings": fused_roofline_findings, "fused_inference_findings": fused_inference_findings,
    "fused_fp16_bound": fused_fp16_bound,
}

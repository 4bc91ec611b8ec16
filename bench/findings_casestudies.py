"""The RL-Scope case studies' findings, written from their results (docs/results/case-studies.md).

Each function returns the Markdown of one generated block of prose: the sentences are fixed
here, every measured number in them is read from the case study's ``results.csv`` under
``docs/results/h100/``. A new run of a case study changes the numbers of its page when
``make docs`` runs, and the test that regenerates the pages fails while a page quotes old ones.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from experiments.casestudies.profiled import steps_per_iteration
from experiments.casestudies.sb3_train import HYPERPARAMETERS
from tables_common import (FRAMEWORK_LABELS, LAYER_GROUPS, env_steps_per_iteration, group_shares, max_spread,
                           ok_results, span)

_GROUPS = {**{k: v for k, v in LAYER_GROUPS.items() if k != "GPU busy"}, "GPU": LAYER_GROUPS["GPU busy"]}


def _runs(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per run and repetition."""
    return rows.drop_duplicates(["run_id", "repetition"])


def _shares(rows: pd.DataFrame) -> Callable[..., float]:
    """``share(operation=..., layers=...)``: the percentage of training time in that operation
    (all of them if None) and those layers (all if None), mean over repetitions."""
    def share(operation: str | None = None, layers: list[str] | None = None) -> float:
        picked = rows
        if operation is not None:
            picked = picked[picked["operation"] == operation]
        if layers is not None:
            picked = picked[picked["layer"].isin(layers)]
        per_rep = picked.groupby("repetition")["seconds"].sum() / rows.groupby("repetition")["seconds"].sum()
        return float(per_rep.reindex(rows["repetition"].unique(), fill_value=0).mean() * 100)
    return share


def _per_step(rows: pd.DataFrame) -> Callable[..., float]:
    """``count(transition, operation=None)``: transitions of that kind per environment step, in
    one operation or all, mean over repetitions."""
    def count(transition: str, operation: str | None = None) -> float:
        picked = rows[rows["transition"] == transition]
        if operation is not None:
            picked = picked[picked["operation"] == operation]
        per_step = picked["per_iteration"] / env_steps_per_iteration(picked)
        per_rep = per_step.groupby(picked["repetition"]).sum()
        return float(per_rep.reindex(rows["repetition"].unique(), fill_value=0).mean())
    return count


def _survey_spread(rows: pd.DataFrame, key: str) -> float:
    """The largest "max spread" of the survey table's rows (``results_tables._survey``): per value
    of ``key``, the largest difference between repetitions of any of the table's shares."""
    return max(max_spread(pd.DataFrame([group_shares(rep, "seconds") for _, rep in mine.groupby("repetition")]))
               for _, mine in rows.groupby(key))


def case_study_runs() -> str:
    """How much was run, how long it took, and how stable the shares were."""
    a_rows, s_rows = (d[d["table"] == "breakdown"] for d in (ok_results("algorithm_choice"),
                                                              ok_results("simulator_choice")))
    a_runs, s_runs = _runs(a_rows), _runs(s_rows)
    per_iteration = env_steps_per_iteration(a_runs)
    longer = a_runs[a_runs["iterations"] * per_iteration > a_runs["timesteps"]].drop_duplicates("algorithm")
    off_policy = a_runs[a_runs["algorithm"].map(lambda algorithm: steps_per_iteration(algorithm, 1)) == 1]
    steps, starts = int(off_policy["timesteps"].iloc[0]), int(off_policy["learning_starts"].iloc[0])
    rollouts = int(s_runs["iterations"].iloc[0])
    per_rollout = int(env_steps_per_iteration(s_runs).iloc[0])
    rounded = "; ".join(f"{r.algorithm.upper()} makes {r.iterations * size:,} in whole rollouts of {size:,}"
                        for r, size in zip(longer.itertuples(), per_iteration[longer.index]))
    both = pd.concat([a_rows, s_rows])
    gpu_alone = both[both["layer"] == "GPU"].groupby(["run_id", "repetition"])["share"].sum()
    alone = (f"at most {gpu_alone.max() * 100:.1f}% of training in any run" if len(gpu_alone)
             else "never seen: no run has a row of the `GPU` layer")
    spread = max(_survey_spread(a_rows, "algorithm"), _survey_spread(s_rows, "env"))
    return (f"Full scale as run: {steps:,} environment steps asked per algorithm"
            f"{f' ({rounded})' if rounded else ''}; off-policy: {starts:,} random steps, then "
            f"{steps - starts:,} steps with one gradient step each; {int(s_runs['timesteps'].iloc[0]):,} per "
            f"simulator ({rollouts} PPO rollouts of {per_rollout}); {a_runs['repetition'].nunique()} repetitions "
            f"each, one environment (`DummyVecEnv`), device `cuda`. That was the largest that fit a session's device "
            f"time: the runs of algorithm choice took {a_runs['run_seconds'].sum():.0f} s on the H100, those of "
            f"simulator choice {s_runs['run_seconds'].sum() / 60:.1f} minutes. \"Max spread\" is the largest "
            f"difference between the repetitions of any share in the row: every share was stable to {spread:.1f} "
            f"points or better. The GPU alone, with the CPU waiting on nothing (the `GPU` layer), was {alone}.\n")


def algorithm_findings() -> str:
    """Why the algorithm and simulator surveys differ from the paper, from their own numbers."""
    data = ok_results("algorithm_choice")
    breakdown, moves = data[data["table"] == "breakdown"], data[data["table"] == "transitions"]

    def of(algorithm: str) -> tuple[Callable[..., float], Callable[..., float]]:
        return (_shares(breakdown[breakdown["algorithm"] == algorithm]),
                _per_step(moves[moves["algorithm"] == algorithm]))

    ppo = HYPERPARAMETERS["ppo"]
    per_rollout = ppo["n_epochs"] * ppo["n_steps"] // ppo["batch_size"]
    per_step = per_rollout / ppo["n_steps"]
    (ppo_share, ppo_moves), (a2c, _), (sac, sac_moves) = of("ppo"), of("a2c"), of("sac")
    calls, kernels = ppo_moves("Python->Backend", "backpropagation"), ppo_moves("GPU kernels", "backpropagation")
    sac_kernels = sac_moves("GPU kernels")
    simulators = ok_results("simulator_choice")
    sim_moves = simulators[simulators["table"] == "transitions"]
    ale = _per_step(sim_moves[sim_moves["env"].str.startswith("ALE/")])("Python->Simulator")
    mujoco = sim_moves[~sim_moves["env"].str.startswith("ALE/") & (sim_moves["transition"] == "Python->Simulator")]
    mujoco_calls = [_per_step(sim_moves[sim_moves["env"] == env])("Python->Simulator")
                    for env in mujoco["env"].unique()]
    back = "backpropagation"
    return "\n".join([
        f"- **PPO is backpropagation-heavy here** because of the rl-zoo3 hyperparameters for Walker2d "
        f"that we use: {ppo['n_epochs']} epochs over each {ppo['n_steps']}-step rollout in minibatches of "
        f"{ppo['batch_size']} is {per_rollout} gradient steps per rollout, {per_step:.2f} per environment step. "
        f"Each gradient step makes ~{calls / per_step:.0f} Python->Backend calls and launches "
        f"~{kernels / per_step:.0f} kernels: {calls:.0f} of PPO's {ppo_moves('Python->Backend'):.0f} "
        f"Python->Backend transitions per environment step, and {kernels:.0f} of its "
        f"{ppo_moves('GPU kernels'):.0f} kernels. A2C, one gradient step "
        f"per 5 environment steps (SB3's default `n_steps`), spends "
        f"{a2c('inference') + a2c('simulation'):.0f}% of its time collecting data (inference "
        f"{a2c('inference'):.1f}%, simulation {a2c('simulation'):.1f}%: the table above), as the paper's on-policy "
        f"workloads did.",
        f"- **Backpropagation is Backend- and CUDA-API-bound, not GPU-bound.** For SAC, {sac(back):.1f}% of "
        f"training is backpropagation, of which the GPU is busy for {sac(back, _GROUPS['GPU']):.1f} points; the "
        f"rest is the backend's C++ ({sac(back, _GROUPS['Backend']):.0f} points), Python "
        f"({sac(back, _GROUPS['Python']):.0f}) and CUDA API calls ({sac(back, _GROUPS['CUDA API']):.0f}) launching "
        f"~{sac_kernels:.0f} tiny kernels per environment step. This is RL-Scope's central observation, unchanged "
        f"on a 2025 GPU: the GPU got faster, the launch path did not.",
        f"- **Pong's simulation is expensive here**: {ale:.0f} calls into the ALE per environment step (frame "
        f"skip 4, each frame's `act` and the screen reads of SB3's `AtariWrapper`), against "
        f"{span(mujoco_calls, '{:.0f}')} for MuJoCo's environments. The paper's note attributes "
        f"Pong's difference to the atari-py version; ale-py 0.12's Python-level API makes many more calls than one "
        f"fused step.",
        f"- **Where SB3's data-collection glue lands**: for off-policy algorithms `inference` is `policy.predict` "
        f"(the same call in SB3 and SBX), which includes converting observations to tensors and actions back to "
        f"NumPy; for on-policy ones it is the acting network's forward pass (a forward hook), so `obs_as_tensor` and "
        f"`.cpu().numpy()` (~{ppo_moves('Backend->CUDA', '(unannotated)'):.0f} CUDA API calls per PPO step, mostly "
        f"copies) are \"outside operations\" ({ppo_share('(unannotated)'):.1f}% of PPO's time, "
        f"{a2c('(unannotated)'):.1f}% of A2C's).",
    ]) + "\n"


def framework_findings() -> str:
    """What rlscope's layers add to the framework comparison, per iteration (environment step)."""
    data = ok_results("RL_framework_comparison")
    breakdown = data[data["table"] == "breakdown"]

    def ms(framework: str, operation: str, layers: list[str] | None = None, algorithm: str = "td3") -> float:
        """Milliseconds per iteration in that operation (and layers), mean over repetitions."""
        rows = breakdown[(breakdown["algorithm"] == algorithm) & (breakdown["framework"] == framework)
                         & (breakdown["operation"] == operation)]
        if layers is not None:
            rows = rows[rows["layer"].isin(layers)]
        per_rep = (rows["seconds"] / rows["iterations"]).groupby(rows["repetition"]).sum()
        return float(per_rep.mean() * 1e3) if len(rows) else 0.0

    back = "backpropagation"
    runs = _runs(breakdown)
    baseline = runs[runs["uninstrumented_learn_s"].notna()]
    pairs = ", ".join(f"{r.algorithm.upper()} / {FRAMEWORK_LABELS[r.framework]} {r.uninstrumented_learn_s:.1f} s "
                      f"unprofiled, {r.profiled_learn_s:.1f} s profiled" for r in baseline.itertuples())
    ratios = baseline["profiled_learn_s"] / baseline["uninstrumented_learn_s"]
    lines = [
        f"- **Eager PyTorch's backpropagation is Backend-bound**: {ms('sb3', back, _GROUPS['Backend']):.2f} of "
        f"TD3's {ms('sb3', back):.2f} ms of backpropagation per iteration are in torch's C++ (autograd, dispatcher, "
        f"the foreach Adam), {ms('sb3', back, _GROUPS['Python']):.2f} ms in Python, "
        f"{ms('sb3', back, _GROUPS['CUDA API']):.2f} ms in CUDA API calls, and the GPU is busy "
        f"{ms('sb3', back, _GROUPS['GPU']):.2f} ms. The GPU is not the bottleneck in any framework.",
        f"- **JAX's remaining cost is Python**: {ms('sbx', back, _GROUPS['Python']):.2f} of SBX's "
        f"{ms('sbx', back):.2f} ms of backpropagation per iteration is Python (flattening the train state's pytrees "
        f"and dispatching the jitted call); the backend takes {ms('sbx', back, _GROUPS['Backend']):.2f} ms and the "
        f"GPU {ms('sbx', back, _GROUPS['GPU']):.2f} ms. SBX's inference ({ms('sbx', 'inference'):.2f} ms) is not "
        f"faster than eager's ({ms('sb3', 'inference'):.2f} ms): one jitted call per action still pays dispatch and "
        f"a device->host copy.",
    ]
    if len(baseline):
        lines.append(f"- The manifest's own \"without profiler\" column (`baseline: true`, one run each) is too "
                     f"noisy for a speed comparison: profiled over unprofiled ranges from {ratios.min():.2f}x to "
                     f"{ratios.max():.2f}x between these single runs ({pairs}). The speed comparison rests on the "
                     f"interleaved rounds above.")
    return "\n".join(lines) + "\n"


def scale_up_findings() -> str:
    """nvidia-smi against the true GPU-bound time, and where the added actors' time goes."""
    data = ok_results("scale_up")
    gpu, breakdown = data[data["table"] == "gpu"], data[data["table"] == "breakdown"]
    measure = gpu.pivot_table(index="workers", columns="measure", values="percent")
    samples = gpu.pivot_table(index="workers", columns="measure", values="samples")
    smi, bound, gpm = (measure[m] for m in ("nvidia-smi utilization.gpu", "GPU-bound (kernels+copies)",
                                            "SM utilisation (GPM)"))
    first = gpu.drop_duplicates("workers").set_index("workers")
    fewest, most = measure.index.min(), measure.index.max()

    def api_share(workers: int, role: str) -> float:
        mine = breakdown[(breakdown["workers"] == workers) & (breakdown["role"] == role)]
        operation = "backpropagation" if role == "learner" else "inference"
        api = mine[(mine["operation"] == operation) & (mine["layer"] == "CUDA API")]["seconds"].sum()
        return float(api / mine["seconds"].sum() * 100)

    inflation = smi / bound
    return "\n".join([
        f"(NVML samples: {span(samples['nvidia-smi utilization.gpu'], '{:.0f}')} per run in the window; the "
        f"GPU-bound share is over "
        f"{samples['GPU-bound (kernels+copies)'].min() / 1e6:.2f} million kernel and copy intervals per run. One "
        f"run per M. Data `h100/scale_up/results.csv`.)",
        "",
        "![scale-up: per-process breakdown](casestudies/scale_up_breakdown.png)",
        "",
        f"- **nvidia-smi inflates GPU use {span(inflation, '{:.1f}')}x** (the table's last column; the "
        f"`utilisation-inflated` claim takes its smallest): it reports the GPU busy {span(smi, '{:.1f}')}% of the "
        f"time at every M, while kernels and copies of all {fewest + 1}-{most + 1} processes together cover "
        f"{span(bound, '{:.1f}')}% of it, and GPM's SM "
        f"utilisation (how much of the GPU those kernels occupy) is at most {gpm.max():.1f}%. RL-Scope's finding "
        f"holds.",
        f"- **Adding actors does not add GPU work; it adds waiting.** CUDA API calls in the actors' inference take "
        f"{api_share(fewest, 'worker'):.0f}% of their time at M = {fewest} and {api_share(most, 'worker'):.0f}% at "
        f"M = {most}; in the learner's backpropagation, {api_share(fewest, 'learner'):.0f}% and "
        f"{api_share(most, 'learner'):.0f}% of its time. The actors' throughput grows only "
        f"{first['worker_steps_per_s'][most] / first['worker_steps_per_s'][fewest]:.1f}x for {most // fewest}x the "
        f"processes and the learner's update rate falls "
        f"{first['learner_updates_per_s'][fewest] / first['learner_updates_per_s'][most]:.1f}x. The GPU-bound share "
        f"stays at {span(bound, '{:.1f}')}%. This is consistent with the GPU time-slicing between the "
        f"processes' CUDA contexts (no MPS here), so that every tiny launch-and-synchronise waits for other "
        f"processes' slices; it was not separately measured.",
    ]) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "case_study_runs": case_study_runs, "algorithm_findings": algorithm_findings,
    "framework_findings": framework_findings, "scale_up_findings": scale_up_findings,
}

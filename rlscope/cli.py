"""The ``rlscope`` command line.

Every user mistake surfaces as one line on stderr and exit code 2; a sweep with failed runs
exits 1 after saying which runs failed and where their logs are.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

import click

from rlscope._version import __version__
from rlscope.errors import RlscopeError, os_error_message

__all__ = ["main", "cli"]

EXIT_USAGE = 2
EXIT_RUNS_FAILED = 1
EXIT_INTERRUPTED = 130


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="rlscope")
def cli() -> None:
    """Profile deep-RL workloads across the stack and reproduce the papers' figures."""


@cli.command()
@click.argument("manifests", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--scale", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="quick: minutes on a laptop CPU; full: the paper's sizes, for a GPU machine.")
@click.option("--output", "output_dir", type=click.Path(path_type=Path), default=Path("output"), show_default=True,
              help="Runs go to OUTPUT/<experiment>/, figures to OUTPUT/artifacts/experiment_<experiment>/.")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Local executor: runs in flight at once, across all MANIFESTS (timings are cleanest with 1).")
@click.option("--executor", "executor_name", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: subprocesses on this machine; ray: Ray tasks (one CPU, one GPU where the run uses it).")
@click.option("--address", default=None, metavar="ADDRESS",
              help="Ray: 'auto' or HOST:PORT of a running cluster (default: start Ray on this machine).")
@click.option("--force", is_flag=True, help="Re-run runs that are already complete; replace the runs of another "
                                           "workload in an experiment's directory.")
@click.option("--plot/--no-plot", default=True, show_default=True, help="Draw the manifest's figures at the end.")
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE", callback=lambda _c, _p, v: _assignments(v),
              help="Give a parameter one value (after the scale's) in each manifest having it, e.g. --set device=cuda.")
@click.option("--dry-run", is_flag=True, help="Check the manifests and list the runs they make; run nothing.")
def run(manifests: tuple[Path, ...], scale: str, output_dir: Path, jobs: int, executor_name: str,
        address: str | None, force: bool, plot: bool, overrides: dict[str, Any], dry_run: bool) -> None:
    """Run every point of each MANIFEST's parameter grid; complete runs are reused.

    With several manifests, runs start in the order given and share the --jobs slots (a long run
    of one manifest goes on while the next manifest's runs fill the other slots); a failed run in
    one never stops the others; the end lists every manifest's runs (ok, failed, skipped) and the
    exit status is 1 if any run failed."""
    from rlscope.harness.manifest import load_manifest, with_overrides
    from rlscope.harness.runner import run_sweeps

    if address is not None and executor_name != "ray":
        raise click.BadParameter("--address is for --executor ray", param_hint="--address")
    if jobs > 1 and executor_name == "ray":
        click.echo("note: --jobs is the local executor's; with Ray the cluster's CPUs and GPUs decide", err=True)
    specs = with_overrides([load_manifest(path, scale) for path in manifests], overrides)  # every mistake first
    if dry_run:
        from rlscope.harness.worker import resolve_workload

        for spec in specs:
            resolve_workload(spec.workload)  # as the runner does before its first run
            points = list(spec.points())
            click.echo(f"{spec.experiment} ({scale}): {len(points)} runs x {spec.repetitions} repetitions of "
                       f"{spec.workload}, into {output_dir / spec.experiment}")
            for point in points:
                click.echo(f"  {point.run_id}")
        return
    figure_failures: dict[str, list[str]] = {}

    def finished(spec: Any, summary: Any) -> None:
        figure_failures[spec.experiment] = _report(spec, scale, summary, output_dir, plot)

    # SIGTERM (a batch system's or a container's stop) ends the sweep as Ctrl-C does: the runner
    # stops its workers and keeps what finished, instead of leaving them running without it.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with contextlib.closing(_executor(executor_name, jobs, address)) as executor:
            summaries = list(zip(specs, run_sweeps(specs, output_dir, executor=executor, force=force,
                                                   on_finished=finished)))
    finally:
        signal.signal(signal.SIGTERM, previous)
    if any(summary.interrupted for _, summary in summaries):
        click.echo("interrupted: finished runs are kept; run the same command again to resume", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if len(summaries) > 1:
        click.echo(f"\nsummary ({scale}):")
        for spec, summary in summaries:
            counts = ", ".join(f"{summary.count(s)} {s}" for s in ("ok", "reused", "skipped", "failed", "timeout"))
            click.echo(f"  {spec.experiment}: {counts}")
            for outcome in summary.failures:
                click.echo(f"    {outcome.status} {outcome.run_id}: log {outcome.log}")
            for failure in figure_failures.get(spec.experiment, []):
                click.echo(f"    figure not drawn: {failure}")
    if any(summary.failures for _, summary in summaries) or any(figure_failures.values()):
        sys.exit(EXIT_RUNS_FAILED)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _executor(name: str, jobs: int, address: str | None) -> Any:
    if name == "ray":
        from rlscope.harness.ray_executor import RayExecutor

        return RayExecutor(address)
    from rlscope.harness.executors import LocalExecutor

    return LocalExecutor(jobs=jobs)


def _assignments(texts: tuple[str, ...]) -> dict[str, Any]:
    """``NAME=VALUE`` pairs, each VALUE read as YAML reads a manifest's (numbers, true/false, text)."""
    import yaml

    from rlscope.harness.manifest import read_yaml_value

    out: dict[str, Any] = {}
    for text in texts:
        name, sep, raw = text.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{text!r} is not NAME=VALUE (e.g. device=cuda)", param_hint="--set")
        try:
            value = read_yaml_value(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if not isinstance(value, (str, int, float, bool)):
            raise click.BadParameter(f"{text!r}: VALUE must be one text, number or boolean", param_hint="--set")
        out[name.strip()] = value
    return out


def _report(spec: Any, scale: str, summary: Any, output_dir: Path, plot: bool) -> list[str]:
    """One manifest's outcome: counts, skipped runs and why, figures, failed runs with their logs.
    Returns the figures that could not be drawn ('name: reason')."""
    counts = ", ".join(f"{summary.count(s)} {s}" for s in ("ok", "reused", "skipped", "failed", "timeout")
                       if summary.count(s))
    click.echo(f"{spec.experiment} ({scale}): {len(summary.outcomes)}/{summary.total} runs finished: {counts}")
    for outcome in summary.outcomes:
        if outcome.status == "skipped":
            click.echo(f"  skipped {outcome.run_id}: {outcome.message}")
    click.echo(f"results: {summary.results_csv}")
    if summary.interrupted:
        return []
    figure_failures: list[str] = []
    if plot and spec.figures and (summary.count("ok") or summary.count("reused")):
        try:
            figure_failures = _draw(summary.experiment_dir, output_dir / "artifacts")
        except RlscopeError as err:  # results.csv unreadable: this manifest's figures, not the other sweeps
            click.echo(f"figures not drawn: {err}", err=True)
            figure_failures = [f"all: {err}"]
    if summary.failures:
        click.echo(f"{len(summary.failures)} run(s) failed:", err=True)
        for outcome in summary.failures:
            click.echo(f"  {outcome.run_id}: {outcome.message}\n    log: {outcome.log}", err=True)
    return figure_failures


@cli.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=None,
              help="Where figures go (experiment: the artifacts/ folder beside it; trace: DIRECTORY/figures).")
def plot(directory: Path, out_dir: Path | None) -> None:
    """Draw figures of an experiment directory (`rlscope run`) or a trace directory (`rlscope prof`)."""
    if (directory / "experiment.json").exists() or not _is_trace(directory):
        if _draw(directory, out_dir or directory.resolve().parent / "artifacts"):
            sys.exit(EXIT_RUNS_FAILED)
        return
    from rlscope.analyze import ANALYSIS_DIR
    from rlscope.plot.render import draw_profile

    if not (directory / ANALYSIS_DIR / "breakdown.parquet").exists():
        click.echo(f"{directory} has no analysis tables yet: analysing it first", err=True)
        _analyze(directory)
    for path in draw_profile(directory, out_dir or directory / "figures"):
        if path.suffix == ".pdf":
            click.echo(f"figure: {path}")


def _is_trace(directory: Path) -> bool:
    return any(directory.glob("*/meta.json"))


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--output", "output_dir", type=click.Path(path_type=Path), default=None,
              help="Trace directory (default: output/traces/<script>-<time>).")
@click.option("--transitions/--no-transitions", default=True, show_default=True,
              help="Record every call from Python into ML backends and simulators.")
@click.option("--gpu/--no-gpu", default=True, show_default=True,
              help="Record CUDA API calls, kernels and copies (CUPTI) and GPU utilisation (NVML) where a GPU is.")
@click.option("--process", default=None, help="Process name in results (default: the script's name).")
@click.option("--target", "targets", multiple=True, metavar="MODULE=CATEGORY",
              help="Also count calls into MODULE (prefix) as backend or simulator, e.g. --target mysim=simulator.")
@click.option("--analyze/--no-analyze", "then_analyze", default=True, show_default=True,
              help="Analyze the trace when the command ends.")
@click.option("--sample", "sample", default=None, is_flag=False, flag_value="", metavar="[SPEC]",
              help="For long runs: everything only in windows of a few iterations at random places, and "
                   "between them how many iterations ran in what time, within a trace budget in MB per hour "
                   "(SPEC e.g. window=20,block=500,warmup=50,settle=2,budget=100,seed=1; "
                   "--sample alone: those defaults, except the seed).")
@click.option("--jax-scopes", "jax_scopes", default=None, is_flag=False, flag_value="default",
              type=click.Choice(["default", "precise"]), metavar="[precise]",
              help="Split the GPU time of jax.jit calls by jax.named_scope (XLA's optimised HLO is kept in the "
                   "trace); =precise also records XLA's NVTX ranges, with CUDA graphs off (docs/jax-scopes.md).")
@click.option("--force", is_flag=True, help="Replace the trace already in --output.")
@click.option("--append", is_flag=True,
              help="Add this command's processes to the trace already in --output (a script run in parts); "
                   "the analysis then covers them all.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def prof(output_dir: Path | None, transitions: bool, gpu: bool, process: str | None, targets: tuple[str, ...],
         then_analyze: bool, sample: str | None, jax_scopes: str | None, force: bool, append: bool,
         command: tuple[str, ...]) -> None:
    """Run COMMAND with every Python process in it profiled: rlscope prof -- python train.py ARGS"""
    from rlscope.collect.launch import check_profile_options, default_output, is_trace_part, run_profiled
    from rlscope.outputs import claim_output, output_lock

    if force and append:
        raise click.UsageError("--force replaces the trace in --output and --append adds to it: give one")
    check_profile_options(list(command), list(targets), sample, jax_scopes)  # before --output is claimed
    if output_dir is None:
        output_dir = default_output(list(command), "traces")
    with output_lock(output_dir, "rlscope prof " + " ".join(command)):  # claimed under the lock: see outputs
        claim_output(output_dir, is_trace_part, force=force, append=append, what="a trace")
        trace_dir, code = run_profiled(list(command), output_dir, transitions=transitions, gpu=gpu,
                                       process=process, targets=list(targets), sample=sample,
                                       jax_scopes=jax_scopes)
        click.echo(f"trace: {trace_dir}", err=True)
        if then_analyze and _is_trace(trace_dir):
            _analyze(trace_dir)
    sys.exit(code)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--output", "output_dir", type=click.Path(path_type=Path), default=None,
              help="Where calibration.json and the runs go (default: output/calibration/<script>-<time>).")
@click.option("--repetitions", "-r", type=int, default=3, show_default=True,
              help="Runs of the workload (of each configuration, interleaved, where it has no rlscope.step()); "
                   "more give tighter costs.")
@click.option("--gpu/--no-gpu", default=True, show_default=True, help="Also calibrate CUDA API and GPU records.")
@click.option("--timeout", "timeout_s", type=float, default=3600, show_default=True, help="Seconds per run.")
@click.option("--window-ms", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Length of the windows in which each layer is switched on and off "
                   "(at rlscope.step() boundaries).")
@click.option("--precision", "precision_pct", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Add runs until a corrected iteration is uncertain to at most ± this many % (95%) "
                   "(up to 4x --repetitions runs; 0: never): for workloads whose iterations outlast a window.")
@click.option("--startup-pairs", type=click.IntRange(min=0), default=3, show_default=True,
              help="Per repetition, start-ups run uninstrumented and profiled to their first rlscope.step(), "
                   "for what profiling adds to a start-up beyond its events (0: not measured). Where a GPU is "
                   "traced, all but the first pair run to the end and also measure what a continuously "
                   "profiled run pays per CUDA API call beyond the windows' costs.")
@click.option("--extend", is_flag=True,
              help="Add the repetitions to the calibration already in --output (same command and machine) and "
                   "derive the costs from all its runs: tighter costs without running the first ones again.")
@click.option("--force", is_flag=True, help="Replace the calibration already in --output.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def calibrate(output_dir: Path | None, repetitions: int, gpu: bool, timeout_s: float, window_ms: float,
              precision_pct: float, startup_pairs: int, extend: bool, force: bool, command: tuple[str, ...]) -> None:
    """Measure what each recorded event costs, for `rlscope analyze --corrected`:
    rlscope calibrate -- python train.py ARGS"""
    from rlscope.calibrate import CALIBRATION_FILE
    from rlscope.calibrate import calibrate as run_calibration
    from rlscope.calibrate.ladder import is_calibration_part
    from rlscope.collect.launch import default_output
    from rlscope.outputs import claim_output, output_lock

    if extend and output_dir is None:
        raise click.UsageError("--extend needs --output: the directory of the calibration to extend")
    if force and extend:
        raise click.UsageError("--force replaces the calibration in --output and --extend adds to it: give one")
    output_dir = output_dir or default_output(list(command), "calibration")
    with output_lock(output_dir, "rlscope calibrate " + " ".join(command)):
        claim_output(output_dir, is_calibration_part, force=force, append=extend, what="a calibration",
                     append_flag="--extend")
        calibration, failures = run_calibration(list(command), output_dir, repetitions, gpu, timeout_s,
                                                progress=lambda line: click.echo(line, err=True),
                                                window_ms=window_ms, precision_pct=precision_pct,
                                                startup_pairs=startup_pairs, extend=extend)
    for event, cost in calibration.costs_ns.items():
        ci = calibration.ci95_ns.get(event)
        click.echo(f"{event:>14}: {cost:10.1f} ns per event" + (f" ± {ci:.1f} (95%)" if ci is not None else ""))
    if calibration.startup_ns is not None:
        ci = calibration.startup_ci95_ns
        click.echo(f"{'start-up':>14}: {calibration.startup_ns / 1e6:10.1f} ms before the first rlscope.step(), "
                   f"beyond its events" + (f" ± {ci / 1e6:.1f} (95%)" if ci is not None else ""))
    if calibration.cupti_residual_ns is not None:
        ci = calibration.cupti_residual_ci95_ns
        click.echo(f"the CUDA API cost includes {calibration.cupti_residual_ns:.0f} ns"
                   + (f" ± {ci:.0f}" if ci is not None else "") + " that CUPTI's recording leaves on every CUDA "
                   "call, unseen by the windows", err=True)
    if calibration.continuous_ns is not None:
        ci = calibration.continuous_ci95_ns
        click.echo(f"the CUDA API cost includes {calibration.continuous_ns:.0f} ns"
                   + (f" ± {ci:.0f}" if ci is not None else "") + " that a continuously profiled run paid per "
                   "call beyond the windows' costs (whole-run pairs)", err=True)
    if calibration.blocks:
        click.echo(f"costs from {calibration.blocks} blocks of alternating windows", err=True)
    if calibration.uncertainty_pct is not None:
        click.echo(f"a corrected iteration is uncertain to ±{calibration.uncertainty_pct:.1f}% (95%)", err=True)
    if any(ci is None for ci in calibration.ci95_ns.values()):
        click.echo("too little data for a confidence interval on some costs (a median needs 6 blocks of windows, "
                   "whole runs 2 repetitions); use --repetitions 3 or more, or a longer run", err=True)
    click.echo(f"calibration: {output_dir / CALIBRATION_FILE}")
    if failures:
        click.echo("failed runs (the others were used):\n  " + "\n  ".join(failures), err=True)
        sys.exit(1)


@cli.command()
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option("--corrected", is_flag=True, help="Also subtract rlscope's own overhead (needs a calibration).")
@click.option("--calibration", "calibration_file", type=click.Path(path_type=Path), default=None,
              help="calibration.json from `rlscope calibrate` (default: TRACE_DIR/calibration.json).")
@click.option("--drop-corrupt", is_flag=True,
              help="Where a trace chunk is corrupt, analyse the chunks before it instead of stopping.")
def analyze(trace_dir: Path, corrected: bool, calibration_file: Path | None, drop_corrupt: bool) -> None:
    """Compute time breakdown and transition tables of TRACE_DIR (into TRACE_DIR/analysis/)."""
    _analyze(trace_dir, (calibration_file or trace_dir / "calibration.json") if corrected else None, drop_corrupt)


def _analyze(trace_dir: Path, calibration_file: Path | None = None, drop_corrupt: bool = False) -> None:
    from rlscope.analyze import ANALYSIS_DIR, write_tables
    from rlscope.analyze.summary import format_correction, format_jax_scopes, format_summary
    from rlscope.calibrate import analyze_corrected

    tables = analyze_corrected(trace_dir, calibration_file, drop_corrupt)
    write_tables(tables, trace_dir / ANALYSIS_DIR)
    click.echo(format_summary(tables["breakdown"], tables["transitions"], tables["gpu"]))
    if scopes := format_jax_scopes(tables["jax_scopes"]):
        click.echo(scopes)
    if calibration_file is not None:
        click.echo(format_correction(tables["breakdown"]))
    click.echo(f"tables: {trace_dir / ANALYSIS_DIR}/{{{','.join(tables)}}}.{{csv,parquet}}")


@cli.command()
@click.option("--scale", type=click.Choice(["quick", "full"]), default="quick", show_default=True,
              help="What the checks must allow: quick (CPU side) or full (GPU collection too).")
def doctor(scale: str) -> None:
    """Check what rlscope can use here (Python, native modules, packages, GPU, CUPTI, NVML), with
    the fix for each failure; exit 0 when everything SCALE needs works."""
    from rlscope.doctor import failures, run_checks

    checks = run_checks(scale)
    width = max(len(c.name) for c in checks)
    for check in checks:
        mark = {True: "ok  ", False: "FAIL", None: "--  "}[check.ok]
        line = f"{mark} {check.name:<{width}}  {check.detail}"
        if check.ok is not True and check.fix:
            line += f"\n     {'':<{width}}  fix: {check.fix}"
        click.echo(line)
    failed = failures(checks, scale)
    if failed:
        click.echo(f"{len(failed)} check(s) failed for {scale} scale: " + ", ".join(c.name for c in failed), err=True)
        sys.exit(1)
    click.echo(f"ready for {scale} scale")


@cli.command()
@click.argument("trace_dir", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["perfetto"]), default="perfetto", show_default=True,
              help="perfetto: Chrome trace-event JSON (ui.perfetto.dev, Holistic Trace Analysis).")
@click.option("-o", "--out", "out", type=click.Path(path_type=Path), required=True, help="File to write.")
def export(trace_dir: Path, fmt: str, out: Path) -> None:
    """Export TRACE_DIR for other trace viewers."""
    from rlscope.analyze.attribution import read_attributed
    from rlscope.trace.perfetto import export_perfetto

    click.echo(f"wrote {export_perfetto(read_attributed(trace_dir), out)}")


_CONFIGS_OPTION = click.option("--configs", "configs_dir", type=click.Path(path_type=Path), default=Path("configs"),
                               show_default=True, help="The directory of manifests whose paper claims are checked.")


@cli.command()
@click.argument("output_dir", type=click.Path(path_type=Path), default=Path("output"))
@_CONFIGS_OPTION
def report(output_dir: Path, configs_dir: Path) -> None:
    """Write OUTPUT_DIR/report.html: the papers' claims with their verdicts, every experiment's
    figures, key numbers, failed and skipped runs with their reasons and logs, and the
    environment, in one self-contained page."""
    from rlscope.report import write_report

    verdicts = []
    if configs_dir.is_dir():  # the claims of the experiments this directory holds
        try:
            verdicts = [v for v in _verdicts(output_dir, configs_dir) if (output_dir / v.experiment).is_dir()]
        except RlscopeError as err:  # a manifest's claim is wrong: the page is still written, without claims
            click.echo(f"warning: the page has no claims section: {err}", err=True)
    else:
        click.echo(f"warning: no manifests in {configs_dir}: the page has no claims section (--configs DIR)",
                   err=True)
    click.echo(f"report: {write_report(output_dir, claims=verdicts)}")


@cli.command()
@click.argument("output_dir", type=click.Path(path_type=Path), default=Path("output"))
@_CONFIGS_OPTION
@click.option("--markdown", is_flag=True, help="Print Markdown tables instead of text.")
@click.option("--into", "page", type=click.Path(path_type=Path), default=None,
              help="Write the Markdown tables into PAGE, between its claims markers (links relative to PAGE).")
@click.option("--paper", "papers", multiple=True, type=click.Choice(["datacollection", "rlscope"]),
              help="Only this paper's claims (repeatable; default: both).")
@click.option("--require-all", is_flag=True, help="Exit 1 if a claim was not run.")
def claims(output_dir: Path, configs_dir: Path, markdown: bool, page: Path | None, papers: tuple[str, ...],
           require_all: bool) -> None:
    """Which of the papers' claims reproduce: per claim of the manifests in --configs, the paper's
    value, ours from OUTPUT_DIR/<experiment>/results.csv (with its spread over repetitions), the
    verdict (reproduced; same direction, different size; contradicted; not run) and why."""
    from rlscope.claims.render import as_markdown, as_text, into_page
    from rlscope.claims.verdict import NOT_RUN
    from rlscope.files import write_atomic

    verdicts = [v for v in _verdicts(output_dir, configs_dir) if not papers or v.claim.paper in papers]
    if page is not None:
        text = page.read_text(encoding="utf-8")
        write_atomic(page, into_page(text, as_markdown(verdicts, output_dir, page.parent), page))
        click.echo(f"claims written into {page}")
    elif markdown:
        click.echo(as_markdown(verdicts, output_dir), nl=False)
    else:
        click.echo(as_text(verdicts))
    if require_all and any(v.verdict == NOT_RUN for v in verdicts):
        click.echo("not every claim was run (--require-all)", err=True)
        sys.exit(EXIT_RUNS_FAILED)


def _verdicts(output_dir: Path, configs_dir: Path) -> list[Any]:
    """The claims of the manifests in ``configs_dir``, judged on the results in ``output_dir``."""
    from rlscope.claims.verdict import evaluate, results_in
    from rlscope.harness.manifest import load_claims

    if not output_dir.is_dir():
        raise RlscopeError(f"{output_dir}: no such output directory; run `rlscope run MANIFEST --output "
                           f"{output_dir}` first")
    return evaluate(load_claims(configs_dir), results_in(output_dir))


def _draw(experiment_dir: Path, artifacts_dir: Path) -> list[str]:
    """Draw an experiment's figures; the ones that failed, each as 'name: reason' (also printed)."""
    from rlscope.plot.render import draw_experiment

    written, failures = draw_experiment(experiment_dir, artifacts_dir)
    for path in written:
        if path.suffix == ".pdf":
            click.echo(f"figure: {path}")
    for failure in failures:
        click.echo(f"figure not drawn: {failure.name}: {failure.reason}", err=True)
    return [f"{failure.name}: {failure.reason}" for failure in failures]


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None) -> None:
    click.echo(f"warning: {message}", err=True)


def main() -> None:
    """Entry point: turn user errors into one line and exit code 2, with no traceback."""
    import warnings

    warnings.showwarning = _show_warning
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as err:
        err.show()
        sys.exit(EXIT_USAGE)
    except RlscopeError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(EXIT_USAGE)
    except OSError as err:  # the machine refused a read or write: one line saying what and how to fix it
        click.echo(f"error: {os_error_message(err)}", err=True)
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)


if __name__ == "__main__":
    main()

"""Claims as data: queries over synthetic results, each verdict kind, "not run", and the command."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from pydantic import TypeAdapter

from rlscope.claims.query import Measured, measure
from rlscope.claims.render import BEGIN, END, as_markdown, into_page
from rlscope.claims.schema import Claim
from rlscope.claims.units import format_value
from rlscope.claims.verdict import CONTRADICTED, DIFFERENT, NOT_RUN, REPRODUCED, evaluate, judge
from rlscope.errors import ClaimError, ManifestError
from rlscope.harness.manifest import load_manifest
from tests.conftest import REPO

CLAIM = TypeAdapter(Claim)


def _throughput() -> pd.DataFrame:
    """Two repetitions of a vectorisation sweep: gym plateaus at N = 16, jax keeps rising until
    2^10 and runs out of memory at 2^12; jax is 100x gym at every N in the second repetition and
    80x in the first."""
    rows = []
    for rep, factor in ((0, 80.0), (1, 100.0)):
        for n in (1, 4, 16, 64, 256, 1024):
            gym = 1000.0 * min(n, 16)
            rows.append({"run_id": f"gym-{n}", "status": "ok", "reason": "", "repetition": rep, "backend": "gym",
                         "num_envs": n, "samples_per_s": gym})
            rows.append({"run_id": f"jax-{n}", "status": "ok", "reason": "", "repetition": rep, "backend": "jax",
                         "num_envs": n, "samples_per_s": gym * factor if n <= 16 else 16000.0 * factor * n / 16})
        rows.append({"run_id": "jax-4096", "status": "oom", "reason": "out of GPU memory", "repetition": rep,
                     "backend": "jax", "num_envs": 4096, "samples_per_s": float("nan")})
    return pd.DataFrame(rows)


def _results(**tables: pd.DataFrame):
    return lambda name: tables.get(name)


def _claim(**fields) -> Claim:
    base = {"id": "c1", "paper": "datacollection", "figure": "Fig. 4", "text": "a claim"}
    return CLAIM.validate_python({**base, **fields})


RATIO_AT_4 = {"kind": "ratio", "numerator": {"where": {"backend": "jax", "num_envs": 4}, "metric": "samples_per_s"},
              "denominator": {"where": {"backend": "gym", "num_envs": 4}, "metric": "samples_per_s"}}


def test_a_ratio_is_paired_by_repetition_and_reports_its_spread():
    measured = measure(CLAIM.validate_python({**_claim(query=RATIO_AT_4, expect={"about": 90}).model_dump()}).query,
                       "vec", _results(vec=_throughput()))
    assert isinstance(measured, Measured)
    assert (measured.low, measured.high, measured.samples) == (80.0, 100.0, 2)
    assert measured.value == 90.0


@pytest.mark.parametrize(("expect", "verdict"), [
    ({"about": 95, "tolerance": 0.1}, REPRODUCED),
    ({"about": 300, "factor": 2}, DIFFERENT),        # ours 90, three times smaller: same side of 1
    ({"about": 0.5}, CONTRADICTED),                  # the paper finds gym faster; ours: jax
    ({"at_most": 4}, DIFFERENT),                     # a bound ours exceeds, on the paper's side of 1
    ({"at_least": 50}, REPRODUCED),
])
def test_each_verdict_of_a_ratio(expect, verdict):
    claim = _claim(query=RATIO_AT_4, expect=expect)
    [result] = evaluate([("vec", claim)], _results(vec=_throughput()))
    assert result.verdict == verdict, result.reason
    assert result.ours is not None and result.ours.value == 90.0


def test_a_claim_of_no_effect_is_contradicted_by_an_effect():
    spread = {"kind": "spread", "of": {"where": {"backend": "jax"}, "metric": "samples_per_s"}, "along": "num_envs"}
    claim = _claim(query=spread, expect={"about": 1, "tolerance": 0.5}, paper_value=1)
    [result] = evaluate([("vec", claim)], _results(vec=_throughput()))
    assert result.verdict == CONTRADICTED and "no effect" in result.reason
    assert result.unexplained


def test_a_plateau_is_the_first_n_within_reach_of_the_maximum():
    plateau = {"kind": "plateau", "of": {"where": {"backend": "gym"}, "metric": "samples_per_s"}, "along": "num_envs"}
    [result] = evaluate([("vec", _claim(query=plateau, unit="N", expect={"about": 16, "factor": 2}))],
                        _results(vec=_throughput()))
    assert result.verdict == REPRODUCED and result.ours.value == 16


def test_a_curve_still_rising_at_the_grids_end_is_not_run_and_says_why():
    plateau = {"kind": "plateau", "of": {"where": {"backend": "jax"}, "metric": "samples_per_s"}, "along": "num_envs"}
    [result] = evaluate([("vec", _claim(query=plateau, unit="N", expect={"about": 4096, "factor": 4}))],
                        _results(vec=_throughput()))
    assert result.verdict == NOT_RUN and result.ours is None
    assert "still rising" in result.reason and "2^12 did not finish (oom: out of GPU memory)" in result.reason


def test_missing_results_are_not_run():
    claim = _claim(query=RATIO_AT_4, expect={"about": 90})
    [absent] = evaluate([("vec", claim)], _results())
    assert absent.verdict == NOT_RUN and "vec has not run" in absent.reason
    failed = _throughput().assign(status="failed")
    [none_ok] = evaluate([("vec", claim)], _results(vec=failed))
    assert none_ok.verdict == NOT_RUN and "no finished run" in none_ok.reason and "failed" in none_ok.reason


def test_a_column_the_results_lack_is_not_run_and_an_ambiguous_query_is_an_error():
    unknown = {**RATIO_AT_4, "numerator": {"where": {"backnd": "jax"}, "metric": "samples_per_s"}}
    [result] = evaluate([("vec", _claim(query=unknown, expect={"about": 1}))], _results(vec=_throughput()))
    assert result.verdict == NOT_RUN and "no column 'backnd'" in result.reason
    several = {**RATIO_AT_4, "numerator": {"where": {"backend": "jax"}, "metric": "samples_per_s"}}
    with pytest.raises(ClaimError, match="claim c1 of vec's manifest: .* matches 6 rows per repetition"):
        evaluate([("vec", _claim(query=several, expect={"about": 1}))], _results(vec=_throughput()))


def test_across_reduces_over_a_free_column_and_combine_within_a_repetition():
    best = {"kind": "ratio", "across": None,
            "numerator": {"where": {"backend": "jax"}, "metric": "samples_per_s", "combine": "max"},
            "denominator": {"where": {"backend": "gym"}, "metric": "samples_per_s", "combine": "max"}}
    measured = measure(_claim(query=best, expect={"about": 1}).query, "vec", _results(vec=_throughput()))
    assert (measured.low, measured.high) == (80.0 * 64, 100.0 * 64)
    small = [1, 4, 16]
    worst = {**RATIO_AT_4, "numerator": {"where": {"backend": "jax", "num_envs": small}, "metric": "samples_per_s"},
             "denominator": {"where": {"backend": "gym", "num_envs": small}, "metric": "samples_per_s"},
             "across": "num_envs", "across_reduce": "min"}
    measured = measure(_claim(query=worst, expect={"about": 1}).query, "vec", _results(vec=_throughput()))
    assert (measured.value, measured.low, measured.high, measured.samples) == (90.0, 80.0, 100.0, 2)


def test_an_explanation_is_a_measured_number_in_the_reason():
    explain = [{"text": "gym's plateau is {value}", "unit": "samples/s",
                "query": {"kind": "value", "of": {"where": {"backend": "gym", "num_envs": 1024},
                                                  "metric": "samples_per_s"}}}]
    claim = _claim(query=RATIO_AT_4, expect={"about": 1000}, explain=explain)
    [result] = evaluate([("vec", claim)], _results(vec=_throughput()))
    assert result.verdict == DIFFERENT and not result.unexplained
    assert "gym's plateau is 1.6e+04 samples/s" in result.reason


def test_an_explanation_must_say_where_its_number_goes():
    with pytest.raises(Exception, match="value"):
        _claim(query=RATIO_AT_4, expect={"about": 1},
               explain=[{"text": "no number", "query": {"kind": "value", "of": {"metric": "x"}}}])


def test_judge_and_format():
    claim = _claim(query=RATIO_AT_4, expect={"about": 10}, unit="x")
    assert judge(10.0, claim)[0] == REPRODUCED
    assert format_value(0.381, "percent") == "38.1%"
    assert format_value(2 ** 18, "N") == "2^18"
    assert format_value(6.3e-5, "seconds") == "63 µs"


def _manifest(tmp_path: Path, claims: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent("""\
        experiment: vec
        workload: tests.toy_workloads:echo
        grid:
          x: [1, 2]
        """) + textwrap.dedent(claims))
    return path


def test_a_manifests_claims_are_checked_where_it_is_read(tmp_path):
    good = _manifest(tmp_path, """\
        claims:
          - id: c1
            paper: rlscope
            figure: Fig. 1
            text: t
            query: {kind: value, of: {metric: y}}
            expect: {at_least: 1}
        """)
    assert [c.id for c in load_manifest(good).claims] == ["c1"]
    two_targets = _manifest(tmp_path, """\
        claims:
          - id: c1
            paper: rlscope
            figure: Fig. 1
            text: t
            query: {kind: value, of: {metric: y}}
            expect: {at_least: 1, about: 2}
        """)
    with pytest.raises(ManifestError, match=r"m.yaml:11: field 'claims.0.expect': give exactly one of about"):
        load_manifest(two_targets)
    twice = _manifest(tmp_path, """\
        claims:
          - {id: c1, paper: rlscope, figure: F, text: t, query: {kind: value, of: {metric: y}}, expect: {at_least: 1}}
          - {id: c1, paper: rlscope, figure: F, text: t, query: {kind: value, of: {metric: y}}, expect: {at_least: 1}}
        """)
    with pytest.raises(ManifestError, match="claim id c1 appears twice"):
        load_manifest(twice)


def test_every_shipped_manifest_states_its_claims_validly():
    claims = [c for p in sorted((REPO / "configs").glob("*.yaml")) for c in load_manifest(p, "full").claims]
    assert len(claims) >= 20
    assert {c.paper for c in claims} == {"datacollection", "rlscope"}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlscope.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_command_exits_non_zero_on_not_run_only_when_asked(tmp_path):
    configs = tmp_path / "configs"
    configs.mkdir()
    _manifest(configs, """\
        claims:
          - id: ratio
            paper: datacollection
            figure: Fig. 4
            text: jax is 90x gym at N = 4
            query:
              kind: ratio
              numerator: {where: {backend: jax, num_envs: 4}, metric: samples_per_s}
              denominator: {where: {backend: gym, num_envs: 4}, metric: samples_per_s}
            expect: {about: 90}
          - id: elsewhere
            paper: rlscope
            figure: Fig. 1
            text: another experiment's number
            query: {kind: value, of: {experiment: absent, metric: y}}
            expect: {at_least: 1}
        """)
    out = tmp_path / "out"
    (out / "vec").mkdir(parents=True)
    _throughput().to_csv(out / "vec" / "results.csv", index=False)
    plain = _cli("claims", str(out), "--configs", str(configs), cwd=REPO)
    assert plain.returncode == 0, plain.stderr
    assert "[reproduced]" in plain.stdout and "[not run]" in plain.stdout and "absent has not run" in plain.stdout
    strict = _cli("claims", str(out), "--configs", str(configs), "--require-all", cwd=REPO)
    assert strict.returncode == 1 and "not every claim was run" in strict.stderr
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(f"# Results\n\n{BEGIN}\nold table\n{END}\n\nafter\n")
    written = _cli("claims", str(out), "--configs", str(configs), "--into", str(page), cwd=REPO)
    assert written.returncode == 0, written.stderr
    text = page.read_text()
    assert "old table" not in text and text.endswith(f"{END}\n\nafter\n")
    assert "(../out/vec/results.csv)" in text and "| 90x [80x–100x] | reproduced |" in text
    (out / "vec" / "experiment.json").write_text(json.dumps(
        {"experiment": "vec", "path": str(configs / "m.yaml"), "workload": "tests.toy_workloads:echo",
         "scale": "full", "grid": {"x": [1, 2]}}))
    reported = _cli("report", str(out), "--configs", str(configs), cwd=REPO)
    assert reported.returncode == 0, reported.stderr
    html = (out / "report.html").read_text()
    assert "The papers&#x27; claims" in html or "The papers' claims" in html
    assert "jax is 90x gym" in html and "absent has not run" in html
    missing = _cli("claims", str(out), "--configs", str(configs), "--into", str(tmp_path / "docs" / "none.md"),
                   cwd=REPO)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    no_markers = tmp_path / "plain.md"
    no_markers.write_text("# nothing to fill\n")
    refused = _cli("claims", str(out), "--configs", str(configs), "--into", str(no_markers), cwd=REPO)
    assert refused.returncode == 2 and "no claims block" in refused.stderr
    assert no_markers.read_text() == "# nothing to fill\n"


def test_into_page_keeps_what_is_around_the_block():
    page = f"a\n{BEGIN}\nx\n{END}\nb\n"
    assert into_page(page, "new\n", Path("p.md")) == f"a\n{BEGIN}\nnew\n{END}\nb\n"
    assert "no claims block" in str(pytest.raises(ClaimError, into_page, "a\n", "x", Path("p.md")).value)


def test_markdown_links_to_the_evidence(tmp_path):
    claim = _claim(query=RATIO_AT_4, expect={"about": 90})
    results = evaluate([("vec", claim)], _results(vec=_throughput()))
    text = as_markdown(results, tmp_path / "out", tmp_path / "docs")
    assert "[vec](../out/vec/results.csv)" in text and "1 claims: 1 reproduced." in text


def test_absolute_takes_an_errors_size_whatever_its_sign():
    errors = pd.DataFrame({"run_id": ["a", "b"], "status": ["ok", "ok"], "reason": ["", ""], "repetition": [0, 0],
                           "workload": ["w1", "w2"], "error_pct": [-6.0, 2.0]})
    query = {"kind": "value", "across": "workload", "across_reduce": "max",
             "of": {"metric": "error_pct", "absolute": True}}
    [result] = evaluate([("oc", _claim(query=query, unit="count", expect={"at_most": 5}))], _results(oc=errors))
    assert result.verdict == DIFFERENT and result.ours.value == 6.0


def test_runs_of_different_sessions_are_never_compared():
    table = _throughput()
    table["session"] = "a"
    later = table[table["backend"] == "jax"].assign(session="b", samples_per_s=lambda f: f["samples_per_s"] * 10)
    both = pd.concat([table, later], ignore_index=True)
    [result] = evaluate([("vec", _claim(query=RATIO_AT_4, expect={"about": 90}))], _results(vec=both))
    assert result.verdict == REPRODUCED and result.ours.high == 100.0  # session b's jax never meets a's gym
    apart = pd.concat([table[table["backend"] == "gym"], later], ignore_index=True)
    [result] = evaluate([("vec", _claim(query=RATIO_AT_4, expect={"about": 90}))], _results(vec=apart))
    assert result.verdict == NOT_RUN and "measured apart" in result.reason
    plateau = {"kind": "plateau", "of": {"where": {"backend": "gym"}, "metric": "samples_per_s"}, "along": "num_envs"}
    stub = table[(table["backend"] == "gym") & (table["num_envs"] >= 256)].assign(session="b")
    [result] = evaluate([("vec", _claim(query=plateau, unit="N", expect={"about": 16, "factor": 2}))],
                        _results(vec=pd.concat([table, stub], ignore_index=True)))
    assert result.ours.value == 16  # the session that ran the whole curve, not b's two points


def test_sum_by_totals_each_group_before_combining_them():
    rows = []
    for algorithm, shares in (("ppo", (0.1, 0.2)), ("a2c", (0.3, 0.1)), ("sac", (0.05, 0.05))):
        rows += [{"run_id": algorithm, "status": "ok", "reason": "", "repetition": 0, "algorithm": algorithm,
                  "layer": layer, "share": share} for layer, share in zip(("Python", "Simulator"), shares)]
    query = {"kind": "ratio",
             "numerator": {"where": {"algorithm": ["ppo", "a2c"]}, "metric": "share", "sum_by": "algorithm",
                           "combine": "mean"},
             "denominator": {"where": {"algorithm": "sac"}, "metric": "share", "sum_by": "algorithm",
                             "combine": "mean"}}
    measured = measure(_claim(query=query, expect={"at_least": 1}).query, "ac", _results(ac=pd.DataFrame(rows)))
    assert measured.value == pytest.approx(0.35 / 0.1)


def test_a_zero_denominator_is_no_measurement():
    table = _throughput()
    table.loc[(table["backend"] == "gym") & (table["num_envs"] == 4), "samples_per_s"] = 0.0
    [result] = evaluate([("vec", _claim(query=RATIO_AT_4, expect={"about": 90}))], _results(vec=table))
    assert result.verdict == NOT_RUN and "no finite value" in result.reason


def test_the_spread_is_over_repetitions_not_over_the_across_values():
    across = {**RATIO_AT_4, "numerator": {"where": {"backend": "jax"}, "metric": "samples_per_s"},
              "denominator": {"where": {"backend": "gym"}, "metric": "samples_per_s"}, "across": "num_envs",
              "across_reduce": "max"}
    measured = measure(_claim(query=across, expect={"about": 1}).query, "vec", _results(vec=_throughput()))
    # per repetition the largest ratio over N (80x64 and 100x64); never a point that was not judged
    assert (measured.low, measured.high, measured.samples) == (80.0 * 64, 100.0 * 64, 2)


def test_runs_are_told_apart_by_session_and_repetition_not_gone_across():
    with pytest.raises(Exception, match="how runs are told apart"):
        _claim(query={**RATIO_AT_4, "across": "repetition"}, expect={"about": 1})

"""Results pages hold only numbers their data gives: regenerating them changes nothing."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import reliability_page  # noqa: E402
import results_tables  # noqa: E402
import tables_common  # noqa: E402


def test_the_reliability_page_is_generated_from_its_data() -> None:
    assert reliability_page.render() == (REPO / "docs" / "results" / "reliability.md").read_text()


def test_every_probe_case_and_fuzz_test_appears_on_the_page() -> None:
    import json

    page = reliability_page.render()
    probe = json.loads((REPO / "docs" / "results" / "reliability_probe.json").read_text())
    fuzz = json.loads((REPO / "docs" / "results" / "reliability_fuzz.json").read_text())
    assert all(case["case"] in page for case in probe["cases"])
    assert all(f"`{name}`" in page for name in fuzz["tests"])


def _claims_on_the_h100():
    from rlscope.claims.verdict import evaluate, results_in
    from rlscope.harness.manifest import load_claims

    return evaluate(load_claims(REPO / "configs"), results_in(REPO / "docs" / "results" / "h100"))


@pytest.mark.parametrize(("name", "papers"), [("claims.md", ("datacollection", "rlscope")),
                                              ("datacollection.md", ("datacollection",))])
def test_the_claims_tables_are_generated_from_the_h100_results(name: str, papers: tuple[str, ...]) -> None:
    from rlscope.claims.render import as_markdown, into_page

    page = REPO / "docs" / "results" / name
    text = page.read_text()
    results = [r for r in _claims_on_the_h100() if r.claim.paper in papers]
    block = as_markdown(results, REPO / "docs" / "results" / "h100", page.parent)
    flags = " ".join(f"--paper {p}" for p in papers) if len(papers) == 1 else ""
    assert into_page(text, block, page) == text, f"run: rlscope claims docs/results/h100 {flags} --into {page}"


def test_every_difference_from_the_papers_has_a_measured_explanation() -> None:
    results = _claims_on_the_h100()
    unexplained = [f"{r.experiment}: {r.claim.id}" for r in results if r.unexplained]
    assert not unexplained, f"differences without an explain: entry: {unexplained}"
    unmeasured = [f"{r.experiment}: {r.claim.id}" for r in results if "(not measured" in r.reason]
    assert not unmeasured, f"explanations whose number is not in the results: {unmeasured}"
    unanswered = [f"{r.experiment}: {r.claim.id}" for r in results if "results have no column" in r.reason]
    assert not unanswered, f"claims naming a column their results lack (a typo?): {unanswered}"


def test_the_generated_tables_are_what_their_data_gives() -> None:
    assert results_tables.pages(), "no page marks a generated table"
    assert results_tables.main(["--check"]) == 0, "run: python bench/results_tables.py"


def test_a_corrected_run_shows_its_corrected_shares_beside_the_raw_ones(tmp_path, monkeypatch) -> None:
    import pandas as pd

    from rlscope.analyze.caveats import OVERCORRECTED

    def rows(algorithm: str, corrected: bool) -> list[dict]:
        base = {"algorithm": algorithm, "status": "ok", "table": "breakdown", "repetition": 0, "timesteps": 100,
                "training_s": 10.0, "steps_per_s": 10.0, "caveat": ""}
        parts = [("simulation", "Simulator", 6.0, 5.0), ("backpropagation", "CUDA API", 4.0, 0.0)]
        out = [{**base, "operation": op, "layer": layer, "seconds": s, "share": s / 10} for op, layer, s, _ in parts]
        if corrected:
            for row, (_, _, _, c) in zip(out, parts):
                row.update(corrected_training_s=5.0, corrected_seconds=c, corrected_low_seconds=c * 0.9 if c else 0.0,
                           corrected_high_seconds=c * 1.1 if c else 0.5)
            out[1]["caveat"] = OVERCORRECTED
        return out

    (tmp_path / "algorithm_choice").mkdir()
    pd.DataFrame(rows("ppo", True) + rows("sac", False)).to_csv(tmp_path / "algorithm_choice" / "results.csv")
    monkeypatch.setattr(tables_common, "H100", tmp_path)
    table = results_tables.algorithm_choice()
    lines = table.splitlines()
    assert lines[2].startswith("| PPO | as profiled | 10.0 | 10 | 0.0 | 60.0 | 40.0 |")
    # simulation: 5 s of 5 s corrected; at its low end (4.5 s) against the rest's high end (0.5 s): 90%
    assert lines[3].startswith("| PPO | corrected [low–high] | 5.0 | 20 | 0.0 [0.0–0.0] | 100.0 [90.0–100.0] |")
    assert lines[4].startswith("| SAC | as profiled |") and "SAC | corrected" not in table
    assert "As profiled only (no calibration on the machine that ran them): SAC." in table
    assert f"PPO (backpropagation CUDA API): {OVERCORRECTED}" in table


# Quantities in the prose of these pages outside generated blocks: each is a setting, a product's
# name, a hardware figure or the paper's value, not a measurement, and says so here. A measured
# number typed into the prose fails the test below: it belongs in a generated block
# (bench/findings_*.py), read from the data.
_SETTINGS_IN_PROSE = {
    "case-studies.md": {"H100** 80GB": "the GPU's model name",
                        "95% interval": "the confidence level",
                        "for 20 s after": "the scale-up manifest's duration_s"},
    "datacollection.md": {"H100 80GB": "the GPU's model name",
                          "hardware math at 10x that": "the simulator test's tolerance",
                          "132 SMs × 128 lanes × 1.98 GHz": "the H100's FP32 lanes and clock",
                          "132 × 4 warp-instructions per clock": "the H100's issue rate",
                          "the paper's 87%": "the paper's value",
                          "the paper's 1024x": "the paper's value",
                          "64×64": "a layer's shape",
                          "≥ 0.3 s of whole calls": "the bench's minimum round length",
                          "≥ 99.9% of environments": "a test's threshold",
                          "≥ 90% of environments": "a test's threshold"},
}
# A number with a unit of time, size, rate, share or ratio, or written in scientific notation.
_QUANTITY = re.compile(r"(?<![\w^.])\d[\d.,]*(?:e[+-]?\d+)?\s?(?:%|×|x\b|ms\b|µs\b|s\b|GB/s|GB\b|GiB\b|MB\b|GHz\b"
                       r"|minutes\b|points\b)|\b\d(?:\.\d+)?e\d+\b")
_GENERATED = re.compile(r"<!-- (?:table: [\w-]+|rlscope claims: begin.*?) -->.*?"
                        r"<!-- (?:/table|rlscope claims: end.*?) -->", re.S)


def _typed_quantities(text: str, allowed: dict[str, str]) -> list[str]:
    """Lines of ``text`` outside generated blocks that still quote a quantity once the allowed
    phrases are taken out of them."""
    typed = []
    for line in _GENERATED.sub("", text).splitlines():
        rest = line
        for phrase in allowed:
            rest = rest.replace(phrase, "")
        if _QUANTITY.search(rest):
            typed.append(line.strip())
    return typed


@pytest.mark.parametrize("name", sorted(_SETTINGS_IN_PROSE))
def test_measured_numbers_in_the_prose_come_from_the_data(name: str) -> None:
    typed = _typed_quantities((REPO / "docs" / "results" / name).read_text(), _SETTINGS_IN_PROSE[name])
    assert not typed, f"measured numbers typed by hand in {name} (generate them: bench/findings_*.py): {typed}"


@pytest.mark.parametrize("line", ["For SAC, 86.5% of training is backpropagation.", "it grows from 66% to 91%.",
                                  "the measured 2.14e10 is 65% of that", "took 431 s", "a 3.7e11 kernel",
                                  "1.22x over the floor", "1,471 GB/s written", "the H100 80GB took 12 ms"])
def test_the_prose_check_finds_a_typed_measurement(line: str) -> None:
    assert _typed_quantities(line, _SETTINGS_IN_PROSE["datacollection.md"]) == [line]


def test_the_findings_follow_their_data(tmp_path, monkeypatch) -> None:
    """A new scale-up run with another inflation changes the sentence that quotes it."""
    import shutil

    import findings_casestudies
    import pandas as pd

    before = findings_casestudies.scale_up_findings()
    shutil.copytree(REPO / "docs" / "results" / "h100" / "scale_up", tmp_path / "scale_up")
    data = pd.read_csv(tmp_path / "scale_up" / "results.csv")
    bound = (data["table"] == "gpu") & (data["measure"] == "GPU-bound (kernels+copies)")
    data.loc[bound, "percent"] = data.loc[bound, "percent"] * 2
    data.to_csv(tmp_path / "scale_up" / "results.csv", index=False)
    monkeypatch.setattr(tables_common, "H100", tmp_path)
    after = findings_casestudies.scale_up_findings()
    smi = data.loc[(data["table"] == "gpu") & (data["measure"] == "nvidia-smi utilization.gpu")].set_index("workers")
    ratio = smi["percent"] / data.loc[bound].set_index("workers")["percent"]
    assert before != after
    assert f"inflates GPU use {ratio.min():.1f}–{ratio.max():.1f}x" in after

"""Results pages hold only numbers their data gives: regenerating them changes nothing."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import reliability_page  # noqa: E402


def test_the_reliability_page_is_generated_from_its_data() -> None:
    assert reliability_page.render() == (REPO / "docs" / "results" / "reliability.md").read_text()


def test_every_probe_case_and_fuzz_test_appears_on_the_page() -> None:
    import json

    page = reliability_page.render()
    probe = json.loads((REPO / "docs" / "results" / "reliability_probe.json").read_text())
    fuzz = json.loads((REPO / "docs" / "results" / "reliability_fuzz.json").read_text())
    assert all(case["case"] in page for case in probe["cases"])
    assert all(f"`{name}`" in page for name in fuzz["tests"])

"""The layering in docs/architecture.md, as import-linter contracts (.importlinter): layers import
downward only, and no package's modules import each other in a circle."""

from __future__ import annotations

import grimp
import pytest
from importlinter.cli import lint_imports

from tests.conftest import REPO

CONFIG = str(REPO / ".importlinter")


def _lint(monkeypatch, capsys, *extra: tuple[str, str]) -> tuple[int, str]:
    """lint-imports on this checkout, with ``extra`` imports added to the graph it reads."""
    build = grimp.build_graph

    def with_extra(*args, **kwargs):
        graph = build(*args, **kwargs)
        for importer, imported in extra:
            graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="import")
        return graph

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(grimp, "build_graph", with_extra)
    code = lint_imports(config_filename=CONFIG, no_cache=True, no_logo=True)
    return code, capsys.readouterr().out


def test_every_import_goes_downward_and_none_in_a_circle(monkeypatch, capsys):
    code, out = _lint(monkeypatch, capsys)
    assert code == 0, out


@pytest.mark.parametrize(("importer", "imported", "broken"), [
    ("rlscope.collect.windows", "rlscope.api", "rlscope.collect is not allowed to import rlscope.api"),
    ("rlscope.trace.reader", "rlscope.analyze.gpu", "rlscope.trace is not allowed to import rlscope.analyze"),
    ("rlscope.collect.environment", "rlscope.collect.session", "no import cycles among the modules of a package"),
    ("experiments.datacollection.backends.base", "experiments.datacollection.backends.numpy_vec",
     "no import cycles among the modules of a package"),
])
def test_an_upward_or_circular_import_breaks_a_contract(monkeypatch, capsys, importer, imported, broken):
    code, out = _lint(monkeypatch, capsys, (importer, imported))
    assert code != 0 and broken in out and "BROKEN" in out

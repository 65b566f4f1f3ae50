"""Analysis computes, reports draw (DESIGN; STYLE #6, #12), checked on every import of
analysis/ and reports/ at any depth:

* analysis/ never imports reports/;
* of reports/, only reports/inputs.py (the seam that builds ReportInputs) calls analysis to
  compute; the others take its frames and import from analysis only constants, types and
  the Skipped marker (ALL_CAPS or CapWords names; ``rate_limits`` is a lookup of a
  metric's range);
* no module imports a private (leading underscore) name of another first-party module;
* an import inside a function defers a heavy optional dependency and says so in a comment
  (on its line or up to three lines above).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support.paths import ROOT

FIRST_PARTY = ("analysis", "reports", "trainer", "sweeps", "envs")
SEAM = "reports/inputs.py"
LOOKUPS = {"rate_limits"}
DEFERRED = {"matplotlib", "optuna", "sqlalchemy", "mlflow", "pandas", "torch", "ray"}


def _modules() -> list[Path]:
    return sorted(p for pkg in ("analysis", "reports") for p in (ROOT / pkg).rglob("*.py"))


def _imports(path: Path):
    """(node, module, names, nested) for every import of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            yield node, node.module, [a.name for a in node.names], id(node) in nested
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, [], id(node) in nested


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("path", _modules(), ids=_rel)
def test_layers_private_names_and_deferred_imports(path):
    rel, lines = _rel(path), path.read_text(encoding="utf-8").splitlines()
    for node, module, names, nested in _imports(path):
        top = module.split(".")[0]
        where = f"{rel}:{node.lineno}"
        if rel.startswith("analysis/"):
            assert top != "reports", f"{where}: analysis imports {module}"
        if rel.startswith("reports/") and rel != SEAM and top == "analysis":
            computing = [n for n in names if not (n.isupper() or n[:1].isupper() or n in LOOKUPS)]
            assert not computing and names, (
                f"{where}: {rel} imports {computing or module} from analysis; compute in {SEAM}")
        if top in FIRST_PARTY:
            private = [n for n in names if n.startswith("_")]
            assert not private, f"{where}: imports private {private} from {module}"
        if nested:
            assert top in DEFERRED, f"{where}: {module} imported inside a function"
            near = lines[max(0, node.lineno - 4):node.lineno]  # the import and 3 lines above
            assert any("#" in line for line in near), (
                f"{where}: a deferred import says why in a comment")


def test_the_check_fails_on_a_report_that_computes(tmp_path, monkeypatch):
    planted = tmp_path / "reports" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("from analysis.stats import per_cell\nfrom reports.style import _RANK\n"
                       "def f():\n    import numpy\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="compute in reports/inputs.py"):
        test_layers_private_names_and_deferred_imports(planted)
    planted.write_text("from reports.style import _RANK\n")
    with pytest.raises(AssertionError, match="imports private"):
        test_layers_private_names_and_deferred_imports(planted)
    planted.write_text("def f():\n    import numpy\n")
    with pytest.raises(AssertionError, match="inside a function"):
        test_layers_private_names_and_deferred_imports(planted)

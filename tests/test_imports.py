"""The import graph tells the truth (STYLE.md #12, DESIGN.md's layers): read from every
first-party import at any depth and every string given to ``importlib``, it has no circle,
no layer imports one above it, no first-party module is imported by name, an import inside
a function only defers a heavy dependency and says so, no private name crosses a module, and
no module runs over 500 lines.  The checker is shown to fail on a planted circle."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("envs", "trainer", "analysis", "reports", "sweeps")
# What a layer must not import (first-party packages or third-party modules).
FORBIDDEN = {
    "envs": ("trainer", "analysis", "reports", "sweeps", "torch", "transformers", "mlflow", "ray"),
    "trainer": ("analysis", "reports", "sweeps"),
    "trainer.config": ("trainer", "envs", "analysis", "reports", "sweeps", "torch", "transformers"),
    "trainer.algos": ("trainer.models", "trainer.episodes", "trainer.hindsight", "trainer.stages", "trainer.run",
                      "trainer.protocols", "envs", "mlflow"),
    "analysis": ("reports", "sweeps", "trainer"),
    # reports read each method's label and order from the registry (trainer.algos), nothing else
    "reports": ("sweeps", "mlflow", "trainer.models", "trainer.episodes", "trainer.hindsight", "trainer.stages",
                "trainer.run", "trainer.protocols", "envs"),
}
# Third-party modules heavy enough to defer (importing them costs seconds, or they are optional).
HEAVY = ("torch", "transformers", "vllm", "ray", "mlflow", "optuna", "pandas", "matplotlib", "scipy", "PIL")
MAX_LINES = 500


@dataclass
class Module:
    name: str
    path: Path
    lines: int
    top: set[str] = field(default_factory=set)  # modules imported at module level
    deferred: list[tuple[str, int, str]] = field(default_factory=list)  # (module, line, source line)
    by_name: list[tuple[str, int]] = field(default_factory=list)  # importlib.import_module("x")
    private: list[tuple[str, str, int]] = field(default_factory=list)  # (module, _name, line)


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.AST, package: str) -> list[tuple[str, list[str]]]:
    """(module, names) an import statement reads; relative imports resolved from ``package``."""
    if isinstance(node, ast.Import):
        return [(a.name, []) for a in node.names]
    base = node.module or ""
    if node.level:
        parent = package.split(".")
        parent = parent[:len(parent) - node.level + 1]
        base = ".".join([*parent, base] if base else parent)
    return [(base, [a.name for a in node.names])]


def scan(root: Path, packages=PACKAGES) -> dict[str, Module]:
    """Every module of ``packages`` under ``root`` and what it imports, at any depth."""
    modules: dict[str, Module] = {}
    files = [p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))]
    names = {module_name(root, p) for p in files}
    for path in files:
        name = module_name(root, path)
        text = path.read_text()
        source = text.splitlines()
        module = Module(name, path, len(source))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(text)
        top_level = {id(n) for n in tree.body}
        # guarded blocks at module level (if TYPE_CHECKING, try/except) are still module level
        for node in tree.body:
            if isinstance(node, (ast.If, ast.Try)):
                top_level |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target, imported in _targets(node, package):
                    resolved = [f"{target}.{n}" if f"{target}.{n}" in names else target for n in imported] or [target]
                    for mod in resolved:
                        if id(node) in top_level:
                            module.top.add(mod)
                        else:
                            module.deferred.append((mod, node.lineno, source[node.lineno - 1]))
                    for n in imported:
                        if n.startswith("_") and not n.startswith("__") and target.split(".")[0] in packages:
                            module.private.append((target, n, node.lineno))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "import_module" and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                module.by_name.append((node.args[0].value, node.lineno))
        modules[name] = module
    return modules


def first_party(name: str, packages=PACKAGES) -> bool:
    return name.split(".")[0] in packages


def graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    """First-party module -> the first-party modules it imports, at any depth (an import of a
    package's submodule counts as one of the submodule, not of the package)."""
    out = {}
    for name, m in modules.items():
        deps = m.top | {d for d, _, _ in m.deferred} | {d for d, _ in m.by_name}
        out[name] = {d for d in deps if d in modules and d != name}
    return out


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A circle of the graph as a path ``[a, b, ..., a]``, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for start in sorted(edges):
        if state.get(start):
            continue
        stack, path = [(start, iter(sorted(edges[start])))], [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(sorted(edges.get(child, ())))))
                path.append(child)
    return None


def heavy_modules(modules: dict[str, Module]) -> set[str]:
    """First-party modules that import a heavy third-party module at module level, directly or
    through other first-party modules."""
    heavy = {n for n, m in modules.items() if any(d.split(".")[0] in HEAVY for d in m.top)}
    changed = True
    while changed:
        changed = False
        for name, m in modules.items():
            if name not in heavy and any(d in heavy for d in m.top if d in modules):
                heavy.add(name)
                changed = True
    return heavy


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return scan(ROOT)


def test_the_import_graph_has_no_circle(modules):
    assert find_cycle(graph(modules)) is None, " -> ".join(find_cycle(graph(modules)))


def test_the_checker_finds_a_planted_circle(tmp_path):
    """A package whose modules import each other, one of them from inside a function."""
    pkg = tmp_path / "trainer"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from trainer.inner import b\n")
    (pkg / "inner" / "b.py").write_text("import json\n\n\ndef f():\n    from trainer.c import g\n")
    (pkg / "c.py").write_text("from . import a\n\n\ndef g():\n    pass\n")
    planted = scan(tmp_path, ("trainer",))
    assert find_cycle(graph(planted)) == ["trainer.a", "trainer.inner.b", "trainer.c", "trainer.a"]
    (pkg / "c.py").write_text("def g():\n    pass\n")
    assert find_cycle(graph(scan(tmp_path, ("trainer",)))) is None


def test_no_layer_imports_one_above_it(modules):
    bad = []
    for name, m in modules.items():
        rules = [(layer, banned) for layer, banned in FORBIDDEN.items()
                 if name == layer or name.startswith(layer + ".")]
        deps = m.top | {d for d, _, _ in m.deferred}
        for layer, banned in rules:
            for dep in deps:
                if any(dep == b or dep.startswith(b + ".") for b in banned) and not dep.startswith(layer + "."):
                    bad.append(f"{name} imports {dep} ({layer} must not)")
    assert not bad, "\n".join(sorted(set(bad)))


def test_no_first_party_module_is_imported_by_name(modules):
    bad = [f"{m.path.relative_to(ROOT)}:{line}: import_module({target!r})"
           for m in modules.values() for target, line in m.by_name if first_party(target)]
    assert not bad, "\n".join(bad)


def test_an_import_inside_a_function_defers_a_heavy_dependency_and_says_so(modules):
    heavy = heavy_modules(modules)
    bad = []
    for m in modules.values():
        for dep, line, _text in m.deferred:
            if not first_party(dep):
                continue
            where = f"{m.path.relative_to(ROOT)}:{line}"
            if dep not in heavy:
                bad.append(f"{where}: {dep} imports nothing heavy; import it at the top")
            elif not _says_why(m, line):
                bad.append(f"{where}: a deferred import of {dep} without a comment saying why")
    assert not bad, "\n".join(bad)


def _says_why(m: Module, line: int) -> bool:
    """Whether the import at ``line`` or one of the imports right above it (a block of deferred
    imports) carries a comment, or a comment line stands right above the block."""
    source = m.path.read_text().splitlines()
    i = line - 1
    while i >= 0:
        text = source[i].strip()
        if "#" in text:
            return True
        if not text.startswith(("from ", "import ", ")")) and not text.endswith((",", "(")):
            return False
        i -= 1
    return False


def test_no_private_name_is_imported_across_modules(modules):
    bad = [f"{m.path.relative_to(ROOT)}:{line}: from {target} import {name}"
           for m in modules.values() for target, name, line in m.private]
    assert not bad, "\n".join(bad)


def test_no_module_runs_over_500_lines(modules):
    long = sorted(f"{m.path.relative_to(ROOT)}: {m.lines}" for m in modules.values() if m.lines > MAX_LINES)
    assert not long, "\n".join(long)


if __name__ == "__main__":  # the graph's figures for a closing note: python tests/test_imports.py
    found = scan(ROOT)
    edges = graph(found)
    print(f"{len(found)} modules, {sum(map(len, edges.values()))} first-party imports; circle: {find_cycle(edges)}")
    for m in sorted(found.values(), key=lambda m: -m.lines)[:8]:
        print(f"  {m.lines:4d}  {m.path.relative_to(ROOT)}")
    sys.exit(0)

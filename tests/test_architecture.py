"""The package's import contract and shape, held by tests (docs/architecture.md lists which test holds which
rule): nothing outside ``cli/`` imports ``greval.cli``; no ``_private`` module or name is imported across
packages (``greval/_sync.py`` and ``greval/_lazy.py`` are the shared private modules); the run, agreement and
report stages stay readable (no function over 80 lines, none of radon's rank E or F)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "greval"
MAX_LINES = 80
#: Private modules that are greval's own shared plumbing, not a package's internals.
SHARED_PRIVATE = {"_sync", "_lazy"}  # the loop the sync wrappers share; the one lazy-face helper


def greval_imports() -> Iterator[tuple[str, str, int, str, list[str]]]:
    """(file, its top-level package, line, imported module, imported names) of every absolute greval import."""
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        here = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("greval"):
                yield str(rel), here, node.lineno, node.module or "", [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("greval"):
                        yield str(rel), here, node.lineno, alias.name, []


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_scan_sees_greval_s_imports() -> None:
    assert sum(1 for _ in greval_imports()) > 300  # the rules below are checked on real imports, not on none


def test_nothing_outside_cli_imports_greval_cli() -> None:
    outside = [
        f"{rel}:{line} {module}"
        for rel, here, line, module, _ in greval_imports()
        if package_of(module) == "cli" and here not in ("cli", "__main__")
    ]
    assert not outside, outside


def test_no_private_module_or_name_is_imported_across_packages() -> None:
    crossing = []
    for rel, here, line, module, names in greval_imports():
        target = package_of(module)
        if not target or target == here:
            continue
        private = [p for p in module.split(".")[1:] if p.startswith("_") and p not in SHARED_PRIVATE]
        private += [n for n in names if n.startswith("_") and not n.startswith("__")]
        if private:
            crossing.append(f"{rel}:{line} {module} {private}")
    assert not crossing, crossing


def test_no_relative_import_leaves_its_package() -> None:
    upward = [
        f"{path.relative_to(PKG)}:{node.lineno}"
        for path in sorted(PKG.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.level > 1
    ]
    assert not upward, upward


@pytest.mark.parametrize("package", ["runner", "agreement", "report"])
def test_no_function_of_a_stage_is_over_80_lines(package: str) -> None:
    """A new section, panel or mode is a new function (prepare() was 298 lines, the store report's renderer 84)."""
    root = PKG / package
    long = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


@pytest.mark.parametrize("package", ["runner", "agreement", "report"])
def test_no_function_of_a_stage_is_ranked_e_or_f(package: str) -> None:
    """radon's cyclomatic complexity above 30 (radon is in the dev extra: skipped, with the reason, without it)."""
    complexity = pytest.importorskip("radon.complexity", reason="radon is in the dev extra")
    root = PKG / package
    worst = [
        f"{path.relative_to(root)}:{block.lineno} {block.name} ({block.complexity})"
        for path in sorted(root.rglob("*.py"))
        for block in complexity.cc_visit(path.read_text(encoding="utf-8"))
        if complexity.cc_rank(block.complexity) in ("E", "F")
    ]
    assert not worst, worst

"""The package's import contract and shape, held by tests (docs/architecture.md lists which test holds which
rule): nothing outside ``cli/`` imports ``greval.cli``; no ``_private`` module or name is imported across
packages (``greval/_sync.py`` and ``greval/_lazy.py`` are the shared private modules); every package but
``testing/`` (cli/ included) stays readable: no function over 80 lines, none of radon's rank E or F. The shape
tests print what they hold and the worst functions (``pytest tests/test_architecture.py -rP`` shows it), and a
failure lists every function over the bound, worst first."""

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


#: Where the shape rules do not reach: the test helpers (servers and fixtures written for tests, not users). The
#: click commands are held too, now that their options travel in bundles.
SHAPE_EXEMPT = ("testing",)
#: radon's rank E starts above this cyclomatic complexity.
MAX_COMPLEXITY = 30


def shaped_files() -> list[Path]:
    """Every module the shape rules hold: all of greval/ but the exempt packages (top-level modules included)."""
    return [p for p in sorted(PKG.rglob("*.py")) if p.relative_to(PKG).parts[0] not in SHAPE_EXEMPT]


def function_lengths() -> list[tuple[int, str]]:
    """(lines, "path:line Class.name") of every function and method, nested ones included, longest first."""
    out: list[tuple[int, str]] = []

    def visit(node: ast.AST, where: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                out.append((lines, f"{where}:{child.lineno} {prefix}{child.name}"))
                name = f"{prefix}{child.name}."
            elif isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}."
            visit(child, where, name)

    for path in shaped_files():
        visit(ast.parse(path.read_text(encoding="utf-8")), str(path.relative_to(PKG)), "")
    return sorted(out, key=lambda t: (-t[0], t[1]))


def complexities() -> list[tuple[int, str]]:
    """(cyclomatic complexity, "path:line name") of every function and method as radon ranks them (a closure
    counts in its function), most complex first."""
    complexity = pytest.importorskip("radon.complexity", reason="radon is in the dev extra")
    out = []
    for path in shaped_files():
        for block in complexity.cc_visit(path.read_text(encoding="utf-8")):
            if not hasattr(block, "methods"):  # a class's figure is its methods' mean; they count one by one
                out.append((block.complexity, f"{path.relative_to(PKG)}:{block.lineno} {block.fullname}"))
    return sorted(out, key=lambda t: (-t[0], t[1]))


def test_the_shape_rules_see_greval_s_functions() -> None:
    # The rules below are checked on real code, not on none: stages of every kind, methods and closures.
    names = {where.split()[-1] for _, where in function_lengths()}
    assert {"judge_plan", "compute_agreement", "Store.put_result", "_lifespan.lifespan"} <= names
    assert not any(p.relative_to(PKG).parts[0] in SHAPE_EXEMPT for p in shaped_files())
    assert len(shaped_files()) > 150


def test_no_function_is_over_80_lines() -> None:
    """A new section, panel or mode is a new function (prepare() was 298 lines, the store report's renderer 84,
    serve's create_app 171)."""
    lengths = function_lengths()
    long = [f"{where} ({n} lines)" for n, where in lengths if n > MAX_LINES]
    print(f"functions over {MAX_LINES} lines outside {', '.join(SHAPE_EXEMPT)}: {len(long)} (the rule: 0)")
    print("longest:", "; ".join(f"{where} ({n} lines)" for n, where in lengths[:5]))
    assert not long, f"{len(long)} function(s) over {MAX_LINES} lines, longest first: " + "; ".join(long)


def test_no_function_is_ranked_e_or_f() -> None:
    """radon's cyclomatic complexity above 30 (radon is in the dev extra: skipped, with the reason, without it)."""
    ranked = complexities()
    worst = [f"{where} ({cc})" for cc, where in ranked if cc > MAX_COMPLEXITY]
    print(f"functions ranked E or F (complexity > {MAX_COMPLEXITY}) outside {', '.join(SHAPE_EXEMPT)}: {len(worst)}")
    print("most complex:", "; ".join(f"{where} ({cc})" for cc, where in ranked[:5]))
    assert not worst, f"{len(worst)} function(s) ranked E or F, most complex first: " + "; ".join(worst)

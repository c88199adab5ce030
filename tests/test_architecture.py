"""The package's import contract and shape, held by tests (docs/architecture.md lists which test holds which
rule): nothing outside ``cli/`` imports ``greval.cli``; no ``_private`` module or name is imported across
packages (``greval/_sync.py`` and ``greval/_lazy.py`` are the shared private modules); every package but
``testing/`` (cli/ included) stays readable: no function over 80 lines, none of radon's rank E or F. The shape
tests print what they hold and the worst functions (``pytest tests/test_architecture.py -rP`` shows it), and a
failure lists every function over the bound, worst first. No two files import each other, even through others, at
module level (an import circle is cut by moving the shared piece down, not hidden in a function), and imports
inside functions outside ``cli/`` and ``testing/`` stay few: the ones start-up needs (heavy libraries a command
that does not use them would load) and the optional extras."""

from __future__ import annotations

import ast
import sys
from collections import Counter
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


#: Where imports inside functions are not counted: the click commands (the lazy command table loads a command's
#: stage when it runs) and the test helpers.
LAZY_EXEMPT = ("cli", "testing")
#: Imports inside functions outside cli/ and testing/ at most (issue 41's goal is 100; 238 before the circles were cut;
#: 110 before the explorer's and the align generators' circles, closed by imports inside functions, were cut and
#: psycopg got a module of its own). What is left: the heavy libraries (pandas, matplotlib, LangChain, openai, pyarrow,
#: Ray, Phoenix's client, sentence-transformers, IPython) and greval's own modules that load them at the top (llm.call,
#: agreement.from_store, store.postgres, report.explorer.prompts) where a command that does not need them would
#: otherwise load them; the pytest plugin, which loads nothing of greval's until a test asks; runner/driver.py's
#: judging stack (loaded only when a plan has work); the watch's review routing, which loads Argilla's client only
#: when a window is routed.
MAX_IMPORTS_IN_FUNCTIONS = 93


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def imports_of(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import, inside a function?) of a module, leaving out what ``if TYPE_CHECKING:`` guards (never run)."""

    def visit(node: ast.AST, inside: bool) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for stmt in getattr(child, "orelse", []):
                    yield from visit(ast.Module(body=[stmt], type_ignores=[]), inside)
            elif isinstance(child, ast.Import | ast.ImportFrom):
                yield child, inside
            else:
                yield from visit(
                    child, inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
                )

    yield from visit(tree, False)


def imported_modules(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The greval files an import names: ``from a import b`` names ``a.b`` when b is a module, else ``a``."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in MODULES]
    base = node.module or ""
    if node.level:
        here = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
    named = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    return sorted({m for m in named if m in MODULES})


def kind_of(node: ast.Import | ast.ImportFrom) -> str:
    if isinstance(node, ast.ImportFrom) and node.level:
        return "greval"
    top = (node.names[0].name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
    return "greval" if top == "greval" else "stdlib" if top in sys.stdlib_module_names else "third-party"


def module_graph() -> dict[str, set[str]]:
    """Module → the greval modules it imports when it is imported (module level, TYPE_CHECKING left out)."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        graph[module] = set()
        for node, inside in imports_of(ast.parse(path.read_text(encoding="utf-8"))):
            if not inside:
                graph[module].update(m for m in imported_modules(module, node) if m != module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def imports_in_functions() -> list[tuple[str, str, str]]:
    """(kind, package, "path:line import") of every import inside a function outside cli/ and testing/."""
    out = []
    for path in MODULES.values():
        rel = path.relative_to(PKG)
        if rel.parts[0] in LAZY_EXEMPT:
            continue
        for node, inside in imports_of(ast.parse(path.read_text(encoding="utf-8"))):
            if inside:
                package = rel.parts[0] if len(rel.parts) > 1 else rel.stem
                out.append((kind_of(node), package, f"{rel}:{node.lineno} {ast.unparse(node)}"))
    return out


def test_the_import_scans_see_greval_s_imports() -> None:
    graph = module_graph()
    assert sum(len(v) for v in graph.values()) > 500  # module-level edges, checked on real imports
    assert "greval.store.results" in graph["greval.report.stats"]
    found = imports_in_functions()
    assert any("pandas" in where for _, _, where in found)  # a lazy import the rules count
    # the scan finds a circle when there is one, and leaves out what TYPE_CHECKING guards
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    guarded = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\ndef f():\n    import y\n")
    assert [(ast.unparse(n), inside) for n, inside in imports_of(guarded)] == [
        ("from typing import TYPE_CHECKING", False),
        ("import y", True),
    ]


def test_no_import_circle_between_files() -> None:
    """Module-level imports (``if TYPE_CHECKING:`` left out) form no circle: two modules that need each other
    share a piece that belongs in a module below both (as ``traces/phoenix_address.py`` below the trace source and
    the annotations written back)."""
    graph = module_graph()
    found = circles(graph)
    print(
        f"module-level import edges between greval files: {sum(len(v) for v in graph.values())}; circles: {len(found)}"
    )
    assert not found, found


def test_imports_inside_functions_are_few() -> None:
    """An import inside a function is for start-up (a heavy library, or greval's module that loads one, kept off
    the commands that do not use it) or an optional extra, never to close an import circle."""
    found = imports_in_functions()
    kinds = Counter(kind for kind, _, _ in found)
    packages = Counter(package for _, package, _ in found)
    print(f"imports inside functions outside {', '.join(LAZY_EXEMPT)}: {len(found)} (bound {MAX_IMPORTS_IN_FUNCTIONS})")
    print("by kind:", ", ".join(f"{k} {n}" for k, n in kinds.most_common()))
    print("by package:", ", ".join(f"{k} {n}" for k, n in packages.most_common()))
    assert len(found) <= MAX_IMPORTS_IN_FUNCTIONS, "\n".join(where for _, _, where in found)
    assert kinds["stdlib"] <= 9, [where for kind, _, where in found if kind == "stdlib"]

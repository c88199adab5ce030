"""The agreement stage stays readable: no function over 80 lines, none ranked E or F by radon (cyclomatic
complexity above 30; radon is in the dev extra, so that half is skipped without it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

AGREEMENT = Path(__file__).resolve().parents[2] / "greval" / "agreement"
MAX_LINES = 80


def test_no_function_in_agreement_is_longer_than_80_lines() -> None:
    long = []
    for path in sorted(AGREEMENT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_LINES:
                    long.append(f"{path.relative_to(AGREEMENT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_no_function_in_agreement_is_ranked_e_or_f() -> None:
    complexity = pytest.importorskip("radon.complexity", reason="radon is in the dev extra")
    worst = []
    for path in sorted(AGREEMENT.rglob("*.py")):
        for block in complexity.cc_visit(path.read_text(encoding="utf-8")):
            if complexity.cc_rank(block.complexity) in ("E", "F"):
                worst.append(f"{path.relative_to(AGREEMENT)}:{block.lineno} {block.name} ({block.complexity})")
    assert not worst, worst

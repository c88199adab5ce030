"""The agreement stage's messages name option fields (`AgreementOptions.pos_label`, `pair_by` …), never
command-line flags; the CLI shows them as the flags a terminal user types, through cli/flags.py's one table."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement, compute_consistency
from greval.agreement.stopping import Target
from greval.agreement.tables import CONTRACT
from greval.cli import main
from greval.cli.flags import FLAGS
from greval.errors import DataError, UserError
from greval.gate.checks import evaluate

AGREEMENT = Path(__file__).resolve().parents[2] / "greval" / "agreement"

#: None any more: a report's notes name option fields too, and what the CLI prints and writes renders them as
#: flags (greval.report.format.with_names, the renderers' ``names``); the report's JSON keeps the fields.
NOTES_THAT_NAME_FLAGS: set[tuple[str, str]] = set()


def test_a_note_names_its_field_and_the_cli_prints_its_flag(tmp_path: Path) -> None:
    """The consistency note on items whose two answers are both invalid: `AgreementOptions.invalid_pairs` in the
    report (and its JSON, what a Python caller reads), --invalid-pairs on the terminal and in the Markdown."""
    runs = pd.DataFrame({"item": ["a", "a", "b", "b"], "run": ["x", "y", "x", "y"], "judge": ["", "", "1", "1"]})
    rep = compute_consistency(runs, AgreementScale(labels=["1", "2"]))
    assert any("(`AgreementOptions.invalid_pairs`)" in n for n in rep.notes)
    f, out, md = tmp_path / "runs.csv", tmp_path / "c.json", tmp_path / "c.md"
    runs.to_csv(f, index=False)
    args = ["agreement", str(f), "--judge", "judge", "--item", "item", "--pair-by", "run", "--labels", "1,2"]
    res = CliRunner().invoke(main, [*args, "--json", str(out), "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    assert "(--invalid-pairs)" in res.output and "(--invalid-pairs)" in md.read_text()
    assert "(`AgreementOptions.invalid_pairs`)" in out.read_text()


def test_python_callers_read_fields_and_the_terminal_reads_flags(tmp_path: Path) -> None:
    runs = pd.DataFrame({"item": ["a", "a"], "run": ["x", "y"], "judge": ["1", "2"]})
    with pytest.raises(DataError) as raised:
        compute_consistency(runs, AgreementScale(kind="value"))
    assert str(raised.value) == (
        "`pair_by` compares categorical answers (consistency, κ); use `AgreementScale.kind` categorical"
    )
    scores = pd.DataFrame({"item": ["a"], "human": ["yes"], "score": [0.5]})
    with pytest.raises(DataError, match=r"^`score` needs `AgreementOptions.pos_label`: which label"):
        compute_agreement(scores, AgreementScale(labels=["no", "yes"]), AgreementOptions(bootstrap=0))
    f = tmp_path / "runs.csv"
    runs.to_csv(f, index=False)
    res = CliRunner().invoke(main, ["agreement", str(f), "--judge", "judge", "--item", "item", "--pair-by", "run"])
    res2 = CliRunner().invoke(
        main, ["agreement", str(f), "--judge", "judge", "--item", "item", "--pair-by", "run", "--kind", "value"]
    )
    assert res.exit_code == 0, res.output
    assert res2.exit_code == 2 and res2.output == (
        "error: --pair-by compares categorical answers (consistency, κ); use --kind categorical\n"
    )


def test_gate_and_target_reasons_name_fields_and_print_flags() -> None:
    report = compute_agreement(
        pd.DataFrame({"item": ["a", "b"], "judge": ["x", "y"], "human": ["x", "x"]}),
        AgreementScale(labels=["x", "y"]),
        AgreementOptions(bootstrap=0),
    )
    result = evaluate(report, [], vs_ceiling=0.9)
    assert result.reasons == ["no human ceiling (needs items labelled by 2 or more people) for `vs_ceiling`"]
    with pytest.raises(UserError, match=r"^`target` 'kappa=0.05': write FIGURE±WIDTH"):
        Target.parse("kappa=0.05")


def _option_names() -> set[str]:
    """Every literal name passed to greval.errors.option in agreement/."""
    names: set[str] = set()
    for path in AGREEMENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "option":
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
    return names


def test_every_field_agreement_names_has_its_flag() -> None:
    names = _option_names() | set(CONTRACT)  # tables.py names a contract column by its field: option(col)
    assert len(names) >= 15, names
    missing = sorted(n for n in names if n not in FLAGS and n.rpartition(".")[2] not in FLAGS)
    assert not missing, f"fields named in agreement/ messages without a flag in cli/flags.py: {missing}"


def test_no_message_in_agreement_names_a_flag() -> None:
    flag = re.compile(r"(?<![\w-])--[a-z][a-z-]+")
    found = set()
    for path in AGREEMENT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and flag.search(node.value):
                rel = str(path.relative_to(AGREEMENT))
                if not any(rel == f and text in node.value for f, text in NOTES_THAT_NAME_FLAGS):
                    found.add((rel, node.value.strip()[:80]))
    assert not found, f"strings in agreement/ that name command-line flags: {sorted(found)}"

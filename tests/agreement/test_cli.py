"""`greval agreement` (cli/agreement.py): tables and JSON, user mistakes in one line, a light start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.cli.agreement import agreement
from tests.agreement.conftest import DATA, ROOT, UNIEVAL_README


def test_cli_prints_tables_and_writes_json(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    pd.DataFrame({"id": range(8), "j": list("aabbabab"), "h": list("aabbbbaa"), "lang": list("xxxxyyyy")}).to_csv(
        f, index=False
    )
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        agreement,
        [
            str(f),
            "--judge",
            "j",
            "--human",
            "h",
            "--item",
            "id",
            "--slice",
            "lang",
            "--labels",
            "a,b",
            "--bootstrap",
            "50",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "cohen_kappa" in res.output and "confusion" in res.output and "by lang" in res.output
    data = json.loads(out.read_text())
    assert data["metrics"]["accuracy"]["value"] == 0.75 and data["metrics"]["accuracy"]["n"] == 8


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--judge", "nope", "--human", "h"], "no column 'nope'"),
        (["--judge", "j", "--human", "h", "--labels", "a,c"], "unknown human answer"),
        (["--judge", "j", "--human", "h", "--invalid", "sometimes"], "invalid"),
        (["--judge", "j", "--human", "h", "--relabel", "oops"], "--relabel 'oops': expected FROM=TO"),
        # --map means FIELD=COLUMN in every other command: here it is refused, pointing to --relabel
        (["--judge", "j", "--human", "h", "--map", "a=b"], "relabels answers with --relabel FROM=TO"),
    ],
)
def test_cli_user_mistakes_exit_2_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    f = tmp_path / "d.csv"
    pd.DataFrame({"j": list("aabb"), "h": list("abab")}).to_csv(f, index=False)
    res = CliRunner().invoke(agreement, [str(f), *args, "--bootstrap", "0"])
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_cli_relabel_maps_raw_answers_on_both_sides(tmp_path: Path) -> None:
    """--relabel FROM=TO (what agreement's --map was) rewrites answers on both sides before they are compared."""
    f = tmp_path / "d.csv"
    pd.DataFrame({"j": ["x", "x", "b", "b"], "h": ["a", "x", "b", "b"]}).to_csv(f, index=False)
    out = tmp_path / "r.json"
    args = [str(f), "--judge", "j", "--human", "h", "--relabel", "x=a", "--bootstrap", "0", "--json", str(out)]
    res = CliRunner().invoke(agreement, args)
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    assert report["options"]["mapping"] == {"x": "a"} and report["metrics"]["accuracy"]["value"] == 1.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--score", "s", "--human", "h"], "--pos-label"),
        (["--score", "s", "--human", "h", "--pos-label", "b", "--threshold", "1", "--judge", "j"], "not both"),
        (["--judge", "j", "--human", "h", "--pos-label", "zz"], "not a label"),
        (["--score", "s", "--human", "h", "--pos-label", "b", "--choose-threshold", "youden"], "select_on"),
        (
            ["--score", "s", "--human", "h", "--pos-label", "b", "--choose-threshold", "youden", "--select-on", "j=q"],
            "no row",
        ),
        (["--judge", "j", "--pair-by", "j", "--human", "h"], "drop --human"),
    ],
)
def test_new_flags_user_mistakes_exit_2_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    f = tmp_path / "d.csv"
    pd.DataFrame({"j": list("abab"), "h": list("abba"), "s": [0.1, 0.9, 0.8, 0.2]}).to_csv(f, index=False)
    res = CliRunner().invoke(agreement, [str(f), *args, "--bootstrap", "0"])
    assert res.exit_code == 2, res.output
    assert message in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


@pytest.mark.skipif(not UNIEVAL_README.exists(), reason=f"UniEval data not found at {DATA} (needs ../shared/data)")
def test_unieval_cli_worked_example(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        agreement,
        [
            str(DATA / "unieval" / "qags_cnndm_result.json.gz"),
            "--judge",
            "predict_scores.consistency",
            "--human",
            "scores.consistency",
            "--kind",
            "value",
            "--bootstrap",
            "0",
            "--decimals",
            "6",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "0.681681" in res.output and "0.662255" in res.output and "0.531636" in res.output


def test_greval_agreement_does_not_import_the_judge_stack(tmp_path: Path) -> None:
    path = tmp_path / "labels.csv"
    path.write_text("id,j,h\na,1,1\nb,2,2\nc,1,2\nd,2,2\ne,1,1\n")
    code = (
        "import sys\n"
        "from greval.cli import main\n"
        "try:\n"
        f"    main(['agreement', {str(path)!r}, '--judge', 'j', '--human', 'h', '--item', 'id', '--bootstrap', '20'])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "stack = ('langchain', 'langchain_core', 'langchain_openai', 'openai')\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in stack)\n"
        "print('HEAVY', heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "accuracy" in res.stdout
    assert "HEAVY []" in res.stdout, res.stdout[-500:]


def test_every_command_is_still_listed() -> None:
    out = CliRunner().invoke(main, ["--help"]).output
    for name in ("agreement", "annotate", "quickstart", "report", "run", "spec"):
        assert name in out
    spec = CliRunner().invoke(main, ["spec", "--help"]).output
    assert "new" in spec and "try" in spec  # listed in the spec group's command table

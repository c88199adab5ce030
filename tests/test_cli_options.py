"""A required ``--store`` left out is named by Click: Click ≥ 8.3 treats an explicit ``default=None`` as a value, so
the option declared with it was silently None (a TypeError traceback further down)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.cli import main


@pytest.mark.parametrize(
    "args",
    [
        ["annotate", "import-labels", "{f}", "--spec", "answer_alignment", "--record-id", "record_id", "--label", "l"],
        ["gate", "--spec", "answer_alignment"],
    ],
    ids=["import-labels", "gate"],
)
def test_a_store_left_out_is_named(args: list[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GREVAL_STORE", raising=False)
    f = tmp_path / "l.csv"
    f.write_text("record_id,l\nr1,yes\n")
    res = CliRunner().invoke(main, [a.replace("{f}", str(f)) for a in args])
    assert isinstance(res.exception, SystemExit) and res.exit_code == 2, res.output
    assert "Missing option '--store'" in res.output


def test_align_into_a_missing_folder_fails_before_any_call(llm: Any, tmp_path: Any) -> None:
    """Issue 40: `greval align --out missing/x.yaml` searched (every call paid) and then crashed writing the
    file. The folder is checked with the options: one line, exit 2, no model call."""
    from tests.align import scripted as sc

    llm.script(sc.rules(40))
    store = tmp_path / "s.sqlite"
    sc.labelled_store(store, llm.base_url, 40)
    before = llm.stats()["total"]
    judge = ["--judge", "openai:scripted-judge", "--base-url", llm.base_url]
    for flag, name in (("--out", "x.aligned.yaml"), ("--html", "x.align.html")):
        missing = tmp_path / "missing" / name
        res = CliRunner().invoke(
            main, ["align", "--store", str(store), "--spec", "supported", *judge, flag, str(missing)]
        )
        assert res.exit_code == 2, res.output
        assert res.output.strip().splitlines() == [
            f"error: {flag} {missing}: the folder {missing.parent} does not exist; create it, or write elsewhere"
        ]
    assert llm.stats()["total"] == before


def _help(*args: str, columns: int = 80) -> str:
    """`greval ARGS --help` as a terminal of `columns` columns shows it (a fresh process: the width is read
    where the help is formatted)."""
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "greval", *args, "--help"], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_greval_help_fits_80_columns() -> None:
    """Issue 40: the description was kept from rewrapping (a 102-character line in an 80-column terminal)."""
    text = _help()
    assert [line for line in text.splitlines() if len(line) > 80] == []
    prose = " ".join(text.split())
    assert "review the verdicts in Argilla, and measure how well the judge agrees with people." in prose
    for name in ("agreement", "align", "annotate", "gate", "run", "store"):
        assert f"\n  {name} " in text  # every command listed, its short help cut to the width by click


def test_import_labels_help_says_an_annotator_option_is_required() -> None:
    """Issue 40: neither --annotator nor --annotator-name said that one of them is required."""
    text = _help("annotate", "import-labels")
    prose = " ".join(text.split())
    assert "Column naming the annotator. [required: this or --annotator-name]" in prose
    assert "One annotator name for every row. [required: this or --annotator]" in prose
    assert "give exactly one of the two" in prose
    assert [line for line in text.splitlines() if len(line) > 80] == []

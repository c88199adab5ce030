"""A required ``--store`` left out is named by Click: Click ≥ 8.3 treats an explicit ``default=None`` as a value, so
the option declared with it was silently None (a TypeError traceback further down)."""

from __future__ import annotations

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

"""`greval agreement`'s batch (cli/agreement_modes.batch): several FILEs and --judge / --human pairs in one
call give one JSON whose tables are, item by item, the JSONs of the single calls; a mistake is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from greval.agreement import AgreementBatch
from greval.cli.agreement import agreement


def _files(tmp_path: Path) -> list[Path]:
    """Two label files (a CSV and a JSON Lines file) with two judge / human column pairs and two runs per item."""
    rng = np.random.default_rng(7)
    out = []
    for n, name in enumerate(("a.csv", "b.jsonl")):
        rows = []
        for i in range(40):
            h1, h2 = rng.choice(["yes", "no"]), rng.choice(["low", "mid", "high"])
            rows.append(
                {
                    "id": f"i{i}",
                    "j1": h1 if rng.random() < 0.8 else "no",
                    "h1": h1,
                    "j2": h2 if rng.random() < 0.6 else "mid",
                    "h2": h2,
                    "lang": "en" if i % 3 else "de",
                    "order": "original" if i % 2 else "swapped",
                    "pair": f"p{i // 2 + n}",
                }
            )
        path = tmp_path / name
        if name.endswith(".csv"):
            path.write_text(
                ",".join(rows[0]) + "\n" + "".join(",".join(r.values()) + "\n" for r in rows), encoding="utf-8"
            )
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        out.append(path)
    return out


def _json(tmp_path: Path, args: list[str], name: str) -> Any:
    out = tmp_path / name
    res = CliRunner().invoke(agreement, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text(encoding="utf-8"))


COMMON = ["--bootstrap", "40", "--seed", "3", "--slice", "lang", "--item", "id"]


@pytest.mark.parametrize(
    ("columns", "singles"),
    [
        # --judge / --human pairs: the i-th judge column against the i-th human column
        (["--judge", "j1", "--human", "h1", "--judge", "j2", "--human", "h2"], [["j1", "h1"], ["j2", "h2"]]),
        # one --human: the --judge columns compared side by side, per file
        (["--judge", "j1", "--judge", "j2", "--human", "h1"], [["j1", "j2", "h1"]]),
        # the judge against itself, per file (no people)
        (["--judge", "j1", "--pair-by", "order", "--item", "pair"], [["j1", "pair"]]),
    ],
)
def test_a_batch_is_the_single_calls_item_by_item(tmp_path: Path, columns: list[str], singles: list[list[str]]) -> None:
    files = _files(tmp_path)
    common = COMMON if "--pair-by" not in columns else ["--bootstrap", "40", "--seed", "3"]
    batch = _json(tmp_path, [*map(str, files), *columns, *common], "batch.json")
    AgreementBatch.model_validate(batch)  # what a Python caller reads it back as
    expected = []
    for f in files:
        for cols in singles:
            if "--pair-by" in columns:
                args = [str(f), *columns, *common]
                judge, human = ["j1"], None
            else:
                *judges, human = cols
                args = [str(f), *(x for j in judges for x in ("--judge", j)), "--human", human, *common]
                judge = judges
            single = _json(tmp_path, args, "single.json")
            expected.append({"file": str(f), "judge": judge, "human": human, "score": None, "report": single})
    assert len(batch["tables"]) == len(expected) == len(files) * len(singles)
    for got, want in zip(batch["tables"], expected, strict=True):
        assert got == want


def test_a_batch_prints_every_table_under_its_title(tmp_path: Path) -> None:
    a, b = _files(tmp_path)
    args = [str(a), str(b), "--judge", "j1", "--human", "h1", "--judge", "j2", "--human", "h2", "--bootstrap", "0"]
    res = CliRunner().invoke(agreement, args)
    assert res.exit_code == 0, res.output
    titles = [f"{a}: j1 vs h1", f"{a}: j2 vs h2", f"{b}: j1 vs h1", f"{b}: j2 vs h2"]
    places = [res.output.index(t) for t in titles]
    assert places == sorted(places) and res.output.count("cohen_kappa") == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # the second file lacks a column: its name leads the line, and the first file's report is not printed
        (["{a}", "{c}", "--judge", "j1", "--human", "h1"], "{c}: no column 'h1'"),
        (["{a}", "{b}", "--judge", "j1", "--human", "h1", "--judge", "nope", "--human", "h2"], "{a}: no column 'nope'"),
        # the second pair's answers are not on the scale: the stage's own message, under the file's name
        (["{a}", "--judge", "j1", "--human", "h1", "--judge", "j2", "--human", "h2"], "{a}: unknown human answer"),
        (["{a}", "{a}x", "--judge", "j1", "--human", "h1"], "{a}x: no such file"),
        (["{a}", "--judge", "j1", "--human", "h1", "--human", "h2"], "--human given 2 times and --judge 1"),
        (["{a}", "--judge", "j1", "--human", "h1", "--judge", "j2", "--human", "h2", "--score", "s"], "--score goes"),
        (["{a}", "{b}", "--judge", "j1", "--human", "h1", "--html", "x.html"], "a batch (several FILEs"),
        (["{a}", "--store", "{a}", "--spec", "x"], "give FILE or --store, not both"),
    ],
)
def test_batch_mistakes_exit_2_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    a, b = _files(tmp_path)
    c = tmp_path / "c.csv"
    c.write_text("id,j1\ni0,yes\n", encoding="utf-8")
    args = [x.format(a=a, b=b, c=c) for x in args]
    res = CliRunner().invoke(agreement, [*args, "--bootstrap", "0", "--labels", "yes,no"])
    assert res.exit_code == 2, res.output
    assert message.format(a=a, b=b, c=c) in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output

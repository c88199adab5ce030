"""agreement/tables.py: files in every format, nested fields, one table reader."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from greval.agreement.tables import read_table, to_agreement_frame
from greval.errors import DataError


def test_loader_formats_and_nested_fields(tmp_path: Path) -> None:
    records = [{"id": n, "scores": {"q": n % 3}, "pred": {"q": (n + 1) % 3}} for n in range(6)]
    gz = tmp_path / "a.json.gz"
    with gzip.open(gz, "wt") as fh:
        json.dump(records, fh)
    jl = tmp_path / "a.jsonl"
    jl.write_text("\n".join(json.dumps(r) for r in records))
    flat = pd.DataFrame({"id": range(6), "h": [n % 3 for n in range(6)], "j": [(n + 1) % 3 for n in range(6)]})
    flat.to_csv(tmp_path / "a.csv", index=False)
    flat.to_parquet(tmp_path / "a.parquet")
    pd.DataFrame({"id": range(6), "s": [{"q": n % 3} for n in range(6)]}).to_parquet(tmp_path / "n.parquet")
    for path, j, h in (
        (gz, "pred.q", "scores.q"),
        (jl, "pred.q", "scores.q"),
        (tmp_path / "a.csv", "j", "h"),
        (tmp_path / "a.parquet", "j", "h"),
    ):
        f = to_agreement_frame(read_table(path), j, h, item="id")
        assert f["human"].tolist() == [n % 3 for n in range(6)], path
    nested = to_agreement_frame(read_table(tmp_path / "n.parquet"), "s.q", "s.q")
    assert nested["judge"].tolist() == [n % 3 for n in range(6)]
    with pytest.raises(DataError, match="no column"):
        to_agreement_frame(read_table(jl), "pred.nope", "scores.q")


def test_one_table_reader_for_datasets_agreement_tables_and_label_files(tmp_path: Path) -> None:
    """dataset/tables.py reads every table: one DataError naming the file for what it cannot read, the same
    rows whoever asks (CSV label literals stay text; a JSON object lacking a key gets None in a label file)."""
    from greval.dataset.records import load_records
    from greval.dataset.tables import read_rows

    odd = tmp_path / "labels.txt"
    odd.write_text("record_id,label\nr1,NA\n", encoding="utf-8")
    broken = tmp_path / "labels.csv.gz"
    broken.write_bytes(b"record_id,label\nr1,NA\n")
    for read in (read_table, read_rows, load_records):
        with pytest.raises(DataError, match=f"^{re.escape(str(odd))}: unknown format"):
            read(odd)
        with pytest.raises(DataError, match=f"^{re.escape(str(broken))}: not a gzip file"):
            read(broken)
    labels = tmp_path / "labels.csv"
    labels.write_text("record_id,label,note\nr1,NA,\nr2,None,ok\n", encoding="utf-8")
    assert read_rows(labels) == [
        {"record_id": "r1", "label": "NA", "note": ""},
        {"record_id": "r2", "label": "None", "note": "ok"},
    ]
    assert read_table(labels, as_text=True)["label"].tolist() == ["NA", "None"]
    jl = tmp_path / "labels.jsonl"
    jl.write_text('{"record_id": "r1", "label": 4}\n{"record_id": "r2", "label": 2, "note": "x"}\n')
    assert read_rows(jl) == [
        {"record_id": "r1", "label": 4, "note": None},
        {"record_id": "r2", "label": 2, "note": "x"},
    ]


def _plain(values: list[object]) -> list[object]:
    """NaN as None: a DataFrame's missing cell, as a Frame holds it."""
    return [None if isinstance(v, float) and v != v else v for v in values]


def test_read_columns_reads_the_cells_read_table_reads_without_pandas(tmp_path: Path) -> None:
    """The Frame reader (the CSV module, json) gives every column read_table gives, cell for cell: text cells
    with only the empty one missing, quoted separators and line breaks, a repeated or empty header name
    (pandas' ``a.1`` / ``Unnamed: 1``), a short row, a byte-order mark, a cell over the csv module's default
    128 KiB, TSV, nested JSON as dotted columns."""
    from greval.agreement.tables import read_columns

    csv_text = '\ufeffid,label,label,,note\n1,NA,None,x,"a, b"\n2,,nan,y,"two\nlines"\n\n3,null\n'
    files = {"a.csv": csv_text, "a.tsv": "id\tlabel\n1\tN/A\n2\t\n", "long.csv": "id,text\n1," + "x" * 300_000 + "\n"}
    rows = [{"id": 1, "s": {"q": 2, "r": {"x": "a"}}}, {"id": 2, "s": {"q": None}, "t": "NA"}, {"id": 3, "s": 5}]
    files["a.jsonl"] = "\n".join(json.dumps(r) for r in rows)
    files["a.json"] = json.dumps(rows)
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        ours, theirs = read_columns(path), read_table(path, as_text=True)
        assert sorted(ours.columns) == sorted(map(str, theirs.columns)), name
        for column in ours.columns:
            assert ours[column] == _plain(theirs[column].tolist()), (name, column)
    assert read_columns(tmp_path / "a.csv")["label.1"] == ["None", "nan", None]
    pd.DataFrame({"id": [1, 2], "s": [{"q": 1}, {"q": 2}]}).to_parquet(tmp_path / "n.parquet")
    assert to_agreement_frame(read_columns(tmp_path / "n.parquet"), "s.q", "s.q")["judge"] == [1, 2]


def test_read_columns_refuses_a_row_longer_than_its_header_and_a_broken_quote(tmp_path: Path) -> None:
    """pandas read rows one cell longer than the header by taking their first cell as the row's index (every
    value shifted one column, silently); the Frame reader names the line instead."""
    from greval.agreement.tables import read_columns

    longer = tmp_path / "long.csv"
    longer.write_text("judge,human\n1,yes,yes\n2,no,yes\n", encoding="utf-8")
    assert read_table(longer, as_text=True)["judge"].tolist() == ["yes", "no"]  # what pandas did
    with pytest.raises(DataError, match=r"long\.csv: cannot parse CSV: line 2: 3 cells, the header has 2"):
        read_columns(longer)
    quote = tmp_path / "quote.csv"
    quote.write_text('question,answer\n"who?,Shakespeare\nsecond,row\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"quote\.csv: cannot parse CSV: line 3"):
        read_columns(quote)
    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match="empty CSV file"):
        read_columns(empty)

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

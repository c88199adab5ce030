"""import-labels reads a label cell as the agreement stage reads an answer (greval.agreement.prepare.answers):
2, 2.0 and "2" are one label, and a cell that is no label is a one-line error. Kept apart from
test_annotation.py, which needs the embedded Argilla server: importing into the store alone needs none. A
real SQLite store judged through the local OpenAI-compatible test server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from greval.annotation.labels_import import import_labels
from greval.dataset.records import Record
from greval.errors import UserError
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import parse_spec
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

GRADE: dict[str, Any] = {
    "name": "grade",
    "description": "How many of the answer's claims the chunks state.",
    "steps": ["Count the claims the chunks state.", "Choose the label 0, 1 or 2 for that count."],
    "inputs": ["answer"],
    "scale": {"kind": "categorical", "labels": {"0": "no claim is stated", "1": "one is", "2": "two are"}},
}
RATING: dict[str, Any] = {
    "name": "rating",
    "description": "How good the answer is overall.",
    "steps": ["Read the answer.", "Rate the answer from 1 to 5."],
    "inputs": ["answer"],
    "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
}


@pytest.fixture()
def store(llm: OpenAIServer, tmp_path: Path) -> Path:
    path = tmp_path / "greval.sqlite"
    records = [Record.from_mapping({"id": f"r{i}", "answer": f"Answer {i}."}) for i in range(3)]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        run([parse_spec(GRADE), parse_spec(RATING)], records, st, cfg)
    return path


def _write(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_label_written_as_a_number_is_the_scale_s_label(store: Path, tmp_path: Path) -> None:
    # JSON numbers 2.0 and 1, and the text "2.0": the labels "2", "1" and "2", as `greval agreement` reads them.
    labels = _write(tmp_path / "l.jsonl", [{"rid": "r0", "g": 2.0}, {"rid": "r1", "g": 1}, {"rid": "r2", "g": "2.0"}])
    with Store(store) as st:
        res = import_labels(st, labels, "grade", record_id_col="rid", label_col="g", annotator_name="ann")
        got = sorted((r["record_id"], r["label"]) for r in st.human_labels("grade"))
    assert res.stored == 3
    assert got == [("r0", "2"), ("r1", "1"), ("r2", "2")]


def test_an_infinite_rating_is_a_one_line_error(store: Path, tmp_path: Path) -> None:
    labels = _write(tmp_path / "l.jsonl", [{"rid": "r0", "v": "inf"}, {"rid": "r1", "v": 4}])
    with Store(store) as st, pytest.raises(UserError, match=r"1 label\(s\) not on the scale .*integers 1-5\): inf"):
        import_labels(st, labels, "rating", record_id_col="rid", label_col="v", annotator_name="ann")

"""triple_validity (greval.judge.computed.triples) against the user's relationship table."""

from __future__ import annotations

from pathlib import Path

import pytest

from greval.errors import SpecError
from greval.judge.computed import (
    parse_arrow_triples,
)
from greval.spec import load_spec_file
from greval.spec.computed import TripleSpec
from tests.judge.computed.conftest import TABLE, TRIPLES, computed_judge, computed_score, triple_spec, write


def test_triple_validity_worked_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")  # the table is found next to the spec file, not in the working directory
    data = {"triples": TRIPLES}
    s = triple_spec(tmp_path)
    res = computed_judge(s, data)
    assert computed_score(res) == pytest.approx(2 / 4)
    assert [v.label for v in res.verdicts[1:]] == ["valid", "valid", "invalid", "invalid"]
    assert res.verdicts[1].item_id == "triple:t1"
    assert computed_score(computed_judge(triple_spec(tmp_path, ", directed: false"), data)) == pytest.approx(3 / 4)
    rel = computed_judge(triple_spec(tmp_path, ", relation_column: relation"), data)
    assert computed_score(rel) == pytest.approx(1 / 4)
    assert "another relation" in (rel.verdicts[2].reason or "")


def test_triples_parsed_from_answer_text(tmp_path: Path) -> None:
    assert parse_arrow_triples("1. ALICE --[works with]--> BOB\n- Eve --[knows]--> Bob") == [
        {"id": "t1", "subject": "ALICE", "predicate": "works with", "object": "BOB"},
        {"id": "t2", "subject": "Eve", "predicate": "knows", "object": "Bob"},
    ]
    s = triple_spec(tmp_path, ", field: answer")
    res = computed_judge(s, {"answer": "Found:\nALICE --[works_with]--> BOB\nEve --[knows]--> Bob"})
    assert computed_score(res) == pytest.approx(1 / 2)


def test_editing_the_table_changes_the_identity(tmp_path: Path) -> None:
    before = triple_spec(tmp_path).computed_identity()
    assert "table-sha256=" in before
    assert triple_spec(tmp_path).computed_identity() == before
    (tmp_path / "tables" / "rel.csv").write_text(TABLE + "EVE,BOB,knows,z\n", encoding="utf-8")
    f = tmp_path / "spec.yaml"
    (s,) = load_spec_file(f)
    assert isinstance(s, TripleSpec)
    assert s.computed_identity() != before
    assert computed_score(computed_judge(s, {"triples": TRIPLES})) == pytest.approx(3 / 4)


def test_table_with_wrong_columns_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("from,to\na,b\n")
    f = write(tmp_path, "name: kg\nkind: computed\ndescription: d\nmetric: triple_validity\nparams: {table: t.csv}\n")
    with pytest.raises(SpecError, match=r"params\.table: t\.csv has no column 'source' \(columns: from, to\)"):
        load_spec_file(f)

"""A run over a large dataset file in bounded memory (issue 35): past PLAN_HOLD rows with work left, the plan
keeps each row's position in the file instead of its Record and the run reads the file again as it judges;
the verdicts, records and figures are those of a plan held in memory; a file changed under the run is an
error, not a wrong verdict."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import greval.runner.plan as planning
from greval.dataset.records import DataFile
from greval.errors import DataError
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.results import figures, item_rows
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.test_run import FAST, cfg


def _write(path: Path, n: int, *, twins: int = 0) -> None:
    """``n`` rows answer_alignment can judge; the last ``twins`` repeat the content of the first ones under
    other ids (judged once, listed under both ids)."""
    rows = [
        {"id": f"r{i}", "question": f"Question {i}?", "answer": f"Answer {i}.", "expected_answer": f"Gold {i}."}
        for i in range(n)
    ]
    rows += [{**rows[k], "id": f"twin{k}"} for k in range(twins)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _state(store: Path) -> dict[str, Any]:
    drop = ("created_at", "updated_at", "run_id", "latency_ms", "outputs")
    with Store(store) as st:
        rows = sorted(({k: v for k, v in r.items() if k not in drop} for r in item_rows(st)), key=repr)
        recs = sorted((r.id, r.hash, json.dumps(r.data, sort_keys=True)) for r in st.records())
        return {"items": rows, "records": recs, "figures": [f.model_dump() for f in figures(st)]}


def test_a_plan_past_plan_hold_keeps_positions_and_judges_the_same(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """30 rows (and 3 twins of earlier contents) with PLAN_HOLD 5: the plan holds no Record, the run reads
    the file again, makes one call per content, stores every record id, and leaves the store exactly as a run
    whose plan held every Record."""
    data = tmp_path / "d.jsonl"
    _write(data, 30, twins=3)
    specs = resolve_specs(["answer_alignment"])
    held, lazy = tmp_path / "held.sqlite", tmp_path / "lazy.sqlite"
    with Store(held) as st:
        assert run(specs, DataFile(data), st, cfg(llm), options=FAST).calls == 30
    llm.reset()
    monkeypatch.setattr(planning, "PLAN_HOLD", 5)
    with Store(lazy) as st:
        plan = planning.plan_work(specs, DataFile(data), st, cfg(llm))
        assert len(plan.unique) == 30 and plan.unique._held == []  # positions, not Records
        assert len(plan.unstored) == 33 and plan.unstored._held == []
        assert [r.id for r in plan.unique] == [f"r{i}" for i in range(30)]  # read again, in order
        summary = run(specs, DataFile(data), st, cfg(llm), options=FAST, plan=plan)
    assert summary.calls == 30 and llm.stats()["total"] == 30 and summary.records == 33
    assert _state(lazy) == _state(held)
    with Store(lazy) as st:
        assert len(st.records()) == 33  # the twins' ids too, stored when the run linked its snapshot
        again = run(specs, DataFile(data), st, cfg(llm), options=FAST)
    assert again.calls == 0 and llm.stats()["total"] == 30


def test_a_file_changed_while_the_run_reads_it_again_is_an_error(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planned by position, a row that is not the one planned is refused (one line naming the file), not
    judged in another row's place."""
    data = tmp_path / "d.jsonl"
    _write(data, 12)
    specs = resolve_specs(["answer_alignment"])
    monkeypatch.setattr(planning, "PLAN_HOLD", 3)
    with Store(tmp_path / "s.sqlite") as st:
        plan = planning.plan_work(specs, DataFile(data), st, cfg(llm))
        lines = data.read_text().splitlines()
        edited = {**json.loads(lines[7]), "answer": "Something else."}
        data.write_text("\n".join([*lines[:7], json.dumps(edited), *lines[8:]]) + "\n")
        with pytest.raises(DataError, match=r"d\.jsonl: record 'r7' changed while the run read the file"):
            run(specs, DataFile(data), st, cfg(llm), options=RunOptions(concurrency=2), plan=plan)
        data.write_text("\n".join(lines[:5]) + "\n")
        with pytest.raises(DataError, match=r"d\.jsonl: the file got shorter while the run read it"):
            list(plan.unique)


def test_a_large_plan_holds_a_few_hundred_bytes_per_row(tmp_path: Path) -> None:
    """Planning 40,000 new rows of a file (every one with work left) holds ~2 KB per row as Records below
    PLAN_HOLD; past it, the plan keeps the (id, hash) snapshot pairs, the pending items and a position."""
    data = tmp_path / "d.jsonl"
    _write(data, 40_000)
    specs = resolve_specs(["answer_alignment"])
    judge = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")  # no call is made
    with Store(tmp_path / "s.sqlite") as st:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            plan = planning.plan_work(specs, DataFile(data), st, judge)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert len(plan.unique) == 40_000 and plan.judgements == 40_000
    per_row = held / 40_000
    assert per_row < 600, f"{per_row:.0f} bytes per row"  # before: ~2,100 (every Record held)

"""greval/flows: the one front door of a run (flows/run.py) — every way of judging data goes through it — and
the composed flows around it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import greval
from greval.cli import main
from greval.dataset.source import DataSource
from greval.flows import run as front
from greval.flows.run import DataNote, RunEvent, RunInterrupted, RunPlanned, run_dataset
from greval.llm.config import JudgeChoice, JudgeConfig
from greval.spec import JudgeDefaults, resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import terminal_sigint

ROOT = Path(__file__).resolve().parents[1]


def _rows(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"q{i}", "question": f"Question {i}?", "answer": f"A{i}", "expected_answer": f"A{i}"} for i in range(n)
    ]


def test_run_dataset_says_each_step_as_events_and_fills_the_judge_from_the_spec(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """Without the command line: the data's notes and the plan arrive as typed events before any call, the
    caller's judge choice wins over the spec's judge block, which fills the rest, and a second run plans
    nothing."""
    data = tmp_path / "d.jsonl"
    row = {"id": "a", "question": "q?", "answer": "x", "expected_answer": "x"}
    data.write_text("".join(json.dumps(r) + "\n" for r in [row, {**row, "id": "b", "answer": "y"}, row]))
    (spec,) = resolve_specs(["answer_alignment"])
    spec = spec.model_copy(update={"judge": JudgeDefaults(temperature=0.4, max_tokens=64, samples=1)})
    choice = JudgeChoice(ref="openai:judge-test", base_url=llm.base_url, max_tokens=99, timeout=10)
    said: list[RunEvent] = []
    store = tmp_path / "s.sqlite"
    opts = greval.RunOptions(concurrency=2)
    done = run_dataset(DataSource(data=data), [spec], choice, store, opts, said.append)
    assert [type(e) for e in said] == [DataNote, RunPlanned] and "read once" in said[0].text
    planned = said[1]
    assert isinstance(planned, RunPlanned) and planned.build_note() is None
    assert planned.model_dump(exclude={"store"}) == RunPlanned(
        records=2,
        distinct_contents=2,
        specs=["answer_alignment"],
        judge="openai:judge-test",
        needs_judge=True,
        judgements=2,
        computed=0,
    ).model_dump(exclude={"store"})
    assert (done.judge.temperature, done.judge.max_tokens, done.judge.timeout) == (0.4, 99, 10)
    assert done.ref == "openai:judge-test" and done.summary.metrics[0].judged == 2
    assert done.ids == ["a", "b"] and llm.stats()["total"] == 2
    said.clear()
    again = run_dataset(DataSource(data=data), [spec], choice, store, opts, said.append)
    assert isinstance(said[-1], RunPlanned) and said[-1].judgements == 0 and again.summary.calls == 0


def test_every_door_goes_through_the_one_front_door(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """greval run, greval.evaluate, greval.aevaluate, greval.run, spec try and the pytest fixture all call
    flows.run.arun_dataset (patched here to count its callers; each call still runs for real)."""
    calls: list[str] = []
    real = front.arun_dataset

    async def counted(source: DataSource, *args: Any, **kwargs: Any) -> Any:
        calls.append(source.where)
        return await real(source, *args, **kwargs)

    monkeypatch.setattr(front, "arun_dataset", counted)
    judge = "openai:judge-test"
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _rows(3)))
    store = str(tmp_path / "s.sqlite")
    res = CliRunner().invoke(main, ["run", str(data), "-s", "answer_alignment", "--store", store, "--judge", judge])
    assert res.exit_code == 0, res.output
    assert calls == [str(data)]
    greval.evaluate(pd.DataFrame(_rows(2)), "answer_alignment", judge=judge, store=store, progress=False)
    assert calls[-1] == "the DataFrame"
    import asyncio

    asyncio.run(greval.aevaluate(_rows(2), "answer_alignment", judge=judge, store=store, progress=False))
    assert calls[-1] == "the list"
    with Store(store) as st:
        cfg = JudgeConfig.parse(judge, base_url=llm.base_url)
        greval.run(resolve_specs(["answer_alignment"]), greval.load_records(data), st, cfg)
    assert calls[-1] == "the records"
    labelled = tmp_path / "l.jsonl"
    labelled.write_text("".join(json.dumps({**r, "label": "Correct"}) + "\n" for r in _rows(2)))
    spec = ROOT / "metric_specs" / "answer_alignment.yaml"
    res = CliRunner().invoke(
        main, ["spec", "try", str(spec), "--data", str(labelled), "--human-column", "label", "--judge", judge]
    )
    assert res.exit_code == 0, res.output
    assert calls[-1] == str(labelled) and len(calls) == 5
    from greval.pytest_plugin import GrevalCheck

    monkeypatch.setenv("GREVAL_STORE", store)
    GrevalCheck(request.config)(_rows(2), "answer_alignment", judge=judge, min_score=0.0)
    assert calls[-1] == "the list" and len(calls) == 6


def test_a_plain_script_s_ctrl_c_ends_in_one_line_with_what_is_stored(llm: OpenAIServer, tmp_path: Path) -> None:
    """greval.evaluate interrupted in a plain script: RunInterrupted (a KeyboardInterrupt and a GrevalError), whose
    message says what is stored and how to resume — the same facts greval run prints; the run is recorded as
    interrupted and the same call resumes it."""
    llm.configure(latency=0.3)
    script = tmp_path / "s.py"
    script.write_text(
        "import os, signal, threading, greval\n"
        "greval.evaluate, greval.GrevalError  # imported before the timer starts: the signal lands in the run\n"
        "rows = [{'id': f'q{i}', 'question': 'q', 'answer': f'a{i}', 'expected_answer': 'a'} for i in range(40)]\n"
        "threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()\n"
        "try:\n"
        f"    greval.evaluate(rows, 'answer_alignment', judge='openai:judge-test', store={str(tmp_path / 'e.sqlite')!r}"
        ", concurrency=2, progress=False)\n"
        "except greval.GrevalError as exc:\n"
        "    assert isinstance(exc, KeyboardInterrupt)\n"
        "    print('CAUGHT', exc)\n"
    )
    env = {"OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": llm.base_url, "PYTHONPATH": str(ROOT), "PATH": "/usr/bin"}
    # A job started in the background by a non-interactive shell inherits SIGINT as ignored (then the run went on
    # to its end: CI run by hand, 2026-11-29); a user's terminal delivers it.
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120, preexec_fn=terminal_sigint
    )
    assert out.returncode == 0, out.stderr
    caught = [x for x in out.stdout.splitlines() if x.startswith("CAUGHT")]
    assert caught, (out.stdout[-1500:], out.stderr[-1500:])
    line = caught[0]
    assert "verdict(s) stored" in line and "to resume" in line
    assert "Traceback" not in out.stderr
    with Store(tmp_path / "e.sqlite") as st:
        assert [r["status"] for r in st.runs()] == ["interrupted"]
    assert issubclass(RunInterrupted, KeyboardInterrupt) and issubclass(RunInterrupted, greval.GrevalError)

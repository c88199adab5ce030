"""greval.evaluate / aevaluate and their Results (issue 33): one call from a DataFrame, a list, a Hugging Face
Dataset or a file, through the real run path and store, against the real test LLM server over HTTP."""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

import greval
from greval.cli import main
from greval.errors import DataError, SpecError, UserError
from greval.llm.config import JudgeConfig
from greval.report.store_report import build
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

LABELS = ["Correct", "Acceptable", "Not Acceptable", "Incorrect"]


def rows(n: int = 8) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i}",
            "question": f"What is fact {i}?",
            "expected_answer": f"Fact {i} is true.",
            "answer": f"Fact {i} is true." if i % 3 else f"Something else about {i}.",
            "chunks": [f"Fact {i} is true, says chunk {k}." for k in range(2)],
            "system": "A" if i % 2 else "B",
        }
        for i in range(n)
    ]


@pytest.fixture()
def judged(llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> OpenAIServer:
    """The test server as the environment's OpenAI-compatible endpoint, greval's data dir in tmp_path."""
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("GREVAL_HOME", str(tmp_path / "home"))
    return llm


def test_a_dataframe_a_list_a_dataset_and_a_file_give_one_frame_and_a_second_call_pays_nothing(
    judged: OpenAIServer, tmp_path: Path
) -> None:
    data = rows()
    metrics = ["answer_alignment", "rouge_l"]
    first = greval.evaluate(pd.DataFrame(data), metrics, judge="openai:judge-test", progress=False)
    assert first.calls == len(data) == judged.stats()["total"]
    assert (tmp_path / "home" / "evaluate.sqlite").exists()  # the default store, in greval's data dir
    frame = first.to_pandas()
    assert list(frame.index) == [r["id"] for r in data]  # the data's order, its ids
    assert list(frame.columns) == [f"{m}.{f}" for m in metrics for f in ("score", "label", "reason", "status")]
    assert set(frame["answer_alignment.label"]) <= set(LABELS) and frame["rouge_l.score"].notna().all()
    judged.reset()
    path = tmp_path / "rag.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in data), encoding="utf-8")
    datasets = pytest.importorskip("datasets")
    for again in (data, str(path), greval.load_records(path), datasets.Dataset.from_list(data)):
        res = greval.evaluate(again, metrics, judge="openai:judge-test", progress=False)
        assert res.calls == 0 and judged.stats()["total"] == 0
        pd.testing.assert_frame_equal(res.to_pandas(), frame)


def test_summary_is_the_run_summarys_score_with_the_reports_ci(judged: OpenAIServer, tmp_path: Path) -> None:
    """summary(): the dataset score the CLI's run summary prints, and the CI `greval report` shows."""
    store = tmp_path / "s.sqlite"
    res = greval.evaluate(rows(10), ["answer_alignment", "rouge_l"], judge="openai:judge-test", store=store)
    table = res.summary()
    report = {m.metric: m for m in build(store).metrics}
    for m in res.run.metrics:
        assert table.loc[m.spec, "score"] == m.mean_score == report[m.spec].score.mean
        assert (table.loc[m.spec, "ci_low"], table.loc[m.spec, "ci_high"]) == (
            report[m.spec].score.ci_low,
            report[m.spec].score.ci_high,
        )
        assert table.loc[m.spec, "judged"] == 10 and table.loc[m.spec, "scored"] == 10
    html = res._repr_html_()
    assert "<table>" in html and "answer_alignment" in html and res.run_id in html
    worst = res.worst("rouge_l", 3)
    assert list(worst["score"]) == sorted(res.to_pandas()["rouge_l.score"])[:3]


def test_item_level_and_the_long_table(judged: OpenAIServer, tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    res = greval.evaluate(rows(4), "chunk_evaluation", judge="openai:judge-test", store=store, progress=False)
    items = res.to_pandas(level="item")
    assert list(items.index.names) == ["record_id", "item_id"] and len(items) == 8
    assert set(items.index.get_level_values("item_id")) == {"c1", "c2"}
    long = res.to_pandas(level="record", wide=False)
    pd.testing.assert_frame_equal(long, greval.load_results(store, level="record"))


def test_it_runs_inside_a_running_event_loop_and_awaits_without_blocking_it(judged: OpenAIServer) -> None:
    """Jupyter runs cells inside a running loop: the sync call works there (it waited on greval's own loop;
    it raised 'inside a running event loop' before), and aevaluate leaves the caller's loop free."""
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    async def cell() -> tuple[greval.Results, greval.Results]:
        sync = greval.evaluate(rows(4), "answer_alignment", judge="openai:judge-test", progress=False)
        judged.configure(latency=0.3)
        task = asyncio.ensure_future(ticker())
        started = time.monotonic()
        awaited = await greval.aevaluate(rows(6), "answer_alignment", judge="openai:judge-test", concurrency=1)
        task.cancel()
        assert sum(1 for t in ticks if t > started) > 20  # the loop kept running while the judge answered
        return sync, awaited

    sync, awaited = asyncio.run(cell())
    assert sync.calls == 4 and awaited.calls == 2  # the 4 shared records come from the store
    assert threading.active_count() >= 2  # greval's loop thread


def test_bad_input_is_one_line(judged: OpenAIServer) -> None:
    frame = pd.DataFrame([{"question": "q", "response": "a", "reference": "e"}])
    with pytest.raises(SpecError) as unknown:
        greval.evaluate(frame, "faithfullness", progress=False)
    assert "did you mean 'faithfulness'" in str(unknown.value)
    with pytest.raises(DataError) as missing:
        greval.evaluate(frame, "answer_alignment", judge="openai:judge-test", progress=False)
    text = str(missing.value)
    assert "answer_alignment needs the field 'expected_answer'" in text
    assert "map={'expected_answer': 'reference'}" in text
    for exc in (unknown.value, missing.value):
        assert "\n" not in str(exc)
    with pytest.raises(UserError, match="not a dataset"):
        greval.evaluate(42, "rouge_l", progress=False)
    with pytest.raises(DataError, match="several columns named 'answer'"):
        greval.evaluate(pd.DataFrame([[1, 2]], columns=["answer", "answer"]), "rouge_l", progress=False)
    # the fix the message names works: the mapped frame is judged
    res = greval.evaluate(
        frame, "answer_alignment", judge="openai:judge-test", map={"expected_answer": "reference", "answer": "response"}
    )
    assert res.to_pandas()["answer_alignment.status"].tolist() == ["ok"]


def test_odd_ids_are_said_or_refused_never_turned_silently_into_other_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: a pandas column of integers with one missing value holds floats, and its ids became '1.0',
    '2.0' and a content hash; a tuple id became its repr. Computed metrics: no judge needed."""
    store = tmp_path / "s.sqlite"

    def frame(ids: list[Any]) -> pd.DataFrame:
        answers = [{"answer": f"Fact {i} is true.", "expected_answer": f"Fact {i} is true."} for i in range(len(ids))]
        return pd.DataFrame([{"id": i, **a} for i, a in zip(ids, answers, strict=True)])

    # a column of integers with a missing value (pandas: 1.0, 2.0, NaN): the integers, and the record without
    # an id known by its content hash, as in data without ids; each said in a note (printed, in Results.notes)
    res = greval.evaluate(frame([1, 2, None]), "rouge_l", store=store, progress=False)
    ids = res.to_pandas().index.tolist()
    assert ids[:2] == ["1", "2"] and len(ids[2]) == 16
    notes = [
        "the DataFrame: 2 id(s) held as whole-number floats (as pandas stores a column of integers with a missing "
        "value) were read as integers: 1.0 → 1, 2.0 → 2",
        f"the DataFrame: 1 record(s) have no 'id' while others have one: each is known by its content hash instead "
        f"(record 3 → {ids[2]}); give every record an id to choose them",
    ]
    assert res.notes == notes
    err = capsys.readouterr().err
    assert all(f"note: {n}" in err for n in notes), err
    res = greval.evaluate(
        [{"id": math.nan, "answer": "a", "expected_answer": "a"}, {"id": "x", "answer": "b", "expected_answer": "b"}],
        "rouge_l",
        store=store,
        progress=False,
        quiet=True,
    )
    assert res.notes[0].startswith("the list: 1 record(s) have no 'id' while others have one")
    # named as the id column, a missing id is refused (as before)
    with pytest.raises(DataError, match=r"^the DataFrame: record 3: the id column 'id' is empty$"):
        greval.evaluate(frame([1, 2, None]), "rouge_l", store=store, id_column="id", progress=False)
    # an id holding several values: refused, not its repr
    for odd, shown in (((("a", 1)), "a tuple (('a', 1))"), ([1, 2], "a list ([1, 2])"), (b"x", "a bytes (b'x')")):
        with pytest.raises(DataError) as bad:
            greval.evaluate(
                [{"id": odd, "answer": "a", "expected_answer": "a"}], "rouge_l", store=store, progress=False
            )
        assert str(bad.value) == (
            f"the list: record 1: the id 'id' is {shown}, not one value: give each record a text or number id"
        )
    # unchanged: no id column at all (content ids), text and integer ids (no note)
    plain = greval.evaluate(frame(["a", "b"]).drop(columns="id"), "rouge_l", store=store, progress=False)
    assert len(plain.to_pandas().index[0]) == 16 and plain.notes == []
    assert greval.evaluate(frame([7, 8]), "rouge_l", store=store, progress=False).to_pandas().index.tolist() == [
        "7",
        "8",
    ]


def test_agreement_from_a_column_labels_or_the_store_is_greval_agreements_report(
    judged: OpenAIServer, tmp_path: Path
) -> None:
    store = tmp_path / "s.sqlite"
    data = [{**r, "human": LABELS[i % 4]} for i, r in enumerate(rows(12))]
    res = greval.evaluate(data, "answer_alignment", judge="openai:judge-test", store=store, progress=False)
    by_column = res.agreement(human="human", bootstrap=200)
    by_id = res.agreement(human={r["id"]: r["human"] for r in data}, bootstrap=200)
    in_order = res.agreement(human=pd.Series([r["human"] for r in data]), bootstrap=200)
    as_list = res.agreement(human=[r["human"] for r in data], bootstrap=200)
    frame = pd.DataFrame({"record_id": [r["id"] for r in data], "label": [r["human"] for r in data]})
    by_frame = res.agreement(human=frame, bootstrap=200)
    assert by_column.metrics == by_id.metrics == in_order.metrics == as_list.metrics == by_frame.metrics
    # the same report `greval agreement FILE` computes from the same pairs
    pairs = tmp_path / "pairs.csv"
    judge = res.to_pandas()["answer_alignment.label"]
    pd.DataFrame({"id": judge.index, "judge": judge.values, "human": [r["human"] for r in data]}).to_csv(pairs)
    labels = ",".join(LABELS[::-1])
    out = tmp_path / "a.json"
    cli = ["agreement", str(pairs), "--judge", "judge", "--human", "human", "--item", "id", "--labels", labels]
    done = CliRunner().invoke(main, [*cli, "--ordered", "--bootstrap", "200", "--json", str(out)])
    assert done.exit_code == 0, done.output
    reported = json.loads(out.read_text())["metrics"]
    assert {"accuracy", "cohen_kappa"} <= set(reported) and set(reported) == set(by_column.metrics)
    for name, e in by_column.metrics.items():
        assert e.value == pytest.approx(reported[name]["value"], abs=1e-12, nan_ok=True), name
    # and, with the labels in the store, the report of `greval agreement --store`
    with Store(store) as st:
        hashes = {r.id: r.hash for r in st.records()}
        st.put_human_labels(
            [
                {
                    "spec_name": "answer_alignment",
                    "record_hash": hashes[r["id"]],
                    "item_id": "",
                    "annotator": "ann",
                    "record_id": r["id"],
                    "label": r["human"],
                    "status": "submitted",
                }
                for r in data
            ]
        )
    stored = res.agreement(bootstrap=200)
    done = CliRunner().invoke(
        main,
        ["agreement", "--store", str(store), "--spec", "answer_alignment", "--bootstrap", "200", "--json", str(out)],
    )
    assert done.exit_code == 0, done.output
    assert stored.metrics["cohen_kappa"].value == pytest.approx(
        json.loads(out.read_text())["metrics"]["cohen_kappa"]["value"]
    )
    assert stored.metrics["cohen_kappa"].value == pytest.approx(by_column.metrics["cohen_kappa"].value)


def test_a_judge_config_and_spec_objects_work_and_computed_metrics_need_no_judge(
    llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("GREVAL_HOME", str(tmp_path))
    computed = greval.evaluate(rows(3), greval.resolve_specs(["rouge_l"]), progress=False)
    assert computed.calls == 0 and computed.to_pandas()["rouge_l.status"].tolist() == ["ok"] * 3
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url)
    spec = greval.load_spec(Path(__file__).resolve().parents[1] / "metric_specs" / "answer_alignment.yaml")
    res = greval.evaluate(rows(3), [spec, "rouge_l"], judge=cfg, progress=False)
    assert res.calls == 3 and res.metrics == ["answer_alignment", "rouge_l"]


#: A plain script (issue 40): three greval.evaluate calls, then a judge of the user's own ChatOpenAI. It counts
#: its own TCP connections to the test server (Linux's /proc) after each step and, last of all at exit (its
#: atexit hook is registered before greval is imported, so it runs after greval's own), what is still open.
CONNECTIONS_SCRIPT = """
import atexit, os, sys
from pathlib import Path

PORT = int(sys.argv[1])


def open_to_server():
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if int(cols[2].rsplit(":", 1)[1], 16) == PORT:
                inodes.add(cols[9])
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        n += link.startswith("socket:[") and link[8:-1] in inodes
    return n


atexit.register(lambda: print("open at exit", open_to_server(), flush=True))

import greval
from langchain_openai import ChatOpenAI

for k in range(3):
    data = [{"id": f"{k}-{i}", "question": f"q {k} {i}?", "expected_answer": "a", "answer": "a"} for i in range(12)]
    res = greval.evaluate(data, "answer_alignment", judge="openai:judge-test", concurrency=4, progress=False)
    print("calls", res.calls, "open after run", open_to_server(), flush=True)
model = ChatOpenAI(model="judge-test", base_url=os.environ["OPENAI_BASE_URL"], api_key="sk-test")
judge = greval.compile(greval.resolve_specs(["answer_alignment"])[0], model)
judge.invoke({"question": "q?", "expected_answer": "a", "answer": "a"})
print("open after invoke", open_to_server(), flush=True)
"""


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="counts connections through Linux's /proc")
def test_a_plain_script_closes_each_runs_connections_and_the_rest_at_exit(judged: OpenAIServer, tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(CONNECTIONS_SCRIPT)
    port = int(judged.base_url.rsplit(":", 1)[1].split("/")[0])
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", str(script), str(port)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    # Each run's judge is built for it, and its connections end with it (a notebook's 10th call holds none).
    assert lines[:3] == ["calls 12 open after run 0"] * 3, done.stdout
    assert lines[3] != "open after invoke 0", done.stdout  # the user's model keeps its pool for the next call
    assert lines[4] == "open at exit 0", done.stdout  # … until the process ends: closed, not dropped
    assert "ResourceWarning" not in done.stderr and "unclosed" not in done.stderr, done.stderr

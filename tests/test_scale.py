"""Runs on Ray (``greval run --engine ray``, and ``greval watch --engine ray``): the same verdicts as one
process, nothing lost or paid twice when a worker is killed, one shared rate-limit signal. A private local Ray
cluster (greval's own ``connect``: two CPUs here, on 127.0.0.1) for the module, the test OpenAI-compatible server
counting the calls.

The store comes from one fixture (``store_ref``): a SQLite file (every worker on this machine) and a database
on a real PostgreSQL server (workers on many machines); every Ray task opens it by that reference."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from greval import load_results
from greval.cli import main
from greval.llm.retry import RetryPolicy
from greval.runner.driver import run
from greval.runner.options import RunOptions, RunSummary
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY
from tests.test_run import cfg, rag_records
from tests.test_watch import emit, judge_args, judge_rules, rows, watch

pytest.importorskip("ray", reason="greval[ray] is not installed")

pytestmark = pytest.mark.slow

from greval.scale.ray_engine import (  # noqa: E402  (after the skip: it needs nothing of Ray at import)
    Coordinator,
    SharedLimiter,
    connect,
    ray_module,
    split_plan,
)

#: What differs between two runs that judged the same things: when, by which run, how fast.
VOLATILE = ["run_id", "created_at", "updated_at", "latency_ms"]

SPECS = ["answer_alignment", "chunk_evaluation", "rouge_l"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A private local Ray cluster, started as ``greval run --engine ray`` starts one; its workers inherit this
    environment (the judge's API key), as a local cluster's do."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        mp.delenv("OPENAI_BASE_URL", raising=False)
        mp.delenv("RAY_ADDRESS", raising=False)
        connect(None)
        ray = ray_module()
        yield ray
        ray.shutdown()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_ref(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store every process of a run opens by reference: a SQLite file (all workers on this machine), and
    a database on a real PostgreSQL server (tests/conftest.py), the store of workers on many machines."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite")
    url: str = request.getfixturevalue("pg_url")
    return url


def write_jsonl(path: Path, n: int) -> Path:
    """The rows of tests.test_run.rag_records(n), as a dataset file."""
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            row = {
                "id": f"r{i}",
                "question": f"Question number {i}?",
                "expected_answer": f"Expected {i}.",
                "answer": f"Answer {i}.",
                "chunks": [f"chunk {i}.{k}" for k in range(3)],
            }
            fh.write(json.dumps(row) + "\n")
    return path


def verdict_rows(store: str) -> pd.DataFrame:
    frame = load_results(store).drop(columns=VOLATILE)
    frame["outputs"] = frame["outputs"].map(lambda d: json.dumps(d, sort_keys=True))
    return frame.sort_values(["spec", "record_id", "item_id"]).reset_index(drop=True)


def figures_of(summary: RunSummary) -> list[tuple[Any, ...]]:
    return [(m.spec, m.judged, m.reused, m.verdicts, m.distribution, m.mean_score) for m in summary.metrics]


def greval_run(data: Path, store: str, srv: OpenAIServer, *extra: str) -> Any:
    args = ["run", str(data), *(a for s in SPECS for a in ("-s", s)), "--store", store]
    args += ["--judge", "openai:judge-test", "--base-url", srv.base_url, "--quiet", *extra]
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_ray_run_equals_one_process_and_pays_each_judgement_once(
    cluster: Any, llm: OpenAIServer, store_ref: str, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", 10)
    local = str(tmp_path / "local.sqlite")
    res = greval_run(data, local, llm)
    assert res.exit_code == 0, res.output
    local_calls = llm.stats()["total"]
    assert local_calls == 10 + 10  # answer_alignment + chunk_evaluation (one call per record); rouge_l: none
    llm.reset()

    res = greval_run(data, store_ref, llm, "--engine", "ray", "--shards", "2")
    assert res.exit_code == 0, res.output
    assert llm.stats()["total"] == local_calls  # each judgement paid once across the two workers
    pd.testing.assert_frame_equal(verdict_rows(store_ref), verdict_rows(local))
    # One run recorded, with the usual summary: the figures every command shows.
    with Store(local) as a, Store(store_ref) as b:
        assert [r["status"] for r in b.runs()] == ["finished"] and len(a.runs()) == 1
        one, two = (RunSummary(**(st.last_run_summary(os.getpid()) or {})) for st in (a, b))
    assert figures_of(two) == figures_of(one)
    assert two.calls == one.calls == local_calls and two.records == 10
    assert "rouge_l" in res.output and "answer_alignment" in res.output

    # (c) a re-run makes no call, and needs no cluster: nothing is pending.
    llm.reset()
    again = greval_run(data, store_ref, llm, "--engine", "ray", "--shards", "2")
    assert again.exit_code == 0, again.output
    assert llm.stats()["total"] == 0
    with Store(store_ref) as b:
        last = RunSummary(**(b.last_run_summary(os.getpid()) or {}))
    assert [m.reused for m in last.metrics] == [10, 10, 10] and last.calls == 0


def test_split_plan_deals_every_pending_record_once(llm: OpenAIServer, store_ref: str) -> None:
    from greval.runner.plan import plan_work

    specs = resolve_specs(SPECS)
    with Store(store_ref) as st:
        plan = plan_work(specs, rag_records(7), st, cfg(llm))
    parts = split_plan(plan, specs, 3)
    assert [len(p.unique) for p in parts] == [3, 2, 2]
    assert sorted(r.id for p in parts for r in p.unique) == sorted(r.id for r in plan.unique)
    assert sum(p.judgements for p in parts) == plan.judgements == 14 and sum(p.computed for p in parts) == 7
    assert len(split_plan(plan, specs, 50)) == 7  # never an empty shard


def shard_workers() -> list[int]:
    """Pids of Ray worker processes running a shard now (Ray titles a busy worker ``ray::<task>``)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(b"ray::run_shard"):
            pids.append(int(proc.name))
    return pids


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds Ray's worker processes through /proc")
def test_a_killed_worker_loses_nothing_and_pays_only_its_calls_in_flight(
    cluster: Any, llm: OpenAIServer, store_ref: str
) -> None:
    llm.configure(latency=0.4)
    specs = resolve_specs(["answer_alignment"])
    recs = rag_records(24)
    opts = RunOptions(
        engine="ray", shards=2, concurrency=4, retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.1)
    )
    out: list[RunSummary] = []
    failed: list[BaseException] = []

    def go() -> None:
        try:
            with Store(store_ref) as st:
                out.append(run(specs, recs, st, cfg(llm), options=opts))
        except BaseException as exc:  # surfaced by the assertion below
            failed.append(exc)

    def stored_verdicts() -> int:
        with Store(store_ref) as st:
            return int(st.db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    runner = threading.Thread(target=go)
    runner.start()
    deadline = time.monotonic() + 120
    while stored_verdicts() < 6 and time.monotonic() < deadline and runner.is_alive():  # some work already stored
        time.sleep(0.05)
    victims = shard_workers()
    assert victims, "no Ray worker was running a shard"
    stored = stored_verdicts()
    in_flight = llm.stats()["in_flight"]
    os.kill(victims[0], signal.SIGKILL)
    # What the retried shard may pay again: the calls whose verdict was not stored when its worker died — those in
    # flight and those answered but not yet group-committed (at most GROUP_DELAY_S old, longer on a loaded
    # machine). Nothing stored is paid twice.
    unstored = llm.stats()["total"] - stored
    runner.join(timeout=180)
    assert not runner.is_alive() and not failed, failed
    summary = out[0]
    assert summary.failed == 0 and summary.metrics[0].verdicts == 24 and summary.metrics[0].ok == 24
    frame = load_results(store_ref)
    assert len(frame) == 24 and set(frame["status"]) == {"ok"}
    duplicates = llm.stats()["total"] - 24
    print(f"killed {victims[0]} with {in_flight} call(s) in flight, {unstored} unstored: {duplicates} paid twice")
    assert 0 <= duplicates <= unstored, (duplicates, unstored, in_flight)
    with Store(store_ref) as st:
        assert [r["status"] for r in st.runs()] == ["finished"]
        assert st.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0  # no claim left behind


def test_one_workers_rate_limit_cut_reduces_the_others(cluster: Any) -> None:
    ray = cluster
    sig = ray.remote(num_cpus=0)(Coordinator).remote()
    a = SharedLimiter(8, signal=sig, run="r1", shard=0)
    b = SharedLimiter(8, signal=sig, run="r1", shard=1)
    c = SharedLimiter(8, adaptive=False, signal=sig, run="r1", shard=2)
    other = SharedLimiter(8, signal=sig, run="r2", shard=1)  # another run's worker

    async def scenario() -> None:
        for _ in range(6):  # a third of a 16-call window refused: one cut, told to the others
            a.on_rate_limited(started=a.clock(), retry_after=0.2)
        assert a.limit == 4 and a.cuts == 1
        await asyncio.sleep(0.2)  # the signal is sent without waiting
        assert await b.sync() and b.limit == 4 and b._resume_at > b.clock()
        assert not await b.sync() and b.limit == 4  # one cut per signal
        assert not await a.sync() and a.limit == 4  # its own cut is not followed again
        assert not await c.sync() and c.limit == 8  # --no-adaptive keeps its limit
        assert not await other.sync() and other.limit == 8  # another run (another key, maybe) is not told
        # A 429 that started before b's followed cut belongs to that episode: no second cut.
        b.on_rate_limited(started=b.clock() - 5)
        assert b.limit == 4

    asyncio.run(scenario())


def test_engine_errors_are_one_line(tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "d.jsonl", 1)
    store = str(tmp_path / "s.sqlite")
    base = [sys.executable, "-m", "greval", "run", str(data), "-s", "answer_alignment", "--store", store]
    base += ["--judge", "openai:x", "--base-url", "http://127.0.0.1:9/v1", "--engine", "ray"]
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY}
    env.pop("RAY_ADDRESS", None)
    # A cluster that cannot be reached: the address and Ray's reason (here: the client extra, or no answer).
    got = subprocess.run(
        [*base, "--ray-address", "ray://127.0.0.1:1"], capture_output=True, text=True, env=env, timeout=180
    )
    assert got.returncode != 0 and "Traceback" not in got.stderr
    assert "cannot connect to Ray at ray://127.0.0.1:1: " in got.stderr
    # Ray not installed: the install hint, no traceback.
    code = "import sys; sys.modules['ray'] = None; from greval.cli import main; main()"
    got = subprocess.run([sys.executable, "-c", code, *base[3:]], capture_output=True, text=True, env=env, timeout=120)
    assert got.returncode != 0 and "pip install 'greval[ray]'" in got.stderr and "Traceback" not in got.stderr
    with Store(store) as st:
        assert st.runs() == []  # neither error recorded a run
    usage = CliRunner().invoke(main, [*base[3:-2], "--shards", "2"])
    assert usage.exit_code == 2 and "--engine ray" in usage.output


def test_a_retried_shard_takes_over_its_previous_attempts_claims_at_once(
    cluster: Any, llm: OpenAIServer, store_ref: str
) -> None:
    """A retry may run on another host, where the dead attempt's pid cannot be checked: the claims of the attempt
    before are its own (one owner per shard), not a live stranger's to wait 10 minutes for."""
    from greval.runner.plan import plan_work
    from greval.scale.ray_engine import Shard, coordinator, run_shard
    from greval.store.store import spec_keys

    specs = resolve_specs(["answer_alignment"])
    key = spec_keys(specs)["answer_alignment"]
    judge = cfg(llm)
    with Store(store_ref) as st:
        plan = plan_work(specs, rag_records(4), st, judge)
        st.put_specs(specs, {"answer_alignment": key})
        st.put_judge(judge)
        run_id = st.start_run("d", judge.key, ["answer_alignment"], {})
    before = Store(store_ref)  # the attempt before: its claims held by a live process (this one)
    before.owner = f"{run_id}/0"
    assert all(before.claim_many([(key, judge.key, r.hash) for r in plan.unique]))
    stranger = Store(store_ref)
    assert not any(stranger.claim_many([(key, judge.key, r.hash) for r in plan.unique]))  # held for the others
    done: list[Any] = []
    worker = threading.Thread(
        target=lambda: done.append(
            run_shard(Shard(specs, plan, store_ref, judge, run_id, RunOptions(concurrency=2), 0), coordinator(cluster))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=60)
    assert done and done[0].metrics[0].judged == 4 and llm.stats()["total"] == 4
    before.close()
    stranger.close()


def test_watch_once_on_ray_equals_the_local_engine_and_judges_nothing_twice(
    cluster: Any, llm: OpenAIServer, tmp_path: Path
) -> None:
    """``greval watch --once --engine ray`` over a folder of OTLP JSON exports: the verdicts of a local watch of
    the same traces, each judgement paid once, and a second pass judges nothing."""
    llm.script(judge_rules())
    land = tmp_path / "land"
    emit(land, 10, per_file=10, drift_after=6)  # one file; its last four traces answer from the wrong chunk
    shutil.copytree(land, tmp_path / "land-local")
    common = ["-s", "answer_alignment", "--once", "--settle", "0s", *judge_args(llm)]
    local, on_ray = tmp_path / "local.sqlite", tmp_path / "ray.sqlite"
    done = watch("--source", str(tmp_path / "land-local"), "--store", str(local), *common)
    assert done.exit_code == 0, done.output
    assert "10 trace(s) read, 10 chosen, 10 judged" in done.output
    assert llm.stats()["total"] == 10
    llm.reset()
    llm.script(judge_rules())

    ray_args = ["--source", str(land), "--store", str(on_ray), *common, "--engine", "ray"]
    first = watch(*ray_args)
    assert first.exit_code == done.exit_code, first.output
    assert "10 trace(s) read, 10 chosen, 10 judged" in first.output
    assert llm.stats()["total"] == 10  # each judgement paid once
    frame = verdict_rows(str(on_ray))  # ids, hashes, labels, values, reasons, tokens
    pd.testing.assert_frame_equal(frame, verdict_rows(str(local)))
    assert set(frame["label"]) == {"Correct", "Incorrect"}
    items = "SELECT trace_id, status, record_hash FROM watch_items ORDER BY trace_id"
    assert rows(on_ray, items) == rows(local, items) and len(rows(on_ray, items)) == 10

    with Store(local) as a, Store(on_ray) as b:  # the page's run: on Ray tasks there, in this process here
        (here,), (there,) = a.runs(), b.runs()
    cpus = int(cluster.cluster_resources()["CPU"])
    assert (json.loads(here["options"])["engine"], json.loads(here["summary"])["workers"]) == ("local", 1)
    assert (json.loads(there["options"])["engine"], json.loads(there["summary"])["workers"]) == ("ray", cpus)

    second = watch(*ray_args)
    assert second.exit_code == 0, second.output
    assert "0 trace(s) read, 0 chosen, 0 judged" in second.output
    assert llm.stats()["total"] == 10  # nothing judged again

"""Runs in local worker processes (``greval run --workers N``, greval.scale.processes): the same verdicts and
summary as one process, each judgement paid once, a killed worker costing only its calls in flight, a killed
driver taking its workers with it, one rate-limit cut reaching every worker. The real test server counts the
calls; the store is a SQLite file (several writer processes, WAL) and a database on a real PostgreSQL server.
No speed is asserted here (scripts/bench_run.py --workers measures it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from greval import load_results
from greval.cli import main
from greval.errors import UserError
from greval.llm.retry import RetryPolicy
from greval.runner.driver import run
from greval.runner.options import RunOptions, RunSummary, default_workers
from greval.scale.worker import WORKER_NAME
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY
from tests.test_run import cfg, rag_records

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the worker processes through /proc")

#: What differs between two runs that judged the same things: when, by which run, how fast.
VOLATILE = ["run_id", "created_at", "updated_at", "latency_ms"]

SPECS = ["answer_alignment", "chunk_evaluation", "rouge_l"]

QUICK_RETRY = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.1)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_ref(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store every process of a run opens by reference: a SQLite file and a database on a real PostgreSQL
    server (tests/conftest.py)."""
    if request.param == "sqlite":
        return str(tmp_path / "store.sqlite")
    url: str = request.getfixturevalue("pg_url")
    return url


def write_jsonl(path: Path, n: int) -> Path:
    """The rows of tests.test_run.rag_records(n), as a dataset file."""
    rows = [
        {
            "id": f"r{i}",
            "question": f"Question number {i}?",
            "expected_answer": f"Expected {i}.",
            "answer": f"Answer {i}.",
            "chunks": [f"chunk {i}.{k}" for k in range(3)],
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def verdict_rows(store: str) -> pd.DataFrame:
    frame = load_results(store).drop(columns=VOLATILE)
    frame["outputs"] = frame["outputs"].map(lambda d: json.dumps(d, sort_keys=True))
    return frame.sort_values(["spec", "record_id", "item_id"]).reset_index(drop=True)


def figures_of(summary: RunSummary) -> list[tuple[Any, ...]]:
    return [(m.spec, m.judged, m.reused, m.calls, m.verdicts, m.distribution, m.mean_score) for m in summary.metrics]


def args_of(data: Path, store: str, srv: OpenAIServer, *extra: str, specs: list[str] = SPECS) -> list[str]:
    args = ["run", str(data), *(a for s in specs for a in ("-s", s)), "--store", store]
    return [*args, "--judge", "openai:judge-test", "--base-url", srv.base_url, "--quiet", *extra]


def last_summary(store: str) -> RunSummary:
    with Store(store) as st:
        return RunSummary(**(st.last_run_summary(os.getpid()) or {}))


def stored(store: str, table: str = "verdicts") -> int:
    with Store(store) as st:
        return int(st.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of a live process, None once it is gone (or a zombie)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else (fields[0], int(fields[1]))


def workers_of(driver: int) -> list[int]:
    """Live worker processes of a driver: named greval-worker, forked by the driver's forking server."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_bytes().strip() != WORKER_NAME:
                continue
        except OSError:
            continue
        me, server = _stat(int(proc.name)), None
        if me is not None:
            server = _stat(me[1])
        if server is not None and server[1] == driver:
            found.append(int(proc.name))
    return found


def wait_for(what: Callable[[], bool], seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


# ------------------------------------------------------------------------------------------- the same run
def test_workers_judge_as_one_process_does_and_pay_each_judgement_once(
    llm: OpenAIServer, store_ref: str, tmp_path: Path
) -> None:
    data = write_jsonl(tmp_path / "data.jsonl", 12)
    local = str(tmp_path / "local.sqlite")
    res = CliRunner().invoke(main, args_of(data, local, llm, "--workers", "1"), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    one_process = llm.stats()["total"]
    assert one_process == 12 + 12  # answer_alignment + chunk_evaluation (one call per record); rouge_l: none
    llm.reset()

    res = CliRunner().invoke(main, args_of(data, store_ref, llm, "--workers", "2", "-c", "4"), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert llm.stats()["total"] == one_process  # each judgement paid once across the two workers
    pd.testing.assert_frame_equal(verdict_rows(store_ref), verdict_rows(local))
    # One run recorded, with the summary one process records: the same figures and activity.
    one, two = last_summary(local), last_summary(store_ref)
    with Store(store_ref) as st:
        assert [r["status"] for r in st.runs()] == ["finished"]
    assert (one.workers, two.workers) == (1, 2)
    assert figures_of(two) == figures_of(one) and two.calls == one.calls == one_process
    assert two.records == 12 and two.peak_concurrency <= 4
    assert stored(store_ref, "claims") == 0  # every worker dropped its claims

    # A re-run makes no call and starts no worker: nothing is pending.
    llm.reset()
    again = CliRunner().invoke(main, args_of(data, store_ref, llm, "--workers", "2"), catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert llm.stats()["total"] == 0
    last = last_summary(store_ref)
    assert [m.reused for m in last.metrics] == [12, 12, 12] and last.calls == 0 and last.workers == 1


# ------------------------------------------------------------------------------------------- killed processes
def test_a_killed_worker_costs_only_its_calls_in_flight(llm: OpenAIServer, store_ref: str) -> None:
    """SIGKILL one worker mid-run: the driver starts its shard again, which judges only what the store lacks;
    the run finishes with every verdict, one run, no claim left; the same command then makes no call."""
    llm.configure(latency=0.4)
    specs = resolve_specs(["answer_alignment"])
    recs = rag_records(24)
    opts = RunOptions(workers=2, concurrency=4, retry=QUICK_RETRY)
    out: list[RunSummary] = []
    failed: list[BaseException] = []

    def go() -> None:
        try:
            with Store(store_ref) as st:
                out.append(run(specs, recs, st, cfg(llm), options=opts))
        except BaseException as exc:  # surfaced by the assertion below
            failed.append(exc)

    runner = threading.Thread(target=go)
    runner.start()
    wait_for(lambda: stored(store_ref) >= 6 or not runner.is_alive())  # some work already stored
    victims = workers_of(os.getpid())
    assert len(victims) == 2, victims
    before = stored(store_ref)
    os.kill(victims[0], signal.SIGKILL)
    # What the restarted shard may pay again: the calls whose verdict was not stored when its worker died —
    # those in flight and those answered but not yet group-committed. Nothing stored is paid twice.
    unstored = llm.stats()["total"] - before
    runner.join(timeout=180)
    assert not runner.is_alive() and not failed, failed
    summary = out[0]
    assert summary.failed == 0 and summary.metrics[0].verdicts == 24 and summary.metrics[0].ok == 24
    assert summary.workers == 2
    frame = load_results(store_ref)
    assert len(frame) == 24 and set(frame["status"]) == {"ok"}
    duplicates = llm.stats()["total"] - 24
    print(f"killed {victims[0]}: {unstored} call(s) unstored at the kill, {duplicates} paid twice")
    assert 0 <= duplicates <= unstored
    assert summary.calls >= 24 - unstored  # the killed worker's calls are counted up to its last report
    with Store(store_ref) as st:
        assert [r["status"] for r in st.runs()] == ["finished"]
    assert stored(store_ref, "claims") == 0
    llm.reset()
    with Store(store_ref) as st:
        assert run(specs, recs, st, cfg(llm), options=opts).calls == 0
    assert llm.stats()["total"] == 0


def test_a_killed_driver_takes_its_workers_with_it_and_the_same_command_resumes(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """SIGKILL the `greval run` process: its workers find it gone and stop (no call after that, their verdicts
    committed, their claims dropped); the same command then judges only what is missing."""
    llm.configure(latency=0.4)
    data = write_jsonl(tmp_path / "data.jsonl", 30)
    store = str(tmp_path / "store.sqlite")
    args = args_of(data, store, llm, "--workers", "2", "-c", "4", specs=["answer_alignment"])
    command = [sys.executable, "-m", "greval", *args]
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY}
    cli = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (Path(store).exists() and stored(store) >= 6) or cli.poll() is not None)
        victims = workers_of(cli.pid)
        assert len(victims) == 2, victims
        cli.kill()
        cli.wait(30)
        wait_for(lambda: all(_stat(pid) is None for pid in victims), 60)  # the workers stopped by themselves
    finally:
        if cli.poll() is None:
            cli.kill()
    paid = llm.stats()["total"]
    time.sleep(1.0)
    assert llm.stats()["total"] == paid  # nobody calls on a dead run's behalf
    kept = stored(store)
    assert stored(store, "claims") == 0  # each worker dropped its claims as it stopped
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert stored(store) == 30
    assert llm.stats()["total"] - paid == 30 - kept  # only what was missing


# ------------------------------------------------------------------------------------------- rate limits
def test_one_workers_rate_limit_cut_reaches_every_worker(llm: OpenAIServer, store_path: Path) -> None:
    """429s for the records of shard 0 only (records are dealt round-robin: the even ones): its limiter cuts,
    and the driver tells the other worker, which cuts too (the provider's limit is per key)."""
    even = r"Question number \d*[02468]\?"
    rule = {"match": even, "regex": True, "times": 12, "action": {"type": "fault", "status": 429, "retry_after": 0.3}}
    llm.script([rule])
    # Shard 1 is still judging (~6.5 s) when shard 0 cuts at its first calls, even if shard 0's worker starts
    # seconds later on a loaded machine (with 80 records, ~2.5 s, it failed once at load 14).
    llm.configure(latency=0.5)
    specs = resolve_specs(["answer_alignment"])
    opts = RunOptions(workers=2, concurrency=16, retry=QUICK_RETRY)
    with Store(store_path) as st:
        summary = run(specs, rag_records(200), st, cfg(llm), options=opts)
    assert summary.failed == 0 and summary.metrics[0].ok == 200 and summary.workers == 2
    assert summary.rate_limited == 12
    assert "1 concurrency cut(s) made because another worker was rate limited" in summary.notes


# ------------------------------------------------------------------------------------------- errors
def test_a_workers_error_is_the_runs_error(llm: OpenAIServer, tmp_path: Path) -> None:
    """A judge that refuses the key stops a run in workers as it stops one process: the same one line, the
    same exit code, the run recorded as failed, no claim left."""
    llm.script([{"action": {"type": "fault", "status": 401}}])
    data = write_jsonl(tmp_path / "data.jsonl", 8)
    outputs = []
    for workers in ("1", "2"):
        store = str(tmp_path / f"s{workers}.sqlite")
        res = CliRunner().invoke(main, args_of(data, store, llm, "--workers", workers, "-c", "4"))
        outputs.append((res.exit_code, res.output.replace(store, "STORE")))
        assert not isinstance(res.exception, AssertionError) and "Traceback" not in res.output
        with Store(store) as st:
            assert [r["status"] for r in st.runs()] == ["failed"]
        assert stored(store, "claims") == 0
    assert outputs[0] == outputs[1] and outputs[0][0] != 0, outputs


def test_a_script_without_a_main_guard_runs_once(llm: OpenAIServer, tmp_path: Path) -> None:
    """Workers are forked from greval's own server, which never imports the caller's ``__main__`` again (as
    multiprocessing's start methods do): a script with no ``if __name__ == "__main__"`` works, and runs once."""
    script = tmp_path / "judge.py"
    script.write_text(
        "import greval\n"
        "from greval.runner.options import RunOptions\n"
        "from tests.test_run import rag_records\n"
        "print('script ran', flush=True)\n"
        f"cfg = greval.JudgeConfig.parse('openai:judge-test', base_url={llm.base_url!r})\n"
        f"with greval.Store({str(tmp_path / 's.sqlite')!r}) as st:\n"
        "    s = greval.run(greval.resolve_specs(['answer_alignment']), rag_records(10), st, cfg,\n"
        "                   options=RunOptions(workers=2, concurrency=4))\n"
        "print('workers', s.workers, 'calls', s.calls, flush=True)\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY, "PYTHONPATH": root}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["script ran", "workers 2 calls 10"]
    assert llm.stats()["total"] == 10


def test_where_a_run_is_judged_is_checked_before_it_is_recorded(llm: OpenAIServer, store_path: Path) -> None:
    specs = resolve_specs(["answer_alignment"])
    with Store(store_path) as st:
        with pytest.raises(UserError, match="`workers` goes with `engine` local"):
            run(specs, rag_records(2), st, cfg(llm), options=RunOptions(engine="ray", workers=2))
        with pytest.raises(UserError, match="`workers` 2: each worker builds its chat model"):
            run(specs, rag_records(2), st, cfg(llm), model=object(), options=RunOptions(workers=2))
        assert st.runs() == []
    with Store(":memory:") as st, pytest.raises(UserError, match="cannot share an in-memory store"):
        run(specs, rag_records(2), st, cfg(llm), options=RunOptions(workers=2))
    usage = CliRunner().invoke(main, ["run", "d.jsonl", "-s", "answer_alignment", "--engine", "ray", "--workers", "2"])
    assert usage.exit_code == 2 and "--workers goes with --engine local" in usage.output


def test_the_default_worker_count() -> None:
    """One process per 128 calls in flight, at most one per core and per 256 judgements; one for the embedded
    judge."""
    assert default_workers(8, 10_000, 2, local_judge=False) == 1
    assert default_workers(128, 10_000, 2, local_judge=False) == 1
    assert default_workers(129, 10_000, 2, local_judge=False) == 2
    assert default_workers(256, 10_000, 2, local_judge=False) == 2
    assert default_workers(512, 10_000, 8, local_judge=False) == 4
    assert default_workers(512, 600, 8, local_judge=False) == 2
    assert default_workers(128, 100, 2, local_judge=False) == 1
    assert default_workers(128, 10_000, 2, local_judge=True) == 1

"""``greval run --workers N``: the pending records of one run, split into shards judged by local worker processes.

One event loop feeds about 128 calls in flight at 200 ms of latency (~1 ms of client CPU a call with greval's own
HTTP client, greval.llm.wire); past that the client's CPU, not the judge, is the limit. The driver
(:func:`greval.runner.driver.arun`) plans the run and records it once (one run id, one snapshot, one summary), then
:func:`judge_in_processes` deals the plan into shards (:func:`greval.scale.shards.split_plan`, as on Ray) and has
one worker process per shard judge it (:mod:`greval.scale.worker`) at the run's concurrency divided by the shards.

The store holds the run together, as on Ray: each model judgement is claimed before its call, verdicts are
committed in groups, and every attempt at a shard holds its claims as one owner. A worker that dies (killed,
out of memory) costs its calls in flight and its last uncommitted group: the driver starts its shard again
(:data:`MAX_RETRIES` times), and the new attempt judges only what the store lacks. The driver is the
coordinator: one connection per worker carries its progress (one bar), its activity (the run's one summary)
and its rate-limit cuts, which the driver passes on to every other worker at once.

Workers are forked from a server process that imported the judge stack once (:func:`greval.scale.worker.main`,
started on first use and kept while this process lives). Ctrl-C is the driver's: it tells the workers to stop
(each commits its verdicts and drops its claims), and a worker whose driver is gone stops by itself.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from greval.errors import UserError
from greval.runner.job import RunJob
from greval.runner.options import EngineTotals, ProgressHook
from greval.scale.shards import ACTIVITY, Shard, ShardReport, add_reports, shard_options, split_plan, start_shards

__all__ = ["CONNECT_S", "CUT_MEMORY_S", "MAX_RETRIES", "STOP_WAIT_S", "judge_in_processes"]

#: Times the driver starts a shard again after its worker died.
MAX_RETRIES = 3

#: How long a worker asked for may take to connect before it counts as dead (seconds).
CONNECT_S = 120.0

#: How long the driver waits for stopped workers to commit their verdicts and exit before it kills them.
STOP_WAIT_S = 30.0

#: A cut passed on in the last this many seconds is told to a worker that connects later (one started again, or
#: slower to start than the one that cut at its first calls): the cooldown a 429 asks for is at most this long.
CUT_MEMORY_S = 60.0

#: Per metric, its activity (:data:`ACTIVITY`, in that order): what a worker reports as it goes.
Activity = dict[str, tuple[int, ...]]


async def judge_in_processes(job: RunJob, progress: ProgressHook | None, workers: int) -> EngineTotals:
    """The driver's side: shard the job's plan, judge the shards in ``workers`` processes, show their progress
    as one, and add their activity into ``job.summaries``. A shard that fails (its worker raised, or died more
    than :data:`MAX_RETRIES` times) stops the others and raises; so does an interrupt, once every worker has
    committed its verdicts (at most :data:`STOP_WAIT_S`)."""
    assert job.run_id is not None  # a run's job: recorded before it is judged
    parts = split_plan(job.plan, job.specs, workers)
    per = shard_options(job.options, len(parts))
    total = start_shards(job)
    shards = [Shard(job.specs, part, job.store.ref, job.cfg, job.run_id, per, k) for k, part in enumerate(parts)]
    if progress:
        progress(0, total, 0)
    pool = _Pool([_Slot(s) for s in shards], progress, total)
    await pool.run()
    totals = add_reports(job, (s.report for s in pool.slots if s.report is not None))
    for slot in pool.slots:
        slot.add_lost(job)
    if pool.failure is not None:
        raise pool.failure
    if progress:
        progress(total, total, pool.errors())
    return totals


@dataclass
class _Slot:
    """One shard and the worker judging it now: its latest progress and activity, those of its dead attempts,
    and its report once it is done."""

    shard: Shard
    attempts: int = 0
    conn: Connection | None = None  # the live worker's connection (None: none connected)
    pid: int | None = None
    waiting: asyncio.TimerHandle | None = None  # a worker asked for, not connected yet
    done: int = 0
    errors: int = 0
    activity: Activity = field(default_factory=dict)
    lost: list[Activity] = field(default_factory=list)
    report: ShardReport | None = None

    @property
    def idle(self) -> bool:
        """No worker of this shard is alive or on its way."""
        return self.conn is None and self.waiting is None

    def add_lost(self, job: RunJob) -> None:
        """What the shard's dead attempts did, added into ``job.summaries``: their calls and tokens were paid,
        and the judgements they committed — counted as reused by the attempt after them — were judged by this
        run (each dead attempt's last report, at most greval.scale.worker.POLL_S old)."""
        reused = {m.spec: m.reused for m in self.report.metrics} if self.report is not None else {}
        for snapshot in self.lost:
            for name, values in snapshot.items():
                mine, did = job.summaries[name], dict(zip(ACTIVITY, values, strict=True))
                moved = min(did["judged"], reused.get(name, 0))
                reused[name] = reused.get(name, 0) - moved
                mine.reused -= moved
                for what in ("judged", "tokens_in", "tokens_out", "tokens_cached", "calls"):
                    setattr(mine, what, getattr(mine, what) + did[what])


class _Pool:
    """The driver's workers: asked of the forking server, listened to on the driver's event loop, started again
    when one dies, stopped when the run fails or is interrupted."""

    def __init__(self, slots: list[_Slot], progress: ProgressHook | None, total: int) -> None:
        self.slots, self.progress, self.total = slots, progress, total
        self.loop = asyncio.get_running_loop()
        self.ended = self.loop.create_future()  # set when no worker is left
        self.failure: BaseException | None = None
        self.stopping = False
        self.cut: tuple[Any, ...] | None = None  # the last rate-limit cut passed on
        self.where = tempfile.mkdtemp(prefix="greval-workers-")  # 0700: only this user connects
        self.address = str(Path(self.where) / "driver")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    async def run(self) -> None:
        self.server.bind(self.address)
        self.server.listen()
        self.server.setblocking(False)
        self.loop.add_reader(self.server.fileno(), self._accept)
        try:
            for slot in self.slots:
                self._ask(slot)
            await asyncio.shield(self.ended)
        except asyncio.CancelledError:  # the driver interrupted: the workers commit what they have, then stop
            self._stop()
            with contextlib.suppress(asyncio.CancelledError):  # a second interrupt: at once
                await asyncio.shield(self.ended)
            raise
        finally:
            self._close()

    def errors(self) -> int:
        return sum(s.errors for s in self.slots)

    # ----------------------------------------------------------------------------- workers in and out
    def _ask(self, slot: _Slot) -> None:
        """A worker for the slot, forked by the server; it connects back with the slot's token."""
        slot.attempts += 1
        slot.done = slot.errors = 0  # an attempt counts from its start (what is stored comes back as reused)
        token = (slot.shard.index, slot.attempts)
        _fork((self.address, token, dict(os.environ), os.getcwd()))
        slot.waiting = self.loop.call_later(CONNECT_S, self._no_show, slot)

    def _accept(self) -> None:
        with contextlib.suppress(BlockingIOError, InterruptedError):
            sock, _ = self.server.accept()
            sock.setblocking(True)
            conn = Connection(sock.detach())
            self.loop.add_reader(conn.fileno(), self._hello, conn)

    def _hello(self, conn: Connection) -> None:
        """A worker's first words, (hello, token, pid): it is sent its shard, unless the run is stopping or it
        is the answer to an attempt given up on."""
        self.loop.remove_reader(conn.fileno())
        try:
            _, (index, attempt), pid = conn.recv()
        except (EOFError, OSError, ValueError):
            conn.close()
            return
        slot = self.slots[index]
        if self.stopping or attempt != slot.attempts or slot.waiting is None:
            conn.close()  # it finds the driver gone and exits
            return
        slot.waiting.cancel()
        slot.waiting, slot.conn, slot.pid = None, conn, pid
        conn.send(slot.shard)
        if self.cut is not None and time.time() - self.cut[3] < CUT_MEMORY_S:
            _send(conn, self.cut)
        self.loop.add_reader(conn.fileno(), self._readable, slot)

    def _no_show(self, slot: _Slot) -> None:
        slot.waiting = None
        self._gone(slot, "did not start")

    def _readable(self, slot: _Slot) -> None:
        conn = slot.conn
        assert conn is not None
        try:
            while conn.poll():
                self._message(slot, conn.recv())
        except (EOFError, OSError):
            self.loop.remove_reader(conn.fileno())
            conn.close()
            slot.conn = slot.pid = None
            self._gone(slot, "died")

    def _message(self, slot: _Slot, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "progress":
            slot.done, slot.errors, slot.activity = msg[1], msg[2], msg[3]
            if self.progress:
                self.progress(min(sum(s.done for s in self.slots), self.total), self.total, self.errors())
        elif kind == "cut":  # one worker's cut reaches every other at once
            epoch = 1 if self.cut is None else self.cut[1] + 1
            self.cut = ("cut", epoch, slot.shard.index, time.time(), msg[1])
            for other in self.slots:
                if other is not slot and other.conn is not None:
                    _send(other.conn, self.cut)
        elif kind == "done":
            slot.report = msg[1]
        elif kind == "failed":
            self._fail(_error(msg[1], slot.shard.index))

    def _gone(self, slot: _Slot, how: str) -> None:
        """A slot's worker is gone: done, stopped, or dead — then its shard is started again, or the run fails."""
        if slot.report is None and not self.stopping:
            if slot.attempts <= MAX_RETRIES:
                slot.lost.append(slot.activity)
                slot.activity = {}
                self._ask(slot)
                return
            self._fail(
                UserError(
                    f"shard {slot.shard.index}'s worker process {how} {slot.attempts} time(s); verdicts already "
                    "made are stored: re-run the same command to resume"
                )
            )
        if all(s.idle for s in self.slots):
            self._end()

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        self._stop()

    def _stop(self) -> None:
        """Every worker told to stop: no new call; its verdicts committed and its claims dropped (those that have
        not stopped within :data:`STOP_WAIT_S` are killed)."""
        if not self.stopping:
            self.loop.call_later(STOP_WAIT_S, self._end)
        self.stopping = True
        for slot in self.slots:
            if slot.conn is not None:
                _send(slot.conn, ("stop",))
            elif slot.waiting is not None:
                slot.waiting.cancel()
                slot.waiting = None
        if all(s.idle for s in self.slots):
            self._end()

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    def _close(self) -> None:
        """No worker outlives the run: one that did not stop in time is killed (its claims die with it)."""
        self.loop.remove_reader(self.server.fileno())
        self.server.close()
        shutil.rmtree(self.where, ignore_errors=True)
        for slot in self.slots:
            if slot.waiting is not None:
                slot.waiting.cancel()
                slot.waiting = None
            if slot.conn is not None:
                self.loop.remove_reader(slot.conn.fileno())
                slot.conn.close()
                slot.conn = None
                if slot.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(slot.pid, signal.SIGKILL)


def _send(conn: Connection, msg: tuple[Any, ...]) -> None:
    """A message down a connection whose other end may be gone (its process exited): then nobody listens."""
    with contextlib.suppress(OSError):
        conn.send(msg)


def _error(payload: bytes, shard: int) -> BaseException:
    """The exception a worker raised, as it raised it when it can be rebuilt here, else one line."""
    try:
        exc = pickle.loads(payload)
    except Exception:
        return UserError(f"shard {shard}'s worker failed and its error could not be read back")
    return exc if isinstance(exc, BaseException) else UserError(f"shard {shard}'s worker failed: {exc}")


# ------------------------------------------------------------------------------------------- the forking server
class _Forker:
    """The forking server (:func:`greval.scale.worker.main`) of this process: started on first use, kept while
    this process lives (its stdin closes with it), started again if it died."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[2])  # where this greval is imported from
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from greval.scale.worker import main; main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a terminal's Ctrl-C is the driver's: its workers stop when it says
        )

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def fork(self, request: tuple[Any, ...]) -> None:
        """Ask for one worker (it connects back to the request's address)."""
        stdin = self.proc.stdin
        assert stdin is not None
        pickle.dump(request, stdin)
        stdin.flush()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2)


_FORKER: _Forker | None = None
_FORKER_LOCK = threading.Lock()


def _fork(request: tuple[Any, ...]) -> None:
    """One worker asked of this process's forking server (started, or started again, when it is not running)."""
    global _FORKER
    with _FORKER_LOCK:
        for _ in range(2):
            if _FORKER is None or not _FORKER.alive:
                _FORKER = _Forker()
                atexit.register(_FORKER.close)
            try:
                _FORKER.fork(request)
                return
            except OSError:  # it died meanwhile: once more, with a new one
                _FORKER.close()
                _FORKER = None

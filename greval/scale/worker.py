"""The worker side of ``greval run --workers N`` (:mod:`greval.scale.processes` is the driver's): the forking
server (:func:`main`) and the worker it forks (:func:`work`).

The forking server is started once per driver process, as ``python -c "from greval.scale.worker import main;
main()"``: it imports :data:`PRELOAD` (the runner, the store, the judge stack and the openai SDK: ~0.6 s of
CPU), then forks one worker per request read from its stdin, so a worker starts in milliseconds with all of it
imported. Unlike multiprocessing's own start methods it never imports the caller's ``__main__`` again (a script
without an ``if __name__ == "__main__"`` guard would run twice). It ends when the driver closes its stdin.

A worker connects back to the driver's socket, says who it is, receives its :class:`Shard` and judges it with
the runner's own code (:func:`greval.runner.judging.judge_plan`), telling the driver its progress, its activity
and its rate-limit cuts, and following the other workers' cuts. Told to stop, or finding the driver gone, it
commits what it received, drops its claims and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import pickle
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from greval.errors import GrevalError, UserError, first_line
from greval.runner.job import RunJob
from greval.runner.judging import judge_plan
from greval.runner.options import EngineTotals
from greval.scale.shards import ACTIVITY, Shard, ShardReport, SignalledLimiter
from greval.store.store import Store

__all__ = ["POLL_S", "PRELOAD", "WORKER_NAME", "ForkRequest", "main", "send", "work"]

#: What the forking server imports once, for every worker it forks: this module (the runner, the store, the
#: judge stack) and the HTTP client (aiohttp) a worker's first call would import.
PRELOAD = ["greval.scale.worker", "greval.llm.wire", "greval.llm.openai_chat"]

#: How often a worker reports its progress and activity (seconds).
POLL_S = 0.2

#: A worker's process name (what ``ps -o comm`` and ``top`` show, on Linux).
WORKER_NAME = b"greval-worker"

#: What the driver asks the forking server for: (the driver's socket, the worker's token — its shard and
#: attempt —, the driver's environment and working directory).
ForkRequest = tuple[str, tuple[int, int], dict[str, str], str]


def main() -> None:
    """The forking server: import :data:`PRELOAD`, then fork a worker for each request on stdin until EOF.
    Ctrl-C is the driver's; forked workers are reaped by the kernel (SIGCHLD ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for name in PRELOAD:
        importlib.import_module(name)
    requests = sys.stdin.buffer
    while True:
        try:
            request: ForkRequest = pickle.load(requests)
        except EOFError:
            return
        if os.fork() == 0:
            code = 1
            try:
                _forked()
                work(*request)
                code = 0
            finally:
                os._exit(code)


def _forked() -> None:
    """A forked worker's set-up: signals as a worker has them, nothing read from the server's stdin, a name."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    with contextlib.suppress(Exception):  # Linux: the name ps and top show
        import ctypes

        ctypes.CDLL(None).prctl(15, WORKER_NAME, 0, 0, 0)  # PR_SET_NAME


def work(address: str, token: tuple[int, int], env: dict[str, str], cwd: str) -> None:
    """A worker: take the driver's environment and working directory (the server was started earlier, maybe
    in another), connect to the driver, receive the shard, judge it, and send the report or the error."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    conn = Connection(sock.detach())
    conn.send(("hello", token, os.getpid()))
    try:
        shard: Shard = conn.recv()
    except EOFError:  # the driver stopped before this worker started
        return
    try:
        report = asyncio.run(_judge_shard(conn, shard))
    except asyncio.CancelledError:  # told to stop, or the driver is gone: what was received is committed
        return
    except BaseException as exc:
        send(conn, ("failed", _portable(exc, shard.index)))
        return
    send(conn, ("done", report))


def send(conn: Connection, msg: Any) -> None:
    """A message down a connection whose other end may be gone (its process exited): then nobody listens."""
    with contextlib.suppress(OSError):
        conn.send(msg)


def _portable(exc: BaseException, shard: int) -> bytes:
    """The worker's error as the driver can raise it: itself (a bug's worker-side traceback in a note), or
    one line when it does not survive pickling."""
    if not isinstance(exc, GrevalError):
        exc.add_note(f"in the worker process of shard {shard}:\n{''.join(traceback.format_exception(exc))}")
    try:
        payload = pickle.dumps(exc)
        pickle.loads(payload)
    except Exception:
        payload = pickle.dumps(UserError(f"shard {shard}'s worker failed: {type(exc).__name__}: {first_line(exc)}"))
    return payload


async def _judge_shard(conn: Connection, shard: Shard) -> ShardReport:
    opts = shard.options
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    assert main_task is not None
    limiter = SignalledLimiter(
        opts.concurrency, opts.adaptive, shard=shard.index, tell=lambda after: send(conn, ("cut", after))
    )
    calls = opts.call_options(shard.cfg.samples, limiter)
    loop.add_reader(conn.fileno(), _listen, conn, limiter, main_task)
    loop.add_signal_handler(signal.SIGTERM, main_task.cancel)  # as a stop: the verdicts received are committed
    with Store(shard.store_ref) as store:
        job = shard.job(store)
        await judge_plan(job, calls, _reporter(conn, job))
    totals = EngineTotals.of(calls)
    return ShardReport(
        shard=shard.index,
        pid=os.getpid(),
        metrics=list(job.summaries.values()),
        peak=totals.peak,
        rate_limited=totals.rate_limited,
        followed_cuts=limiter.followed,
        notes=totals.notes,
        cpu_s=sum(os.times()[:2]),  # a forked process's own, since its fork
    )


def _listen(conn: Connection, limiter: SignalledLimiter, main_task: asyncio.Task[Any]) -> None:
    """What the driver says: another worker's cut (followed), or stop; its end gone (the driver died) is a
    stop too."""
    try:
        while conn.poll():
            msg = conn.recv()
            if msg[0] != "cut":
                raise EOFError
            limiter.follow(*msg[1:])
    except (EOFError, OSError):
        asyncio.get_running_loop().remove_reader(conn.fileno())
        main_task.cancel()


def _reporter(conn: Connection, job: RunJob) -> Callable[[int, int, int], None]:
    """The shard's progress hook: its counts and activity sent to the driver at most every :data:`POLL_S`,
    and at its end."""
    last = -float("inf")

    def report(done: int, total: int, errors: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done >= total or now - last >= POLL_S:
            last = now
            activity = {n: tuple(getattr(m, a) for a in ACTIVITY) for n, m in job.summaries.items()}
            send(conn, ("progress", done, errors, activity))

    return report

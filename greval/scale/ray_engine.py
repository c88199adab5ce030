"""``greval run --engine ray``: the pending records of one run, split into shards judged by Ray tasks.

The driver (:func:`greval.runner.driver.arun`) plans the run and records it once (one run id, one snapshot,
one summary), and hands the run's :class:`~greval.runner.job.RunJob` to :func:`judge_on_ray`, which splits the
plan's records into shards; each Ray task (:func:`run_shard`) is sent its :class:`Shard` (the job's parts, the
store by its reference: a SQLite path or a ``postgresql://`` URL, passed through as it is), opens the store,
builds its own chat model from the judge's config, and judges its shard with the runner's own code
(:func:`greval.runner.judging.judge_plan`) at the global concurrency divided by the shards. Nothing here judges.

What holds a distributed run together is the store: verdicts are keyed by content and written idempotently,
and each model judgement is claimed before its call (``Store.claim_many``). A worker killed mid-run loses only
its calls in flight and its last uncommitted group: Ray runs its task again (``max_retries``), the new attempt
finds the finished verdicts in the store, and the dead worker's claims are free at once: every attempt at a
shard holds its claims as one owner, so a retry takes them over on any host (on the same host, the dead pid
frees them too).

One small actor, :class:`Coordinator`: each shard's count (polled by the driver for its one progress bar) and
the latest rate-limit cut (when one worker's limiter cuts on a 429 episode, the others cut too, see
:class:`SharedLimiter`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import Any

from greval._sync import run_sync
from greval.errors import UserError, first_line, option
from greval.runner.job import RunJob
from greval.runner.judging import judge_plan
from greval.runner.options import EngineTotals, ProgressHook
from greval.scale.shards import (
    SAME_EPISODE_S,
    Shard,
    ShardReport,
    SignalledLimiter,
    add_reports,
    shard_options,
    split_plan,
    start_shards,
)
from greval.store.store import Store

__all__ = [
    "SAME_EPISODE_S",
    "Coordinator",
    "Shard",
    "ShardReport",
    "SharedLimiter",
    "connect",
    "coordinator",
    "judge_on_ray",
    "ray_module",
    "run_shard",
    "split_plan",
]

#: Times Ray runs a shard's task again when its worker process died (killed, out of memory, node lost).
MAX_RETRIES = 3

#: How often the driver polls the shards' progress, and a worker reports it (seconds).
POLL_S = 0.2

#: How often a worker asks whether another worker cut its limit on a rate-limit episode (seconds).
SIGNAL_POLL_S = 0.5

#: The logger of Ray's token-authentication set-up (its warning that a local cluster has a token).
AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"

INSTALL_HINT = f"{option('engine')} ray needs Ray: pip install 'greval[ray]'"


def ray_module() -> Any:
    """Ray, imported on first use (a one-line error when it is not installed)."""
    try:
        import ray
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return ray


def connect(address: str | None) -> None:
    """Join the cluster at ``address`` ('auto', ``ray://host:port``, ``host:port``), or start a private local
    one (None) on 127.0.0.1; nothing when this process is connected already (a test's cluster, a Ray job's
    driver). Ray's own log lines and the workers' output stay out of the terminal."""
    ray = ray_module()
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
    if address is None:
        kwargs.update(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
    else:
        kwargs["address"] = address
    # Ray ≥ 2.59 turns token authentication on for a new local cluster (the token in ~/.ray/auth_token; a
    # RAY_AUTH_MODE the user set wins) and warns about it on every start: kept, without the warning.
    said = logging.getLogger(AUTH_LOGGER)
    level = said.level
    said.setLevel(logging.ERROR)
    try:
        ray.init(**kwargs)
    except Exception as exc:  # ConnectionError, RuntimeError, ValueError …: one line, no traceback
        where = "start a local Ray cluster" if address is None else f"connect to Ray at {address}"
        reason = first_line(exc)
        raise UserError(f"cannot {where}: {reason}") from None
    finally:
        said.setLevel(level)


# ------------------------------------------------------------------------------------------- the actor
class Coordinator:
    """What the shards of a run share, per run id: each shard's progress (its latest (done, errors), reported by
    its worker; a retried shard counts again from its start) and the latest rate-limit cut of any worker
    ((epoch, shard, wall time, Retry-After seconds or None)).

    One actor per driver process and cluster, reused by its runs: an actor is a process of its own, and
    starting one costs about a second of CPU, which on a small machine the shards would pay for."""

    def __init__(self) -> None:
        self.progress: dict[str, dict[int, tuple[int, int]]] = {}
        self.pids: dict[str, dict[int, int]] = {}
        self.cuts: dict[str, tuple[int, int, float, float | None]] = {}

    def ready(self) -> bool:
        return True

    def forget(self, run: str) -> None:
        """A run's state, dropped when it ends."""
        self.progress.pop(run, None)
        self.pids.pop(run, None)
        self.cuts.pop(run, None)

    def started(self, run: str, shard: int, pid: int) -> None:
        self.pids.setdefault(run, {})[shard] = pid

    def report(self, run: str, shard: int, done: int, errors: int) -> None:
        self.progress.setdefault(run, {})[shard] = (done, errors)

    def totals(self, run: str) -> tuple[int, int]:
        shards = self.progress.get(run, {}).values()
        return sum(d for d, _ in shards), sum(e for _, e in shards)

    def workers(self, run: str) -> dict[int, int]:
        """Shard -> the pid of the worker process that last started it."""
        return dict(self.pids.get(run, {}))

    def cut(self, run: str, shard: int, retry_after: float | None) -> None:
        epoch = self.cuts.get(run, (0, -1, 0.0, None))[0]
        self.cuts[run] = (epoch + 1, shard, time.time(), retry_after)

    def latest(self, run: str) -> tuple[int, int, float, float | None]:
        return self.cuts.get(run, (0, -1, 0.0, None))


#: The driver's Coordinator actor, per cluster (the driver's node) and Ray job.
_COORDINATORS: dict[str, Any] = {}


def coordinator(ray: Any) -> Any:
    """This driver's Coordinator actor, started (and waited for) on first use: before the shards start, so
    that its start does not take CPU from them."""
    ctx = ray.get_runtime_context()
    job = f"{ctx.get_node_id()}/{ctx.get_job_id()}"  # a new cluster numbers its jobs from 1 again
    if job not in _COORDINATORS:
        actor = ray.remote(num_cpus=0)(Coordinator).remote()
        ray.get(actor.ready.remote())
        _COORDINATORS[job] = actor
    return _COORDINATORS[job]


class SharedLimiter(SignalledLimiter):
    """A worker's :class:`SignalledLimiter` whose signal is the Coordinator actor: its cuts are sent there, and
    :meth:`watch` polls it for the others' (the provider's limit is per key, shared by every worker)."""

    def __init__(self, limit: int, adaptive: bool = True, *, signal: Any, run: str, shard: int) -> None:
        super().__init__(limit, adaptive, shard=shard, tell=lambda after: signal.cut.remote(run, shard, after))
        self.signal = signal  # the Coordinator actor's handle
        self.run = run

    async def sync(self) -> bool:
        """Ask the signal once and follow it (:meth:`follow`)."""
        epoch, shard, at, retry_after = await self.signal.latest.remote(self.run)
        return self.follow(epoch, shard, at, retry_after)

    async def watch(self) -> None:
        """:meth:`sync` every :data:`SIGNAL_POLL_S` until cancelled."""
        while True:
            await asyncio.sleep(SIGNAL_POLL_S)
            await self.sync()


# ------------------------------------------------------------------------------------------- shards
def run_shard(shard: Shard, coord: Any) -> ShardReport:
    """One Ray task: judge a shard of a run with the runner's own code, in this worker process."""
    coord.started.remote(shard.run_id, shard.index, os.getpid())
    return run_sync(_judge_shard(shard, coord))


async def _judge_shard(shard: Shard, coord: Any) -> ShardReport:
    run_id, opts = shard.run_id, shard.options
    limiter = SharedLimiter(opts.concurrency, adaptive=opts.adaptive, signal=coord, run=run_id, shard=shard.index)
    calls = opts.call_options(shard.cfg.samples, limiter)
    last = -float("inf")

    def report(done: int, total: int, errors: int) -> None:
        nonlocal last
        now = time.monotonic()
        if done >= total or now - last >= POLL_S:
            last = now
            coord.report.remote(run_id, shard.index, done, errors)  # one caller's actor calls run in order

    watch = asyncio.ensure_future(limiter.watch())
    try:
        with Store(shard.store_ref) as store:
            job = shard.job(store)
            await judge_plan(job, calls, report)
    finally:
        watch.cancel()
    totals = EngineTotals.of(calls)
    return ShardReport(
        shard=shard.index,
        pid=os.getpid(),
        metrics=list(job.summaries.values()),
        peak=totals.peak,
        rate_limited=totals.rate_limited,
        followed_cuts=limiter.followed,
        notes=totals.notes,
    )


async def judge_on_ray(job: RunJob, progress: ProgressHook | None) -> EngineTotals:
    """The driver's side: shard the job's plan, run the shards as Ray tasks, show their progress as one, and add
    their activity into ``job.summaries``. A shard that fails (after Ray's retries) cancels the others and
    raises (the original error when the task raised one)."""
    ray = ray_module()
    run_id = job.run_id
    assert run_id is not None  # a run's job: recorded before it is judged
    refs, total = _launch(ray, job, run_id)
    if progress:
        progress(0, total, 0)
    reports, failure, errors = await _collect(ray, refs, run_id, total, progress)
    totals = add_reports(job, reports)
    if failure is not None:
        raise failure
    if progress:
        progress(total, total, errors)
    return totals


def _launch(ray: Any, job: RunJob, run_id: str) -> tuple[list[Any], int]:
    """The shards started as Ray tasks, each at the global concurrency divided by the shards, and the judgements
    they hold between them; the records with nothing pending are in no shard, and count as reused."""
    specs, plan, opts = job.specs, job.plan, job.options
    cpus = int(ray.cluster_resources().get("CPU", 1))
    parts = split_plan(plan, specs, opts.shards or max(1, cpus))
    per = shard_options(opts, len(parts))
    total = start_shards(job)
    coord = coordinator(ray)
    task = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(run_shard)
    shards = [Shard(specs, part, job.store.ref, job.cfg, run_id, per, k) for k, part in enumerate(parts)]
    return [task.remote(shard, coord) for shard in shards], total


async def _collect(
    ray: Any, refs: list[Any], run_id: str, total: int, progress: ProgressHook | None
) -> tuple[list[ShardReport], BaseException | None, int]:
    """Every shard's report as it ends, and the run's progress meanwhile: (the reports, the first failure — the
    shards still running are cancelled then —, the errors last shown). An interrupt cancels them all."""
    coord = coordinator(ray)
    shard_of = {ref: k for k, ref in enumerate(refs)}
    reports: list[ShardReport] = []
    failure: BaseException | None = None
    waiting = list(refs)
    shown = (0, 0)  # (done, errors) last shown
    try:
        while waiting and failure is None:
            # Back as soon as a shard ends, else after POLL_S (the driver's loop has nothing else to do).
            ready, waiting = ray.wait(waiting, num_returns=1, timeout=POLL_S)
            for ref in ready:
                try:
                    reports.append(ray.get(ref))
                except Exception as exc:
                    failure = _task_error(ray, exc, shard_of[ref])
                    break
            if progress:
                shown = ray.get(coord.totals.remote(run_id))
                progress(min(shown[0], total), total, shown[1])
            await asyncio.sleep(0)
    except BaseException:  # an interrupt: the tasks stop too (each commits its verdicts and drops its claims)
        for ref in waiting:
            ray.cancel(ref)
        raise
    finally:
        coord.forget.remote(run_id)
    if failure is not None:
        for ref in waiting:
            ray.cancel(ref)
    return reports, failure, shown[1]


def _task_error(ray: Any, exc: Exception, shard: int) -> BaseException:
    """The error a failed shard's task stands for: what the task raised (a UserError, the judge unavailable),
    or one line when its worker died more often than Ray retries."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, BaseException):
        return cause
    reason = first_line(exc)
    return UserError(
        f"shard {shard} failed on Ray ({reason}); its worker died {MAX_RETRIES + 1} time(s). Verdicts already made "
        "are stored: re-run the same command to resume"
    )

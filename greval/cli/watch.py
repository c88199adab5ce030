"""``greval watch``: judge a live system's traces as they come (greval.flows.watch); ``greval watch status``: the
windows so far; ``greval watch page``: the windows as a trend page, each one click from its records."""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape
from rich.table import Table

from greval.cli.bundles import connection_options_for
from greval.cli.common import console, judge_options, out, print_table, store_option
from greval.cli.flags import for_terminal
from greval.errors import Terminated, UserError

if TYPE_CHECKING:
    from greval.flows.watch import PassReport, Watch
    from greval.llm.config import JudgeChoice
    from greval.watch.options import WatchOptions
    from greval.watch.windows import WindowFigures

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


class Duration(click.ParamType):  # type: ignore[type-arg]
    """``5m``, ``30s``, ``1h``, ``1d`` (or seconds) as seconds."""

    name = "DURATION"

    def __init__(self, zero: bool = False) -> None:
        self.zero = zero

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        m = _DURATION.match(str(value))
        if m is None or float(m.group(1)) < 0 or (float(m.group(1)) == 0 and not self.zero):
            self.fail(f"{value!r}: write a duration such as 30s, 5m, 1h or 1d", param, ctx)
        return float(m.group(1)) * _UNITS[m.group(2)]


DURATION = Duration()


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at))


@click.group("watch", invoke_without_command=True)
@click.option("--source", default=None, help="phoenix://HOST:PORT/PROJECT, or a folder where trace exports land.")
@click.option("-s", "--spec", "spec_refs", multiple=True, help="A metric (name or spec file); repeat for several.")
@store_option(default="greval.sqlite")
@click.option("--once", is_flag=True, help="One pass, then exit: 0, or 1 when a window is in alarm (for cron / CI).")
@click.option("--every", type=DURATION, default=None, help="Keep running: a pass every DURATION (e.g. 5m).")
@click.option("--window", "window_s", type=DURATION, default="1h", show_default=True, help="Window length.")
@click.option(
    "--settle",
    "settle_s",
    type=Duration(zero=True),
    default="1m",
    show_default=True,
    help="A window closes (its review share drawn) this long after it ends; a file is read once this old.",
)
@click.option(
    "--sample",
    "rate",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=1.0,
    show_default=True,
    help="The share of matching traces judged, drawn within each stratum of each window.",
)
@click.option("--where", default=None, help="Only traces this holds for, e.g. 'attributes.route == \"search\"'.")
@click.option(
    "--stratify",
    default="system,route,hour",
    show_default=True,
    help="Fields the sample is drawn within (comma-separated; '' for none).",
)
@click.option("--sample-seed", type=int, default=0, show_default=True, help="Seed of the sample's draws.")
@click.option("--rate-cap", type=click.IntRange(min=1), default=None, help="Traces judged per minute at most.")
@click.option("--budget-tokens", type=click.IntRange(min=1), default=None, help="Judge tokens per day (UTC).")
@click.option(
    "--budget-usd",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="US dollars per day (UTC), at the price table's prices.",
)
@click.option(
    "--baseline",
    default="production",
    show_default=True,
    help="What a window is compared with: production (the windows before it) or a window start.",
)
@click.option(
    "--baseline-windows",
    type=click.IntRange(min=1),
    default=12,
    show_default=True,
    help="The production baseline pools at most this many windows before.",
)
@click.option(
    "--review-share",
    type=click.FloatRange(0.0, 1.0, min_open=True),
    default=None,
    help="Each closed window sends this share of its judged units to the review queue.",
)
@click.option(
    "--review-control-share",
    type=click.FloatRange(0.0, 1.0),
    default=0.2,
    show_default=True,
    help="Of each window's review units, the share drawn at random (the rest: most doubtful).",
)
@click.option("--push-review", is_flag=True, help="Send the review queue to Argilla (else it waits in the store).")
@connection_options_for("SPEC-watch")
@judge_options
@click.option(
    "--logprobs",
    is_flag=True,
    help="Ask the judge for token log-probabilities: each verdict's confidence, what orders the review's doubt.",
)
@click.option("-c", "--concurrency", type=click.IntRange(min=1), default=None, help="Model calls in flight at most.")
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Where each page is judged (ray: Ray tasks; needs greval[ray]).",
)
@click.option("--ray-address", default=None, help="With --engine ray: the cluster to join.")
@click.option("--junit", type=click.Path(dir_okay=False), default=None, help="Each pass's checks as JUnit XML.")
@click.option(
    "--page",
    "page_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Write the watch's page into this folder after each pass.",
)
@click.option(
    "--health-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="With --every: serve GET /healthz on 127.0.0.1:PORT (0: a free port, printed).",
)
@click.option("--name", default=None, help="Tells two watches of one source apart.")
@click.option(
    "--page-size",
    type=click.IntRange(1, 1000),
    default=200,
    show_default=True,
    help="Traces read, judged and committed together.",
)
@click.option(
    "--max-spans",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="A trace with more spans is not judged (one line).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=3,
    show_default=True,
    help="With --once: tries again at a source that cannot be reached, with back-off.",
)
@click.option("--bootstrap", "resamples", type=click.IntRange(min=100), default=1000, show_default=True)
@click.pass_context
def watch(ctx: click.Context, /, **kw: Any) -> None:
    """Judge a live system's traces as they come: sampled, judged by each metric's production version, written
    back, a share sent to people, every window compared with its baseline.

    \b
    Reads a Phoenix project (its traces in the order Phoenix stored them) or a folder where trace exports land
    (OTLP JSON, LangSmith, Langfuse, Phoenix), each trace once however often it runs (the cursor is in the store).
    A window whose score or agreement interval lies wholly below its baseline's raises an alarm: a line, the
    exit code of --once, --junit, and a POST to the webhook of your watch.yaml. Docs: docs/watch.md.
      greval watch --source phoenix://localhost:6006/rag -s answer_alignment --store g.sqlite --once
      greval watch --source phoenix://localhost:6006/rag -s answer_alignment --every 5m --window 1h \\
          --sample 0.1 --where 'attributes.route == "search"' --budget-usd 5 --review-share 0.05
    """
    if ctx.invoked_subcommand is not None:
        return
    if kw["source"] is None or not kw["spec_refs"]:
        raise click.UsageError("greval watch needs --source and at least one --spec (or a subcommand: status, page)")
    if kw["once"] == (kw["every"] is not None):
        raise click.UsageError("give --once (one pass) or --every DURATION (keep running)")
    if kw["health_port"] is not None and kw["once"]:
        raise click.UsageError("--health-port goes with --every (a service)")
    opts = _options(kw)
    from greval.store.store import Store

    with Store(kw["store"]) as st:
        sys.exit(_once(st, opts, kw) if kw["once"] else _serve(st, opts, kw))


def _options(kw: dict[str, Any]) -> WatchOptions:
    from greval.runner.options import RunOptions
    from greval.watch.budget import Limits
    from greval.watch.options import WatchOptions
    from greval.watch.review import Routing
    from greval.watch.sampling import Rules
    from greval.watch.windows import Baseline

    strata = tuple(s.strip() for s in kw["stratify"].split(",") if s.strip())
    rules = Rules(rate=kw["rate"], where=kw["where"], strata=strata, seed=kw["sample_seed"])
    rules.expr()  # a mistake in --where is one line now, before anything is read
    routing = None
    if kw["review_share"] is not None:
        routing = Routing(
            share=kw["review_share"],
            control_share=kw["review_control_share"],
            seed=kw["sample_seed"],
            dataset=kw["argilla"].dataset,
            workspace=kw["argilla"].workspace,
        )
    run = RunOptions(
        **({"concurrency": kw["concurrency"]} if kw["concurrency"] else {}),
        engine="ray" if kw["engine"] == "ray" else "local",
        ray_address=kw["ray_address"],
        logprobs=10 if kw["logprobs"] else None,
    )
    return WatchOptions(
        source=kw["source"],
        specs=tuple(kw["spec_refs"]),
        name=kw["name"],
        rules=rules,
        limits=Limits(rate_per_min=kw["rate_cap"], tokens_per_day=kw["budget_tokens"], usd_per_day=kw["budget_usd"]),
        window_s=kw["window_s"],
        settle_s=kw["settle_s"],
        page_size=kw["page_size"],
        max_spans=kw["max_spans"],
        baseline=Baseline.parse(kw["baseline"], kw["baseline_windows"]),
        routing=routing,
        run=run,
        resamples=kw["resamples"],
        junit=Path(kw["junit"]) if kw["junit"] else None,
        page=Path(kw["page_dir"]) if kw["page_dir"] else None,
    )


def _watch(st: Any, opts: WatchOptions, kw: dict[str, Any], stop: threading.Event) -> Watch:
    from greval.flows.watch import Watch

    judge: JudgeChoice = kw["judge"]
    connect = None
    if kw["push_review"]:
        if opts.routing is None:
            raise click.UsageError("--push-review sends the review queue: give --review-share too")
        connect = kw["argilla"].connect
    return Watch(st, opts, judge, connect=connect, stop=stop)


@contextlib.contextmanager
def _stopper(stop: threading.Event) -> Iterator[None]:
    """SIGTERM / Ctrl-C: the first stops the watch after the page it is on (nothing judged twice, nothing lost);
    a second stops it at once (the page is read again on the next start). The handlers before are put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        stop.set()
        console.print("[yellow]stopping:[/] after the page being judged (again to stop at once)", highlight=False)

    ours = [sig for sig in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(sig) is not signal.SIG_IGN]
    before = {sig: signal.signal(sig, handler) for sig in ours}
    try:
        yield
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def _once(st: Any, opts: WatchOptions, kw: dict[str, Any]) -> int:
    """One pass (retried with back-off while the source cannot be reached); the exit code."""
    stop = threading.Event()
    w = _watch(st, opts, kw, stop)
    try:
        with _stopper(stop):
            report = _tried(w, kw["retries"], stop)
    finally:
        w.close()
    if isinstance(report, int):
        return report
    _print_pass(report, w, table=True)
    _write_page(st, w, opts)
    return 1 if report.in_alarm else 0


def _tried(w: Watch, retries: int, stop: threading.Event) -> PassReport | int:
    """A pass, tried ``retries`` more times with back-off while the source cannot be reached; else the exit code
    (2: the source refused, or no such project; 75: still unreachable)."""
    from greval.watch.service import Backoff
    from greval.watch.sources import SourceError

    backoff = Backoff(first=1.0, most=30.0)
    for attempt in range(retries + 1):
        try:
            return w.once()
        except SourceError as exc:
            if not exc.transient or attempt == retries:
                console.print(f"error: {escape(str(exc))}", highlight=False, soft_wrap=True)
                return 75 if exc.transient else 2
            wait = backoff.next()
            console.print(f"{escape(str(exc))}; trying again in {wait:.0f} s", highlight=False, soft_wrap=True)
            if stop.wait(wait):
                return 0
    return 75


def _serve(st: Any, opts: WatchOptions, kw: dict[str, Any]) -> int:
    """Passes every ``--every`` until SIGTERM; the source failing is one line per try, never an exit."""
    from greval.watch.service import HealthServer

    stop = threading.Event()
    w = _watch(st, opts, kw, stop)
    server = HealthServer(w.health, kw["health_port"]).start() if kw["health_port"] is not None else None
    if server is not None:
        console.print(f"health: http://127.0.0.1:{server.port}/healthz", highlight=False)
    every = float(kw["every"])
    console.print(f"{_when(time.time())} watching {escape(w.src.label)} every {every:g} s", highlight=False)

    def on_pass(report: PassReport) -> None:
        if report.read or report.lines or report.alarms or report.reviewed:  # an idle pass says nothing
            _print_pass(report, w, table=False)
            _write_page(st, w, opts)

    def on_error(line: str, wait: float) -> None:
        console.print(f"{_when(time.time())} {escape(line)}; trying again in {wait:.0f} s", highlight=False)

    try:
        with _stopper(stop):
            w.serve(every, on_pass, on_error)
    finally:
        if server is not None:
            server.stop()
        w.close()
    console.print(f"{_when(time.time())} stopped: every page read is committed", highlight=False)
    return 0


def _print_pass(report: PassReport, w: Watch, *, table: bool) -> None:
    """A pass as ``--once`` prints it (results on stdout, notes on stderr) or as a service logs it (stderr, each line
    stamped)."""
    stamp = "" if table else f"{_when(time.time())} "
    to = out if table else console
    held = f", {report.held} held back by the day's budget" if report.held else ""
    back = f", {report.written} written back" if w.src.writes_back else ""
    review = f", {report.reviewed} unit(s) queued for review" if report.reviewed else ""
    stopped = " (stopped)" if report.stopped else ""
    to.print(
        f"{stamp}{report.read} trace(s) read, {report.sampled} chosen, {report.judged} judged{back}{held}{review}"
        + stopped,
        highlight=False,
        soft_wrap=True,
    )
    for line in report.lines:
        console.print(f"{stamp}note: {escape(for_terminal(line))}", highlight=False, soft_wrap=True)
    for line in report.alarms:
        to.print(f"{stamp}[bold red]alarm:[/] {escape(line)}", highlight=False, soft_wrap=True)
    if table and report.windows:
        print_table(windows_table(report.windows), out)
    elif not table:
        for win in report.windows:
            console.print(f"{stamp}{escape(_window_line(win))}", highlight=False, soft_wrap=True)


def _window_line(w: WindowFigures) -> str:
    from greval.report.format import fmt_ci, fmt_number

    agree = f", {w.agreement_figure} {fmt_number(w.agreement.value)} {fmt_ci(w.agreement)}" if w.agreement else ""
    return (
        f"{w.metric} window {w.label}: {w.volume.judged} judged of {w.volume.seen} seen, score "
        f"{fmt_number(w.score.mean)} {fmt_ci(w.score)}{agree}" + (" — IN ALARM" if w.alarms else "")
    )


def windows_table(windows: Sequence[WindowFigures]) -> Table:
    """The windows as a table: volume, score, agreement, spend, alarm."""
    from greval.llm.prices import usd_text
    from greval.report.format import fmt_ci, fmt_number

    table = Table()
    for col in (
        "metric",
        "window (UTC)",
        "seen",
        "chosen",
        "judged",
        "score [95% CI]",
        "agreement [95% CI]",
        "review",
        "tokens",
        "cost",
        "alarm",
    ):
        table.add_column(col)
    for w in windows:
        v = w.volume
        agree = f"{w.agreement_figure} {fmt_number(w.agreement.value)} {fmt_ci(w.agreement)}" if w.agreement else "—"
        table.add_row(
            w.metric,
            w.label,
            str(v.seen),
            str(v.sampled),
            str(v.judged),
            f"{fmt_number(w.score.mean)} {fmt_ci(w.score)}".strip(),
            agree,
            "—" if w.review_units is None else str(w.review_units),
            str(v.tokens),
            "—" if v.usd is None else usd_text(v.usd),
            "ALARM" if w.alarms else "",
        )
    return table


def _write_page(st: Any, w: Watch, opts: WatchOptions) -> None:
    if opts.page is None:
        return
    from greval.report.watch_page import write_page

    index = write_page(st, w.id, opts.page)
    console.print(f"wrote {index}", highlight=False)


def _pick(st: Any, source: str | None, name: str | None) -> dict[str, Any]:
    """The watch a status or page command reads: the store's only one, or the one of ``--source``/``--name``."""
    found = st.watches()
    if source is not None or name is not None:
        found = [
            w
            for w in found
            if (source is None or source in w["source"] or w["config"].get("source") == source)
            and (name is None or w["config"].get("name") == name)
        ]
    if not found:
        raise UserError("no such watch in this store (greval watch --source … records one)")
    if len(found) > 1:
        names = "; ".join(w["source"] for w in found)
        raise UserError(f"this store holds several watches ({names}): choose one with --source or --name")
    chosen: dict[str, Any] = found[0]
    return chosen


@watch.command("status")
@store_option(must_exist=True)
@click.option("--source", default=None, help="The watch's source (when the store holds several).")
@click.option("--name", default=None, help="The watch's name (when the store holds several).")
@click.option("--last", type=click.IntRange(min=1), default=24, show_default=True, help="Windows per metric.")
def status_cmd(store: str, source: str | None, name: str | None, last: int) -> None:
    """The watch's latest windows per metric: volume, score, agreement, spend, alarms (no call, no pass)."""
    from greval.store.store import Store
    from greval.watch.windows import WindowFigures

    with Store(store) as st:
        w = _pick(st, source, name)
        rows = []
        for metric in st.watch_metrics(w["watch_id"]):
            for r in st.watch_windows(w["watch_id"], metric, last=last):
                if r.figures:
                    rows.append(WindowFigures.model_validate(r.figures))
    out.print(f"watch of {w['source']}: {len(rows)} window(s)", highlight=False)
    if rows:
        print_table(windows_table(rows), out)


@watch.command("page")
@store_option(must_exist=True)
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), required=True, help="The page's folder.")
@click.option("--source", default=None, help="The watch's source (when the store holds several).")
@click.option("--name", default=None, help="The watch's name (when the store holds several).")
def page_cmd(store: str, out_dir: str, source: str | None, name: str | None) -> None:
    """Write the watch's page: each metric's windows as a trend (score, agreement, volume, cost), alarms marked,
    each window one click from its records in the explorer."""
    from greval.report.watch_page import write_page
    from greval.store.store import Store

    with Store(store) as st:
        w = _pick(st, source, name)
        index = write_page(st, w["watch_id"], Path(out_dir))
    console.print(f"wrote {index}", highlight=False)

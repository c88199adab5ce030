"""What the commands share: the consoles and what fits them (tables with every word whole, prose wrapped
between words, commands folded between arguments), the judge options, ``--map`` parsing, the progress bar, the
run summary, and the exit for Ctrl-C / SIGTERM."""

from __future__ import annotations

import functools
import os
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape

from greval.cli.flags import error_text, for_terminal
from greval.dataset.limits import ReadLimits, parse_size, size_text
from greval.errors import UserError
from greval.progress import TerminalProgress
from greval.report import layout
from greval.report.layout import wrap_plain as wrap_plain  # the CLI's modules import it from here

if TYPE_CHECKING:
    from rich.table import Table
    from rich.text import Text

    from greval.llm.config import JudgeChoice


def _console(stderr: bool) -> Console:
    """The width is looked up at each print: a terminal's own (stdin's when the output is piped into one, as
    with ``| less``), else COLUMNS, else 80 (a file, CI). Nothing printed is cut or wrapped by rich itself
    (soft wrap): tables fit with every word whole (:func:`print_table`), prose that must fit is wrapped between
    words (:func:`say`)."""
    return Console(stderr=stderr, soft_wrap=True)


console = _console(stderr=True)
out = _console(stderr=False)


def say(text: str | Text, to: Console | None = None, hang: int = 0) -> None:
    """Rich markup wrapped between words at the console's width (stderr by default; greval.report.layout)."""
    layout.say(text, to or console, hang)


def print_table(table: Table, to: Console | None = None) -> None:
    """A table with every word whole at the console's width (stdout by default; greval.report.layout)."""
    layout.print_table(table, to or out)


def say_judge_build() -> None:
    """Before the embedded judge's first build starts: how long it takes and how to avoid it."""
    from greval.llm.local import BUILD_ESTIMATE
    from greval.llm.local.engine import why_build

    say(
        f"[yellow]note:[/] {escape(why_build())}, and the embedded judge's llama-server is not built yet: it is "
        f"built now, once (a C++ build, {BUILD_ESTIMATE}; Ctrl-C keeps the work done for the next time). To skip "
        "it, name a judge: --judge openai:gpt-4o-mini with OPENAI_API_KEY set, or any OpenAI-compatible server "
        "with --judge openai:MODEL --base-url URL.",
        console,
        hang=6,
    )


def command_lines(argv: Sequence[str], width: int, indent: str = "  ") -> list[str]:
    """A command to copy into a shell, as one line when it fits ``width``, else folded between its arguments
    with ``\\`` continuations (an option stays beside its value; a path longer than the width stays whole)."""
    import shlex

    words = [shlex.quote(a) for a in argv]
    groups: list[str] = []
    for w in words:  # "--store PATH" stays together
        if groups and groups[-1].startswith("-") and " " not in groups[-1] and not w.startswith("-"):
            groups[-1] += " " + w
        else:
            groups.append(w)
    if len(indent) + len(" ".join(words)) <= width:
        return [indent + " ".join(words)]
    hang = indent + "    "
    # An option and its value that do not fit one line together go on two (a long path then stands alone).
    parts = [p for g in groups for p in (g.split(" ", 1) if len(hang) + len(g) + 2 > width else [g])]
    lines, cur = [], indent + parts[0]
    for g in parts[1:]:
        if len(cur) + 1 + len(g) + 2 > width:
            lines.append(cur + " \\")
            cur = hang + g
        else:
            cur += " " + g
    return [*lines, cur]


def print_error(message: str) -> None:
    """The one way a user's mistake reaches the terminal: ``error: MESSAGE``, one line on stderr, the message
    printed as it is (never read as rich markup: it may quote the user's brackets)."""
    text = escape(for_terminal(message))
    console.print(f"[bold red]error:[/] {text}", highlight=False, soft_wrap=True, emoji=False)


def notice(text: str) -> None:
    """A message of the judge layer (greval.llm.config.Notify: plain text), printed as it is, wrapped between
    words at the console's width."""
    say(escape(for_terminal(text)), console, hang=2)


def fail(message: str | Exception, exit_code: int | None = None) -> NoReturn:
    """Print a user error and exit: a UserError's own code (2 unless it says otherwise), no traceback."""
    code = exit_code if exit_code is not None else (message.exit_code if isinstance(message, UserError) else 2)
    print_error(error_text(message))
    sys.exit(code)


#: Flags whose value is a secret (--api-key …): masked wherever a command line is printed.
_SECRET_FLAG = re.compile(r"--[\w-]*(key|password|token|secret)s?", re.IGNORECASE)


def command_line(args: Sequence[str]) -> str:
    """greval's arguments as a command the user can type again: greval's command first, then each argument
    quoted for the shell, with secrets masked (a URL's password, the value of an --api-key-like flag)."""
    from greval.store.backend import display
    from greval.workflows import greval_command

    shown: list[str] = []
    secret = False
    for arg in args:
        flag, eq, _ = arg.partition("=")
        if secret:
            arg = "***"
        elif eq and _SECRET_FLAG.fullmatch(flag):
            arg = f"{flag}=***"
        else:
            arg = re.sub(r"(://[^/@:\s]+):[^@/\s]+@", r"\1:***@", display(arg))
        secret = not secret and not eq and bool(_SECRET_FLAG.fullmatch(arg))
        shown.append(arg)
    return " ".join([greval_command(), *(shlex.quote(a) for a in shown)])


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C: what runs stops cleanly and records that it was interrupted."""


def on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def interrupted_exit(exc: BaseException, message: str) -> NoReturn:
    """One line, then the shell's code for the signal (130 for Ctrl-C, 143 for SIGTERM)."""
    console.print(f"[yellow]interrupted:[/] {message}", highlight=False)
    sys.exit(143 if isinstance(exc, Terminated) else 130)


class ByteSize(click.ParamType):  # type: ignore[type-arg]
    """A size in bytes: ``1048576``, ``64k``, ``16M``, ``2G`` (binary units)."""

    name = "SIZE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            size = parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if size < 1:
            self.fail(f"{value!r}: give at least 1 byte", param, ctx)
        return size


def read_limit_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The limits of reading data files (:class:`ReadLimits`), the same flags on every command that reads
    one (greval.cli.flags names them in messages), handed to the command as one ``limits: ReadLimits``."""
    d = ReadLimits()
    opts = [
        click.option(
            "--max-columns",
            type=click.IntRange(min=1),
            default=d.max_columns,
            show_default=True,
            metavar="N",
            help="Read no data file with more columns (CSV / Parquet header, fields of a JSON object or table).",
        ),
        click.option(
            "--max-line-size",
            type=ByteSize(),
            default=d.max_line_bytes,
            show_default=size_text(d.max_line_bytes),
            help="Read no JSONL / CSV / TSV line longer than this (bytes, or with k / M / G).",
        ),
        click.option(
            "--max-decompressed",
            type=ByteSize(),
            default=d.max_decompressed_bytes,
            show_default=size_text(d.max_decompressed_bytes),
            help="Read no .gz file (or Parquet column data) that expands to more than this.",
        ),
    ]

    @functools.wraps(f)
    def command(*args: Any, max_columns: int, max_line_size: int, max_decompressed: int, **kwargs: Any) -> Any:
        limits = ReadLimits(
            max_columns=max_columns, max_line_bytes=max_line_size, max_decompressed_bytes=max_decompressed
        )
        return f(*args, limits=limits, **kwargs)

    wrapped: Callable[..., Any] = command
    for o in reversed(opts):
        wrapped = o(wrapped)
    return wrapped


def parse_map(values: Sequence[str]) -> dict[str, str]:
    mapping = {}
    for v in values:
        field, sep, column = v.partition("=")
        if not sep or not field or not column:
            raise UserError(f"--map {v!r}: write FIELD=COLUMN, e.g. --map question=query")
        mapping[field.strip()] = column.strip()
    return mapping


def call_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """How each model call is made (``method``, ``max_attempts``): the same flags wherever a command judges."""
    f = click.option(
        "--max-attempts", type=int, default=6, show_default=True, help="Tries per call on 429/5xx/timeouts."
    )(f)
    return click.option(
        "--method",
        type=click.Choice(["auto", "json_schema", "function_calling", "json_mode"]),
        default="auto",
        show_default=True,
        help="Structured-output method (auto falls back when refused).",
    )(f)


def judge_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The flags that choose and parameterise the judge model (shared by every command that judges), handed
    to the command as one ``judge: JudgeChoice`` built here, once."""
    opts = [
        click.option(
            "--judge",
            "judge_ref",
            envvar="GREVAL_JUDGE",
            default=None,
            show_envvar=True,
            help="provider:model, e.g. openai:gpt-4o-mini; any OpenAI-compatible server with --base-url; "
            "gguf:/path/model.gguf or 'local' for the embedded llama.cpp judge.",
        ),
        click.option(
            "--base-url",
            envvar="OPENAI_BASE_URL",
            show_envvar=True,
            help="OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama, LiteLLM …). Key: OPENAI_API_KEY.",
        ),
        click.option("--temperature", type=float, default=None, help="Sampling temperature [spec, else 0]."),
        click.option("--max-tokens", type=int, default=None, help="Cap on the judge's answer length."),
        click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per request."),
        click.option("--samples", type=int, default=None, help="Judge samples per item; majority verdict [1]."),
        click.option("--seed", type=int, default=None, help="Sampling seed, for servers that honour it."),
    ]

    @functools.wraps(f)
    def command(
        *args: Any,
        judge_ref: str | None,
        base_url: str | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float,
        samples: int | None,
        seed: int | None,
        **kwargs: Any,
    ) -> Any:
        from greval.llm.config import JudgeChoice

        judge = JudgeChoice(
            ref=judge_ref,
            base_url=base_url,
            temperature=temperature,
            max_tokens=max_tokens,
            timeout=timeout,
            samples=samples,
            seed=seed,
        )
        return f(*args, judge=judge, **kwargs)

    wrapped: Callable[..., Any] = command
    for o in reversed(opts):
        wrapped = o(wrapped)
    return wrapped


def judge_args(judge: JudgeChoice, ref: str | None = None) -> list[str]:
    """The flags of :func:`judge_options` that choose ``judge`` again, for a printed command (``ref``: the
    judge reference that was used, when the flags left it to the spec or the default)."""
    from greval.llm.config import DEFAULT_TIMEOUT

    chosen = ref or judge.ref
    args = ["--judge", chosen] if chosen else []
    for flag, value in (
        ("--base-url", judge.base_url),
        ("--temperature", judge.temperature),
        ("--max-tokens", judge.max_tokens),
        ("--samples", judge.samples),
        ("--seed", judge.seed),
        ("--timeout", None if judge.timeout == DEFAULT_TIMEOUT else judge.timeout),
    ):
        if value is not None:
            args += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return args


class ProgressBar(TerminalProgress):
    """The run's progress bar on the command line's stderr console (greval.progress draws it)."""

    def __init__(self, quiet: bool) -> None:
        super().__init__(console, quiet)


def print_summary(summary: Any, retry: Sequence[str] | None = None) -> None:
    """Per metric: this run's work, then the figures of every record it was given (the same figures
    ``greval report`` and ``greval results`` show), and a note for everything that was not scored.
    ``retry``: the command that judges failed records again, printed under their note as it is to be typed."""
    from greval.report.format import fmt_number
    from greval.store.results import metric_notes, not_scored

    dup = summary.records - summary.distinct_contents
    from rich.table import Table

    table = Table(
        title=f"run {summary.run_id} — {summary.records} records"
        + (f" ({dup} with the same content as another: judged once)" if dup > 0 else "")
        + f", judge {summary.judge}, {summary.calls} calls in {summary.seconds:.1f}s"
    )
    for col in ("metric", "judged", "reused", "ok", "not scored", "distribution", "score", "tokens in · cached · out"):
        table.add_column(col)
    for m in summary.metrics:
        dist = "  ".join(f"{k}:{v}" for k, v in m.distribution.items())
        unscored = not_scored(m.model_dump())
        items = f" ({m.items_ok}/{m.items} items)" if m.items is not None else ""
        table.add_row(
            m.spec,
            str(m.judged),
            str(m.reused),
            f"{m.ok}{items}",
            unscored or "—",
            dist,
            fmt_number(m.mean_score),
            tokens_text(m.tokens_in, m.tokens_cached, m.tokens_out),
        )
    print_table(table)
    for m in summary.metrics:
        failed = m.failed or m.partial
        for note in metric_notes(m, "this judges them again:") if retry and failed else metric_notes(m):
            say(f"[yellow]note:[/] {escape(for_terminal(note))}", console, hang=6)
        if retry and failed:
            for line in command_lines(retry, console.width, indent="      "):
                console.print(line, highlight=False, markup=False)
    if summary.calls:
        print_cost(summary.cost)


def tokens_text(tokens_in: int, tokens_cached: int, tokens_out: int) -> str:
    """Prompt tokens, of them read from the provider's cache, and completion tokens, as the CLI shows them."""
    return f"{tokens_in:,} · {tokens_cached:,} · {tokens_out:,}"


def print_cost(cost: Any) -> None:
    """The line under a run's summary: what its calls cost at the price table's prices (a price table that
    cannot be read is a note: the run itself is done and stored)."""
    from greval.llm.prices import cost_text, prices_path

    try:
        text = cost_text(cost())
    except UserError as exc:
        say(f"[yellow]note:[/] no cost shown: {escape(str(exc))}", console, hang=6)
        return
    say(escape(f"cost of this run's calls: {text} ({price_source(prices_path())})"), out)


def price_source(path: Any) -> str:
    """Where the prices of a cost come from, and where to put one's own."""
    if path.is_file():
        return f"prices from {path} over greval's list"
    return "greval's list prices; yours go in $GREVAL_PRICES or prices.yaml in greval's data directory"


class StoreRef(click.ParamType):  # type: ignore[type-arg]
    """A store: a SQLite file's path or a PostgreSQL URL (``postgresql://…``), as a str. ``must_exist``: a
    path must name an existing file (a URL is checked by connecting)."""

    name = "STORE"

    def __init__(self, must_exist: bool = False) -> None:
        self.must_exist = must_exist

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from greval.store.backend import exists, is_url

        text = str(value)
        if not is_url(text) and self.must_exist and not exists(text):
            self.fail(f"{text}: no such store file", param, ctx)
        if not is_url(text) and os.path.isdir(text):
            self.fail(f"{text} is a directory, not a store file", param, ctx)
        return text


STORE_HELP = (
    "The store: a SQLite file, or a shared PostgreSQL database as postgresql://USER@HOST/DB "
    "(password from PGPASSWORD or ~/.pgpass, never in the URL on a shared machine). Env: GREVAL_STORE."
)


def store_option(
    *,
    default: str | None = "greval.sqlite",
    must_exist: bool = False,
    required: bool = False,
    dest: str = "store",
    help: str = "",
    env: bool = True,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The one ``--store`` option: a path or URL (:class:`StoreRef`), falling back to ``$GREVAL_STORE``
    (``env``; not where leaving the option out means something else: a temporary store, a labels file)."""
    # Click ≥ 8.3 takes an explicit default=None as a value that satisfies required=True: leave it out then.
    given: dict[str, Any] = {"default": default} if default is not None or not required else {}
    return click.option(
        "--store",
        dest,
        type=StoreRef(must_exist),
        **given,
        required=required,
        show_default=default is not None,
        envvar="GREVAL_STORE" if env else None,
        help=(help + " " if help else "") + (STORE_HELP if env else STORE_HELP.removesuffix(" Env: GREVAL_STORE.")),
    )


#: greval agreement's and greval gate's (whose agreement conditions are the same report's).
INVALID_OPTION = click.option(
    "--invalid",
    default="as-wrong",
    show_default=True,
    help="a missing / unparseable judge answer: as-wrong (never matches; an <invalid> confusion column), drop "
    "(the item leaves both sides), opposite (two labels: the label people did not choose, counted as that "
    "label), or label:X (counts as X). See docs/agreement.md for how each moves accuracy and macro F1",
)


def store_wait_option(then: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--store-wait SECONDS`` (``GREVAL_STORE_WAIT``): ``then`` says what happens when the wait is over."""
    from greval.store.backend import RECONNECT_WAIT_S

    return click.option(
        "--store-wait",
        type=click.FloatRange(min=0),
        default=RECONNECT_WAIT_S,
        show_default=True,
        envvar="GREVAL_STORE_WAIT",
        show_envvar=True,
        metavar="SECONDS",
        help=f"How long to wait for a PostgreSQL store that stops answering (a restart, a failover), {then}",
    )

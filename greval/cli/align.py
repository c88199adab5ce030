"""``greval align``: from people's labels to a better judge, measured on labels the search never read."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from greval.cli.bundle import bundle, gathered
from greval.cli.bundles import RunFlags
from greval.cli.common import call_options, console, out, store_option

if TYPE_CHECKING:
    from greval.align.models import AlignEvent, AlignOptions, AlignPlan, AlignResult, Cost
    from greval.llm.config import JudgeChoice
    from greval.store.versions import Promotion

OBJECTIVES = ["kappa", "weighted_kappa", "accuracy", "macro_f1", "spearman", "mae"]


def _shots(value: str) -> tuple[int, ...]:
    try:
        shots = tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: give examples per label as numbers, e.g. 1,2") from None
    if any(n < 1 or n > 10 for n in shots):
        raise click.BadParameter(f"{value!r}: each number of examples per label is 1 to 10")
    return shots


class RoundBar:
    """One progress bar per round, fed by the judging's cumulative progress; candidates print above it."""

    def __init__(self, quiet: bool) -> None:
        import os

        self.quiet = quiet or (not console.is_terminal and os.environ.get("GREVAL_PROGRESS") != "1")
        self.bar: Any = None
        self.task: Any = None
        self.seen = (0, 0)
        self.offset = (0, 0)

    def __call__(self, event: AlignEvent) -> None:
        from greval.align.models import AlignNote, CandidateScored, Judging, RoundStarted

        if isinstance(event, RoundStarted):
            self._start(event.round, event.candidates)
        elif isinstance(event, Judging):
            self.seen = (event.done, event.total)
            if self.task is not None:
                done, total = event.done - self.offset[0], event.total - self.offset[1]
                self.bar.update(self.task, completed=done, total=max(total, 1))
        elif isinstance(event, CandidateScored):
            c = event.candidate
            score = "—" if c.cv is None else f"{c.cv:.3f}"
            note = c.note if c.note is None or len(c.note) <= 160 else c.note[:157] + "…"  # whole on the page
            why = f" ({escape(note)})" if c.status != "scored" and note else ""
            console.print(
                f"  round {c.round} · {escape(c.description)}: CV {score} {escape(f'[{c.status}]')}{why} — "
                f"{c.cost.calls} calls",
                highlight=False,
            )
        elif isinstance(event, AlignNote):
            console.print(f"[yellow]note:[/] {escape(event.text)}", highlight=False)

    def _start(self, round_no: int, candidates: int) -> None:
        self.stop()
        what = "the current spec" if round_no == 0 else f"{candidates} candidate(s)"
        console.print(f"[bold]round {round_no}[/]: {what}", highlight=False)
        if self.quiet:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.offset = self.seen
        self.bar = Progress(
            TextColumn(f"[bold]round {round_no}: judging"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self.bar.start()
        self.task = self.bar.add_task("judging", total=1)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
        self.bar = self.task = None


def _amount(c: Cost) -> str:
    """Calls and tokens as align shows them: the total, then prompt (of it cached) and answer tokens."""
    split = f"{c.tokens_in:,} prompt, {c.tokens_cached:,} of them cached; {c.tokens_out:,} answer"
    return f"{c.calls} calls, ~{c.tokens:,} tokens ({split})"


def _print_plan(p: AlignPlan) -> None:
    from greval.align.ledger import describe
    from greval.align.models import REPORT_NAME
    from greval.align.price import usd_line

    s = p.split
    rows = [
        ("spec", f"{p.spec}@{p.version}"),
        ("judge / optimizer", f"{p.judge} / {p.optimizer}"),
        ("objective", REPORT_NAME[p.objective]),
        ("search part", f"{s.units_search} units of {s.records_search} records, folds of {list(s.fold_units)} units"),
        ("test part", f"{s.units_test} units of {s.records_test} records (read once, by the decision)"),
        (
            "candidates",
            f"{p.first_round} in round 1, at most {p.later_rounds} in each of {p.rounds - 1} later round(s)",
        ),
        ("round-1 candidate, mean", _amount(p.per_candidate)),
        ("current spec (missing)", _amount(p.current)),
        ("likely", f"{_amount(p.estimate)}, {usd_line(p.usd, p.prices)} (round 1 and the decision)"),
        (
            "each later round",
            f"+ {_amount(p.later_round)}, {usd_line(p.usd_later_round, p.prices)} (runs only when the one before "
            "improved)",
        ),
        ("held for the decision", _amount(p.decision) + " (upper bound, reserved from the budget)"),
        ("everything, at most", f"{_amount(p.at_most)}, {usd_line(p.usd_at_most, p.prices)} (every round in full)"),
        ("prices", p.prices),
        (
            "budget",
            f"{p.budget_calls if p.budget_calls is not None else 'no limit on'} calls, "
            f"{p.budget_tokens if p.budget_tokens is not None else 'no limit on'} tokens",
        ),
    ]
    for k, v in rows:
        out.print(f"{k:>24}: {escape(v)}", highlight=False)
    if p.ledger is not None:
        for line in describe(p.ledger, planned=True):
            out.print(escape(line), highlight=False)
    for note in p.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    out.print("dry run: no model call made", highlight=False)


def _print_result(r: AlignResult, store: str) -> None:
    from greval.align.decide import table_line
    from greval.align.ledger import describe
    from greval.align.models import REPORT_NAME
    from greval.report.format import fmt_number

    console.print(f"search stopped: {escape(r.stopped)}", highlight=False)
    best = f"{r.best.description} (CV {REPORT_NAME[r.objective]} {r.best.cv:.3f})" if r.best.cv is not None else "—"
    out.print(f"best candidate: {escape(best)}", highlight=False)
    d = r.decision.difference
    if d is not None:
        old, new = fmt_number(d.old), fmt_number(d.new)
        out.print(f"test part: {REPORT_NAME[r.objective]} {old} (current) → {new} (winner)", highlight=False)
        for t in r.decision.tables:
            out.print(f"  {escape(table_line(t))}", highlight=False)
    colour = "green" if r.adopted else "yellow"
    out.print(f"[bold {colour}]{escape(r.decision.message)}[/]", highlight=False)
    c = r.decision.ceiling
    if c is not None and c.value is not None:
        out.print(
            f"human ceiling on the test part (people's mean pairwise {c.metric}): {fmt_number(c.value)}",
            highlight=False,
        )
    if r.diff:
        out.print(escape(r.diff), highlight=False, end="")
    from greval.align.price import usd_line

    money = usd_line(r.usd, r.prices) + (f" ({r.prices})" if r.usd is not None and r.usd.usd is not None else "")
    spent = f"spent {_amount(r.spent).replace('~', '')}, {money}"
    limits = [
        f"{r.budget_calls} calls" if r.budget_calls is not None else "",
        f"{r.budget_tokens} tokens" if r.budget_tokens is not None else "",
    ]
    limit = ", ".join(x for x in limits if x)
    out.print(spent + (f" (budget {limit})" if limit else ""), highlight=False)
    if r.ledger is not None:
        for line in describe(r.ledger):
            out.print(escape(line), highlight=False)
    for what, path in r.files.items():
        out.print(f"wrote {what}: {escape(path)}", highlight=False)
    if r.new_hash is not None:
        where = (
            "the test part, the only units the new version judged"
            if not r.new_search_units
            else f"the test part and {r.new_search_units} search units it judged as a fold's instance (only the "
            "test part's figures above are free of the search)"
        )
        out.print(
            f"both versions side by side, on {where}: greval agreement --store {escape(store)} "
            f"--spec {r.spec}@{r.old_hash} --spec {r.spec}@{r.new_hash} --invalid drop",
            highlight=False,
        )
    for note in r.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)


def _print_promoted(r: AlignResult, promoted: Promotion | None, path: Path) -> None:
    """What --adopt did: the production version every reader now reads, or why nothing changed."""
    if promoted is not None:
        out.print(
            f"promoted {r.spec}@{promoted.spec_hash} to production ({promoted.note}): gate, agreement, report, "
            f"results, annotate and review read it now; judge the dataset with it (its YAML: {path})",
            highlight=False,
        )
    elif r.adopted:
        out.print(f"{r.spec}@{r.new_hash} is production already", highlight=False)
    else:
        out.print(f"nothing promoted: {r.spec}@{r.old_hash} stays production", highlight=False)


@dataclass(frozen=True)
class JudgeFlags:
    """The judge whose spec is aligned (default: the one whose verdicts are stored) and the optimizer model
    that proposes rewrites (default: the judge)."""

    judge_ref: str | None
    base_url: str | None
    temperature: float | None
    max_tokens: int | None
    timeout: float
    samples: int | None
    judge_seed: int | None
    optimizer_judge: str | None
    optimizer_base_url: str | None

    def judge(self) -> JudgeChoice:
        from greval.llm.config import JudgeChoice

        return JudgeChoice(
            ref=self.judge_ref,
            base_url=self.base_url,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            timeout=self.timeout,
            samples=self.samples,
            seed=self.judge_seed,
        )

    def optimizer(self) -> JudgeChoice:
        from greval.llm.config import JudgeChoice

        return JudgeChoice(
            ref=self.optimizer_judge, base_url=self.optimizer_base_url or self.base_url, timeout=self.timeout
        )


@dataclass(frozen=True)
class SearchFlags:
    """How to search and decide, as :class:`greval.align.models.AlignOptions` (--shots is checked there)."""

    objective: str | None
    folds: int
    test_share: float
    rounds: int
    beam: int
    rewrites: int
    shots: str
    example_tokens: int
    no_label_order: bool
    budget_calls: int | None
    budget_tokens: int | None
    seed: int
    min_gain: float
    resamples: int
    reuse_test: bool

    def options(self) -> AlignOptions:
        from greval.align.models import AlignOptions

        return AlignOptions(
            objective=self.objective,
            folds=self.folds,
            test_share=self.test_share,
            seed=self.seed,
            min_gain=self.min_gain,
            rounds=self.rounds,
            beam=self.beam,
            rewrites=self.rewrites,
            shots=_shots(self.shots),
            example_tokens=self.example_tokens,
            label_order=not self.no_label_order,
            budget_calls=self.budget_calls,
            budget_tokens=self.budget_tokens,
            resamples=self.resamples,
            reuse_test=self.reuse_test,
        )


@dataclass(frozen=True)
class OutputFlags:
    """What align writes (the adopted spec, its evidence and page), or only the plan (--dry-run)."""

    out: Path | None
    html: Path | None
    dry_run: bool
    adopt: bool

    def check(self) -> None:
        """--out / --html into a folder that does not exist: one line now, not a traceback after the whole
        search (the files are written once it ends)."""
        from greval.errors import UserError

        for flag, path in (("--out", self.out), ("--html", self.html)):
            if path is not None and not path.parent.is_dir():
                raise UserError(
                    f"{flag} {path}: the folder {path.parent} does not exist; create it, or write elsewhere"
                )

    def paths(self, name: str) -> tuple[Path, Path]:
        """The spec's YAML and the align page: as given, else NAME.aligned.yaml and NAME.align.html beside it."""
        path = self.out or Path(f"{name}.aligned.yaml")
        return path, self.html or path.with_name(f"{name}.align.html")


JUDGES = bundle(
    "judges",
    JudgeFlags,
    click.option("--judge", "judge_ref", default=None, help="The judge [the one whose verdicts are stored]."),
    click.option(
        "--base-url", envvar="OPENAI_BASE_URL", show_envvar=True, help="OpenAI-compatible endpoint of the judge."
    ),
    click.option("--temperature", type=float, default=None, help="The judge's temperature [spec, else 0]."),
    click.option("--max-tokens", type=int, default=None, help="Cap on the judge's answer length."),
    click.option("--timeout", type=float, default=120.0, show_default=True, help="Seconds per request."),
    click.option("--samples", type=int, default=None, help="Judge samples per item [1]."),
    click.option("--judge-seed", type=int, default=None, help="The judge's sampling seed, for servers that honour it."),
    click.option("--optimizer-judge", default=None, help="A (stronger) model to propose rewrites [the judge]."),
    click.option("--optimizer-base-url", default=None, help="OpenAI-compatible endpoint of --optimizer-judge."),
)

SEARCH = bundle(
    "search",
    SearchFlags,
    click.option("--objective", type=click.Choice(OBJECTIVES), default=None, help="[kappa for labels, mae for values]"),
    click.option("--folds", type=click.IntRange(2, 20), default=5, show_default=True, help="Folds of the search part."),
    click.option(
        "--test-share",
        type=click.FloatRange(0, 1, min_open=True, max_open=True),
        default=0.3,
        show_default=True,
        help="Share of labelled records held out for the decision.",
    ),
    click.option("--rounds", type=click.IntRange(1, 10), default=3, show_default=True, help="Search rounds, at most."),
    click.option("--beam", type=click.IntRange(1, 10), default=2, show_default=True, help="Candidates kept per round."),
    click.option(
        "--rewrites",
        type=click.IntRange(0, 10),
        default=2,
        show_default=True,
        help="Rewrite proposals per parent and round (0: no rewrites).",
    ),
    click.option(
        "--shots", default="1,2", show_default=True, help="Few-shot candidates: examples per label, e.g. 1,2."
    ),
    click.option(
        "--example-tokens",
        type=click.IntRange(min=0),
        default=1500,
        show_default=True,
        help="Prompt tokens the few-shot examples may take.",
    ),
    click.option("--no-label-order", is_flag=True, help="Do not try the labels in reverse order."),
    click.option(
        "--budget-calls", type=click.IntRange(min=0), default=None, help="Model calls align may make, at most."
    ),
    click.option("--budget-tokens", type=click.IntRange(min=0), default=None, help="Tokens align may spend, at most."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seeds the split, the folds and every draw."),
    click.option(
        "--min-gain",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        help="Adopt only when the gain's CI lower bound exceeds this.",
    ),
    click.option(
        "--bootstrap",
        "resamples",
        type=click.IntRange(min=100),
        default=1000,
        show_default=True,
        help="Paired bootstrap resamples of the decision.",
    ),
    click.option(
        "--reuse-test",
        is_flag=True,
        help="Draw the test part from every labelled record, also those an earlier decision read or the version "
        "in use shows as examples (said on the page and in the evidence).",
    ),
)

OUTPUTS = bundle(
    "outputs",
    OutputFlags,
    click.option(
        "--out",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The adopted spec's YAML [NAME.aligned.yaml]; the evidence goes beside it (.evidence.json).",
    ),
    click.option(
        "--html",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="The align page [NAME.align.html beside --out].",
    ),
    click.option("--dry-run", is_flag=True, help="Print the plan and the estimated calls and tokens; call nothing."),
    click.option(
        "--adopt",
        is_flag=True,
        help="When adopted, also promote the new version: every reader then reads it (greval spec promote).",
    ),
)


@click.command("align")
@store_option(must_exist=True, help="The store with the spec's verdicts and people's labels.")
@click.option("--spec", "spec_ref", required=True, help="The metric: NAME, or NAME@HASH for one version.")
@click.option("--dataset", "datasets", multiple=True, help="Human-label datasets to use (repeatable; default all).")
@click.option(
    "--gold",
    default=None,
    metavar="METHOD|ANNOTATOR",
    help="Each unit's label is this gold, as greval agreement --gold reads it, instead of people's majority: "
    "majority, dawid-skene, mace, adjudicated:NAME[,NAME] or an annotator's name.",
)
@JUDGES
@SEARCH
@OUTPUTS
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Model calls in flight [8; the embedded judge: its parallel slots].",
)
@call_options
@click.option("--quiet", is_flag=True, help="No progress bars.")
@gathered("run", RunFlags)
def align_cmd(
    store: str,
    spec_ref: str,
    datasets: tuple[str, ...],
    gold: str | None,
    judges: JudgeFlags,
    search: SearchFlags,
    outputs: OutputFlags,
    run: RunFlags,
    quiet: bool,
) -> None:
    """Improve a spec from people's labels; adopt it only if it proves better on labels the search never read.

    \b
    Reads the spec's stored verdicts and people's labels, splits the labelled records once into a search part
    and a test part, searches candidate versions (few-shot examples, rewrites by an optimizer model, the
    labels' order) by cross-validation on the search part, and compares the best with the current spec once on
    the test part: adopted only when the paired bootstrap CI of the gain lies above --min-gain. Every judgement
    is stored: Ctrl-C and the same command resume; a second run makes no call.

    \b
    Examples:
      greval align --store greval.sqlite --spec attribution --dry-run
      greval align --store greval.sqlite --spec attribution --judge openai:gpt-4o-mini --budget-calls 2000
      greval align --store s.sqlite --spec faithfulness --optimizer-judge openai:gpt-4o --objective accuracy
    """
    from greval._sync import run_sync
    from greval.agreement.models import GoldChoice
    from greval.align.entry import Target, aalign, plan, run_options
    from greval.align.ledger import promote_adopted
    from greval.align.output import write_outputs
    from greval.store.store import Store

    outputs.check()
    options = search.options()
    judge, optimizer = judges.judge(), judges.optimizer()
    target = Target(spec_ref, datasets, GoldChoice.parse(gold) if gold is not None else None)
    with Store(store) as st:
        if outputs.dry_run:
            _print_plan(plan(st, target, judge, optimizer, options))
            return
        bar = RoundBar(quiet)
        try:
            result = run_sync(
                aalign(
                    st,
                    target,
                    judge,
                    optimizer,
                    options,
                    runs=run_options(run.method, run.max_attempts),
                    concurrency=run.concurrency,
                    emit=bar,
                    notify=console.print,
                )
            )
        finally:
            bar.stop()
        promoted = promote_adopted(st, result) if outputs.adopt else None
    path, page = outputs.paths(target.name)
    stale = path.exists() and not result.adopted
    result = result.model_copy(update={"files": write_outputs(result, path, page)})
    _print_result(result, store)
    if outputs.adopt:
        _print_promoted(result, promoted, path)
    if stale:
        console.print(f"[yellow]note:[/] {escape(str(path))} is an earlier run's, left as it was", highlight=False)
    sys.exit(0)

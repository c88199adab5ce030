"""``greval align`` in Python: from a spec's stored verdicts and people's labels to a better spec version, or
to "no improvement shown" (see docs/align.md). :func:`align` runs it, :func:`plan` estimates it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from greval._sync import run_sync
from greval.agreement.models import GoldChoice
from greval.align.core import Outcome, align_units, reserve, summary
from greval.align.estimate import Estimator, expected
from greval.align.generators import generators
from greval.align.labels import LabelSet, load_labels
from greval.align.ledger import Fresh, decision_id, record
from greval.align.models import AlignEvent, AlignOptions, AlignPlan, AlignResult, Cost, Recipe
from greval.align.objective import Scorer, default_objective
from greval.align.output import diff_text
from greval.align.price import load as load_prices
from greval.align.split import Split, split_units
from greval.align.store_judge import StoreJudge, StoreOptimizer, StoreRuns
from greval.errors import UserError, option
from greval.llm.config import JudgeChoice, JudgeConfig, Notify, local_concurrency, resolve_judge
from greval.llm.local import serve_judge
from greval.llm.retry import RetryPolicy
from greval.runner.options import RunOptions
from greval.store.store import Store


@dataclass(frozen=True)
class Target:
    """Which spec version to align, and whose verdicts and labels."""

    spec: str
    datasets: tuple[str, ...] = ()
    gold: GoldChoice | None = None  # whose label each unit's is (``greval agreement --gold``); None: consensus

    @property
    def name(self) -> str:
        return self.spec.partition("@")[0]

    @property
    def version(self) -> str | None:
        return self.spec.partition("@")[2] or None


def run_options(method: str = "auto", max_attempts: int = 6) -> RunOptions:
    """How candidates are judged: without re-asks (one call per judgement and sample, so calls are known
    before they are made; an unparsable answer is that candidate's error, counted as wrong)."""
    policy = RetryPolicy(max_attempts=max_attempts, parse_attempts=1, reask_rounds=0)
    return RunOptions(method=method, retry=policy)


def _concurrency(given: int | None, cfg: JudgeConfig) -> int:
    """The calls in flight: as given, else the embedded judge's parallel slots, else 8."""
    return given or (local_concurrency() if cfg.provider in ("local", "gguf") else 8)


def stored_judge(store: Store, spec_key: str, name: str) -> JudgeChoice:
    """The judge that made a version's verdicts, as a choice to resolve (when no judge is given)."""

    judges = store.verdict_judges(spec_key)
    if not judges:
        raise UserError(f"no judge verdicts of {name} in the store: run `greval run` with it first")
    if len(judges) > 1:
        raise UserError(
            f"several judges answered {name} ({', '.join(j['label'] for j in judges)}): choose with {option('judge')}"
        )
    ident = json.loads(judges[0]["identity"])
    provider, model = ident.get("provider"), ident.get("model")
    if provider == "gguf":
        raise UserError(
            f"{name} was judged by a GGUF model ({judges[0]['label']}): give it with {option('judge')} gguf:PATH"
        )
    ref = "local" if provider == "local" else f"{provider}:{model}"
    return JudgeChoice(
        ref=ref,
        temperature=ident.get("temperature"),
        max_tokens=ident.get("max_tokens"),
        samples=ident.get("samples"),
        seed=ident.get("seed"),
    )


def resolve(store: Store, target: Target, choice: JudgeChoice | JudgeConfig | None) -> tuple[JudgeConfig, str]:
    """The judge's configuration, which must be the one whose verdicts of this version are stored; its key."""
    key = store.metric_version(target.spec).spec_key
    spec = store.spec(key)
    if isinstance(choice, JudgeConfig):
        cfg = choice
    elif choice is not None and choice.ref is not None:
        cfg = resolve_judge(choice.ref, **choice.with_defaults(spec.judge).params())
    else:  # the judge of the stored verdicts, reached where the flags say (--base-url, --timeout)
        picked = stored_judge(store, key, target.name)
        if choice is not None:
            picked = picked.model_copy(update={"base_url": choice.base_url, "timeout": choice.timeout})
        cfg = resolve_judge(picked.ref or "local", **picked.params())
    stored = {j["judge_key"]: j["label"] for j in store.verdict_judges(key)}
    if cfg.key not in stored:
        have = ", ".join(sorted(set(stored.values()))) or "none"
        flags = f"{option('judge')}, {option('temperature')}, {option('max_tokens')} and {option('samples')}"
        hint = f"give the same {flags}"
        if cfg.label in stored.values():
            # The same judge under another key: other parameters, or an earlier identity of the judge (the local
            # judge's changed with its reason cap, 2026-11-29), which no flag can name.
            hint = (
                f"{cfg.label}'s verdicts here were made with other parameters or by an earlier version of it; "
                f"{hint}, or judge the records again with these (`greval run` with this {option('judge')}"
                f"{', free for the local judge' if cfg.is_local else ''})"
            )
        raise UserError(
            f"no verdicts of {target.name}@{spec.hash} by judge {cfg.label} with these parameters (key {cfg.key}); "
            f"judges with verdicts: {have} — {hint}"
        )
    return cfg, key


def _optimizer(opt: JudgeChoice | JudgeConfig | None, judge: JudgeConfig) -> JudgeConfig:
    if opt is None or isinstance(opt, JudgeConfig):
        return opt or judge
    if opt.ref is None:
        return judge
    return resolve_judge(opt.ref, **opt.params())


def plan(
    store: Store,
    target: Target,
    judge: JudgeChoice | JudgeConfig | None = None,
    optimizer: JudgeChoice | JudgeConfig | None = None,
    options: AlignOptions | None = None,
) -> AlignPlan:
    """The dry run: split, the search's shape and its estimated cost; no model call, no test label read."""
    opts = options or AlignOptions()
    cfg, _ = resolve(store, target, judge)
    labels = load_labels(store, target.name, target.version, cfg.key, target.datasets, target.gold)
    ocfg = _optimizer(optimizer, cfg)
    objective = opts.objective or default_objective(labels.scale)
    Scorer(labels.scale, objective)  # one line now if the objective does not fit the scale
    fresh = Fresh(store, labels, decision_id(labels, cfg.key, ocfg.key, opts), opts)
    split = split_units(labels.units, opts.test_share, opts.folds, opts.seed, fresh.used)
    runs = StoreRuns(store, run_options())
    runs.learn(labels.spec, labels.spec_key, cfg, list(labels.records.values()))
    judge_fn = StoreJudge(runs, cfg, labels.deps, labels.records)
    opt_fn = StoreOptimizer(runs, ocfg)
    likely = expected(Estimator(runs, labels, split, cfg, opt_fn), opts)
    held = reserve(labels.spec, split.test, judge_fn, opt_fn, opts)
    prices = load_prices()
    upper = _at_most(labels, split, judge_fn, opt_fn, opts) + held
    total = likely.total
    return AlignPlan(
        spec=target.name,
        version=labels.spec.hash,
        judge=cfg.label,
        optimizer=ocfg.label,
        objective=objective,
        split=summary(split, opts.seed),
        first_round=likely.candidates,
        later_rounds=_later(labels, opts),
        rounds=opts.rounds,
        per_candidate=likely.per_candidate,
        current=likely.current,
        decision=held,
        estimate=total,
        later_round=likely.later_round,
        at_most=upper,
        measured=likely.measured,
        usd=prices.cost(total),
        usd_later_round=prices.cost(likely.later_round),
        usd_at_most=prices.cost(upper),
        prices=prices.source,
        budget_calls=opts.budget_calls,
        budget_tokens=opts.budget_tokens,
        notes=tuple(labels.notes),
        ledger=fresh.note(fresh.count if fresh.previous else fresh.count + 1),
    )


def _later(labels: LabelSet, opts: AlignOptions) -> int:
    """Candidates of a later round, at most: the beam's parents, each with every step there is."""
    return opts.beam * sum(len(g.propose(Recipe(), labels.spec, 2, opts)) for g in generators().values())


def _at_most(labels: LabelSet, split: Split, judge: StoreJudge, opt: StoreOptimizer, opts: AlignOptions) -> Cost:
    """Every round in full, each candidate at the budget's upper bounds (the full example budget in every
    prompt): what a budget must allow for the search never to stop on it. The decision's reserve comes on top."""
    base = labels.spec
    first = sum(len(g.propose(Recipe(), base, 1, opts)) for g in generators().values())
    per = judge.estimate(base, split.search.units, fresh=True, extra_chars=opts.example_tokens * 4)
    per = per + opt.allowance(base, split.search.k, 0)
    total = judge.estimate(base, split.search.units) + judge.estimate(base, split.test)
    for _ in range(first + _later(labels, opts) * (opts.rounds - 1)):
        total = total + per
    return total


class _Served:
    """Judges ready for calls: an embedded local one is started on the first call it is due (a run that finds
    everything stored starts nothing), once, and stopped with the stack."""

    def __init__(self, stack: contextlib.ExitStack, notify: Notify) -> None:
        self.stack, self.notify = stack, notify
        self.live: dict[str, JudgeConfig] = {}

    def __call__(self, cfg: JudgeConfig) -> JudgeConfig:

        if cfg.key not in self.live:
            self.live[cfg.key] = self.stack.enter_context(serve_judge(cfg, self.notify, needed=True))
        return self.live[cfg.key]


async def aalign(
    store: Store,
    target: Target,
    judge: JudgeChoice | JudgeConfig | None = None,
    optimizer: JudgeChoice | JudgeConfig | None = None,
    options: AlignOptions | None = None,
    *,
    runs: RunOptions | None = None,
    concurrency: int | None = None,
    emit: Callable[[AlignEvent], None] | None = None,
    notify: Notify = print,
) -> AlignResult:
    """Search for a better version of ``target`` and decide on labels the search never read (module doc)."""
    opts = options or AlignOptions()
    cfg, _ = resolve(store, target, judge)
    labels = load_labels(store, target.name, target.version, cfg.key, target.datasets, target.gold)
    ocfg = _optimizer(optimizer, cfg)
    Scorer(labels.scale, opts.objective or default_objective(labels.scale))
    fresh = Fresh(store, labels, decision_id(labels, cfg.key, ocfg.key, opts), opts)
    split_units(labels.units, opts.test_share, opts.folds, opts.seed, fresh.used)  # bad input: one line, no call
    how = (runs or run_options()).model_copy(update={"concurrency": _concurrency(concurrency, cfg)})
    with contextlib.ExitStack() as stack:
        runner = StoreRuns(store, how, emit=emit, serve=_Served(stack, notify))
        runner.learn(labels.spec, labels.spec_key, cfg, list(labels.records.values()))
        outcome = await align_units(
            labels.spec,
            labels.units,
            labels.scale,
            StoreJudge(runner, cfg, labels.deps, labels.records),
            StoreOptimizer(runner, ocfg),
            opts,
            records={h: r.data for h, r in labels.records.items()},
            emit=emit,
            ceiling=labels.ceiling,
            used=fresh.used,
        )
    note = record(store, fresh, outcome)
    prices = load_prices()
    result = _result(labels, outcome, opts, cfg, ocfg)
    return result.model_copy(update={"ledger": note, "usd": prices.cost(result.spent), "prices": prices.source})


def _result(labels: LabelSet, outcome: object, opts: AlignOptions, cfg: JudgeConfig, ocfg: JudgeConfig) -> AlignResult:

    assert isinstance(outcome, Outcome)
    final = outcome.final
    tested = final is not None and outcome.decision.difference is not None
    folds = {f.fold: f.units for c in outcome.search.candidates for f in c.folds if final and f.spec_hash == final.hash}
    return AlignResult(
        spec=labels.spec.name,
        old_hash=labels.spec.hash,
        new_hash=final.hash if tested and final is not None else None,
        adopted=outcome.decision.adopted,
        objective=outcome.decision.objective,
        decision=outcome.decision,
        best=outcome.search.best,
        candidates=outcome.search.candidates,
        split=outcome.split,
        stopped=outcome.stopped,
        spent=outcome.spent,
        budget_calls=opts.budget_calls,
        budget_tokens=opts.budget_tokens,
        judge=cfg.label,
        optimizer=ocfg.label,
        datasets=tuple(labels.datasets),
        gold=labels.gold,
        examples=outcome.examples,
        notes=tuple(labels.notes) + _unreached(outcome),
        new_spec=final,
        new_search_units=sum(folds.values()),
        diff=diff_text(labels.spec, final) if final is not None else "",
    )


def _unreached(outcome: object) -> tuple[str, ...]:
    """What the judge could not be asked (server errors or time-outs after the run's retries), said: those units
    are left out of the scores they belong to (pairwise in the decision), never counted as wrong answers."""

    assert isinstance(outcome, Outcome)
    notes = [
        f"{c.description}: {c.excluded} search unit(s) left out of its score — the judge could not be reached "
        "for them after the retries"
        for c in outcome.search.candidates
        if c.excluded
    ]
    diff = outcome.decision.difference
    if diff is not None and diff.excluded:
        notes.append(
            f"decision: {diff.excluded} test unit(s) left out of the comparison — the judge could not be reached for "
            "one version or the other after the retries"
        )
    return tuple(notes)


def align(
    store: str | Path | Store,
    spec: str,
    judge: JudgeChoice | JudgeConfig | None = None,
    optimizer: JudgeChoice | JudgeConfig | None = None,
    options: AlignOptions | None = None,
    *,
    datasets: Sequence[str] = (),
    gold: GoldChoice | None = None,
    runs: RunOptions | None = None,
    emit: Callable[[AlignEvent], None] | None = None,
    notify: Notify = print,
) -> AlignResult:
    """Synchronous :func:`aalign`; ``spec`` is ``NAME`` or ``NAME@HASH``, ``store`` a path, URL or Store."""
    target = Target(spec, tuple(datasets), gold)
    if isinstance(store, Store):
        return run_sync(aalign(store, target, judge, optimizer, options, runs=runs, emit=emit, notify=notify))
    with Store(store) as st:
        return run_sync(aalign(st, target, judge, optimizer, options, runs=runs, emit=emit, notify=notify))


__all__ = ["AlignResult", "Target", "aalign", "align", "plan", "run_options"]

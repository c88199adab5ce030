"""The review loop: which items people label next, what their labels say so far, and when to stop.

``next_round`` extends one growing sampling design (:func:`greval.annotation.selection.review_round`: the
most doubtful verdicts taken whole, a random control sample of the rest stratified by verdict) and pushes
the new units to one Argilla dataset; every round is a push whose recorded selection is the whole design so
far, so the latest push carries each labelled unit's current inclusion probability. ``review_status`` pulls
the answers, weights them back with those probabilities (items selected but not yet labelled are accounted
for per stratum), and turns the chosen figure's interval into a stopping recommendation.

This module joins the annotation and agreement stages; the choices and the arithmetic are pure functions in
``annotation/selection.py``, ``agreement/design.py`` and ``agreement/stopping.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from greval.agreement.agreement import compute_agreement
from greval.agreement.design import report_name
from greval.agreement.from_store import store_frame
from greval.agreement.models import AgreementOptions, AgreementReport, DesignEstimate
from greval.agreement.stopping import Advice, Target, advise
from greval.annotation.argilla import DEFAULT_BATCH, Connection
from greval.annotation.errors import AnnotationError
from greval.annotation.pull import PullResult, pull
from greval.annotation.push import Delivery, PushResult, candidates, deliver, spec_and_judge, unit_of
from greval.annotation.selection import Unit, review_round
from greval.errors import Remedy, UserError, option
from greval.spec import CategoricalScale
from greval.store.store import Store

STOP_MIN_LABELS = 5
"""No "stop" while a sampled stratum has fewer labels: its bootstrap could barely vary, so a narrow interval
there says little."""

STRATEGY = "review"
"""The strategy name a review round's push is recorded under."""


def review_dataset(spec_name: str, dataset: str | None) -> str:
    """A review has a dataset of its own by default, so other pushes of the metric do not mix into its design."""
    return dataset or f"{spec_name}-review"


@dataclass
class RoundResult:
    """One round: what was pushed, and the design it completes."""

    round_no: int
    push: PushResult
    new_units: int
    by_selection: dict[str, int]
    panel: int = 0  # other judges whose verdicts ordered the doubt (0: no panel)
    notes: list[str] = field(default_factory=list)


def _panel(store: Store, spec_key: str, primary: str, units: list[Unit]) -> tuple[list[Unit], int]:
    """Units with the share of the other judges of this spec version that gave another verdict."""
    others = [j["judge_key"] for j in store.verdict_judges(spec_key, ok_only=True) if j["judge_key"] != primary]
    if not others:
        return units, 0
    votes: dict[tuple[str, str], list[str]] = {}
    for key in others:
        for v in candidates(store, spec_key, key):
            votes.setdefault((v.record_hash, v.item_id), []).append(unit_of(v).stratum)
    out = []
    for u in units:
        seen = votes.get(u.key, [])
        share = sum(s != u.stratum for s in seen) / len(seen) if seen else 0.0
        out.append(Unit(u.record_hash, u.item_id, u.stratum, u.confidence, share))
    return out, len(others)


def _earlier_rounds(
    store: Store,
    spec_name: str,
    name: str,
    *,
    judge_key_now: str,
    seed: int | None,
    control_share: float,
    blind: bool,
    notes: list[str],
) -> tuple[int, int | None, dict[tuple[str, str], tuple[str, float]]]:
    """What the review's rounds so far fix for the next one: its number, the seed (the review's own) and each
    unit pushed so far with its selection and inclusion probability; a judge or a blindness that differs from
    theirs is refused, and a seed or control share that differs is said in ``notes``."""
    last = store.latest_push_to(spec_name, name, STRATEGY)
    if last is None:
        return 1, seed, {}
    push_id, judge_key, params_text = last
    if judge_key != judge_key_now:
        raise AnnotationError(
            f"the review in dataset {name!r} follows another judge's verdicts ({judge_key}); "
            f"choose it with {option('judge')}, or start a new review with {option('dataset')} NAME"
        )
    params = json.loads(params_text)
    round_no = int(params.get("round", 0)) + 1
    stored_seed, stored_share = int(params.get("seed", 0)), float(params.get("control_share", control_share))
    if seed is not None and seed != stored_seed:
        ignored = f"{option('seed')} {seed} ignored"
        notes.append(f"the review keeps its seed {stored_seed} ({ignored}): one design, one order")
    if stored_share != control_share:
        notes.append(f"control share {control_share:g} this round (earlier rounds: {stored_share:g})")
    if bool(params.get("blind", False)) != blind:
        was = "blind" if params.get("blind") else "with the judge's verdict shown"
        raise AnnotationError(
            f"the review in dataset {name!r} was pushed {was}: keep it so ({option('blind')} as before), or start "
            f"a new review with {option('dataset')} NAME"
        )
    return round_no, stored_seed, store.push_units(push_id)


def next_round(
    store: Store,
    conn: Connection,
    spec_name: str,
    *,
    batch: int,
    control_share: float = 0.2,
    seed: int | None = None,
    dataset: str | None = None,
    workspace: str | None = None,
    judge: str | None = None,
    blind: bool = False,
    batch_size: int = DEFAULT_BATCH,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> RoundResult:
    """Select the next ``batch`` units of a review and push them (the first call starts the review)."""
    spec_key, spec, jinfo = spec_and_judge(store, spec_name, judge)
    name = review_dataset(spec.name, dataset)
    notes: list[str] = []
    round_no, seed, before = _earlier_rounds(
        store,
        spec.name,
        name,
        judge_key_now=jinfo.key,
        seed=seed,
        control_share=control_share,
        blind=blind,
        notes=notes,
    )
    previous = {k: stratum for k, (stratum, _) in before.items()}
    seed = 0 if seed is None else seed
    cands = candidates(store, spec_key, jinfo.key)
    units, panel = _panel(store, spec_key, jinfo.key, [unit_of(c) for c in cands])
    if not panel and all(c.best_confidence is None for c in cands):
        notes.append(
            f"no verdict has a confidence (judge with {option('logprobs')}, or {option('samples')} 3), and no other "
            "judge ran this spec: the 'most doubtful' slice is a random one"
        )
    gone = [k for k in previous if k not in {u.key for u in units}]
    if gone:
        raise AnnotationError(
            f"{len(gone)} unit(s) of the review in {name!r} are no longer among the judge's ok verdicts of this spec "
            f"version; start a new review with {option('dataset')} NAME"
        )
    if previous and len(previous) >= len(units):
        raise AnnotationError(
            f"every judged item of {spec.name!r} is already in the review in {name!r} ({len(previous)} of "
            f"{len(units)}): label the rest",
            remedy=Remedy("review status", why="after labelling them"),
        )
    picks = review_round(units, previous, batch, control_share, seed, round_no)
    params = {"round": round_no, "batch": batch, "seed": seed, "control_share": control_share}
    # Units already in Argilla whose selection and probability are unchanged are not sent again; the others
    # are re-sent, so the selection and inclusion probability people see in the record's metadata stay true.
    unchanged = frozenset(p.unit.key for p in picks if before.get(p.unit.key) == (p.selection, p.probability))
    res = deliver(
        store,
        conn,
        Delivery(spec_key, spec, jinfo, name, workspace, STRATEGY, params),
        cands,
        picks,
        blind=blind,
        batch_size=batch_size,
        already_there=unchanged,
        on_start=on_start,
        on_progress=on_progress,
    )
    return RoundResult(
        round_no=round_no,
        push=res,
        new_units=sum(1 for p in picks if p.unit.key not in previous),
        by_selection=dict(Counter(p.selection.partition(":")[0] for p in picks)),
        panel=panel,
        notes=notes,
    )


@dataclass
class StratumCount:
    selected: int
    labelled: int
    probability: float


@dataclass
class ReviewStatus:
    """Where a review stands: labels so far, design-weighted agreement, the estimated label shares over every
    judged item, and whether the target interval is reached."""

    spec: str
    dataset: str
    judge: str
    rounds: int
    population: int
    strata: dict[str, StratumCount]
    labels: int  # submitted answers
    labelled_units: int
    report: AgreementReport | None
    judge_over_all: dict[str, float]  # a design figure's counterpart over all the judge's ok verdicts (known exactly)
    advice: Advice | None
    pulled: PullResult | None = None
    notes: list[str] = field(default_factory=list)
    uncovered: int = 0  # judged items the design gave no chance of selection (their π is 0)

    def estimate(self, name: str) -> DesignEstimate | None:
        """A design-weighted figure by name (accuracy, kappa, prevalence[LABEL]); None before it exists."""
        if self.report is None or self.report.design is None:
            return None
        return next((e for e in self.report.design.estimates if e.name == name), None)


def review_status(
    store: Store,
    conn: Connection | None,
    spec_name: str,
    *,
    target: Target | None = None,
    dataset: str | None = None,
    workspace: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
) -> ReviewStatus:
    """Pull the review's answers (when ``conn`` is given), recompute agreement on the design, and advise."""
    version, spec = store.reader_spec(spec_name)
    spec_key = version.spec_key
    name = review_dataset(spec.name, dataset)
    last = store.latest_push_to(spec.name, name, STRATEGY)
    if last is None:
        start = Remedy("review", {"spec": spec.name}, "to start one")
        raise UserError(f"no review of {spec.name!r} in dataset {name!r}", remedy=start)
    push_id, judge_key, params_text = last
    pulled = pull(store, conn, spec.name, dataset=name, workspace=workspace) if conn is not None else None
    units = store.push_units(push_id)
    everything = candidates(store, spec_key, judge_key)
    population = len(everything)
    judge_over_all: dict[str, float] = {}
    if population and isinstance(spec.scale, CategoricalScale):
        shares = Counter(unit_of(c).stratum for c in everything)
        judge_over_all = {f"prevalence[{k}]": shares.get(k, 0) / population for k in spec.scale.names}
    elif population:
        mean = sum(float(c.value or 0) for c in everything) / population
        judge_over_all = {"mean_human": mean, "mean_judge": mean}
    selected = Counter(stratum for stratum, _ in units.values())
    prob = {stratum: p for stratum, p in units.values()}
    labels = store.human_labels(spec.name, dataset=name, submitted=True)
    labelled_keys = {(h["record_hash"], h["item_id"]) for h in labels if (h["record_hash"], h["item_id"]) in units}
    per_stratum = Counter(units[k][0] for k in labelled_keys)
    strata = {s: StratumCount(selected[s], per_stratum.get(s, 0), prob[s]) for s in sorted(selected)}
    judge_label = next((j["label"] for j in store.verdict_judges(spec_key) if j["judge_key"] == judge_key), judge_key)
    status = ReviewStatus(
        spec=spec.name,
        dataset=name,
        judge=judge_label,
        rounds=int(json.loads(params_text).get("round", 1)),
        population=population,
        strata=strata,
        labels=len(labels),
        labelled_units=len(labelled_keys),
        report=None,
        judge_over_all=judge_over_all,
        advice=None,
        pulled=pulled,
    )
    if not labels:
        status.notes.append("no submitted labels yet: label in Argilla, then run `greval review status` again")
        if target is not None:
            status.advice = advise(target, 0, None, None)
        return status
    frame, scale, _ = store_frame(store, spec.name, judge_key, "item", spec.hash, datasets=[name])
    status.report = compute_agreement(frame, scale, AgreementOptions(bootstrap=resamples, seed=seed))
    if status.report.design is not None:
        status.notes += status.report.design.notes
    else:  # equal weights: what the selection left unlabelled is among the report's notes
        status.notes += status.report.notes
    if status.report.design is not None:
        status.notes += narrow_interval_notes(strata)
    covered = round(sum(c.selected / c.probability for c in strata.values() if c.probability > 0))
    status.uncovered = max(0, population - covered)
    if status.labelled_units >= population:
        status.notes.append(
            "every judged item is labelled: the figures are exact for these items; their intervals speak of the "
            "judge on similar items (these as a sample of their kind)"
        )
    elif status.uncovered:
        status.notes.append(
            f"{status.uncovered} of {population} judged items had no chance of being selected (no control draw "
            f"from their verdict, or {option('control_share')} 0): the figures describe the other {covered} only"
        )
    if target is not None:
        status.advice = advice_for(status, target)
    return status


def narrow_interval_notes(strata: dict[str, StratumCount]) -> list[str]:
    """A sampled (or partly labelled) stratum with one label cannot vary in a bootstrap resample: the
    intervals then leave its uncertainty out, and say so."""
    single = [s for s, c in strata.items() if (c.probability < 1 or c.labelled < c.selected) and c.labelled == 1]
    if not single:
        return []
    return [
        "the intervals cannot vary within a sampled stratum of 1 label (" + ", ".join(single) + "): they are too "
        "narrow until it has more"
    ]


def advice_for(status: ReviewStatus, target: Target) -> Advice:
    """The stopping advice for one figure, or why there is none yet."""
    base = {"figure": target.figure, "target": target.half_width, "labelled": status.labelled_units}
    remaining = status.population - status.labelled_units
    if remaining <= 0:
        return Advice(**base, more=0, reached=True, line="stop: every judged item is labelled (the figures are exact)")
    if status.uncovered:
        return Advice(
            **base,
            line=f"no estimate over every judged item yet: {status.uncovered} could not be selected; run another "
            f"round (with {option('control_share')} above 0: its control draws go first to verdicts not sampled yet)",
        )
    # A stratum sampled (or partly labelled) needs 2 labels before the bootstrap can vary inside it.
    thin = [s for s, c in status.strata.items() if (c.probability < 1 or c.labelled < c.selected) and c.labelled < 2]
    if thin:
        return Advice(
            **base,
            line="continue: no interval yet — fewer than 2 labels in "
            + ", ".join(f"{s} ({status.strata[s].labelled} of {status.strata[s].selected})" for s in thin),
        )
    report = status.report
    if report is not None and report.design is not None:
        est = status.estimate(target.figure)
        if est is None:
            known = [e.name for e in report.design.estimates]
            raise UserError(f"{option('target')} {target.figure!r}: choose one of {', '.join(known)}")
        adv = advise(target, status.labelled_units, est.ci_low, est.ci_high)
    elif report is not None:  # every labelled item weighs the same: the plain figures are the design's own
        e = report.metrics.get(report_name(target.figure))
        if e is None:
            raise UserError(f"{option('target')} {target.figure!r}: choose one of {', '.join(report.metrics)}")
        adv = advise(target, status.labelled_units, e.ci_low, e.ci_high)
    else:
        adv = advise(target, 0, None, None)
    few = [
        s
        for s, c in status.strata.items()
        if (c.probability < 1 or c.labelled < c.selected) and c.labelled < STOP_MIN_LABELS
    ]
    if adv.reached and few:  # an interval from a handful of labels in a stratum may barely move: not enough
        adv.reached, adv.more = False, None
        adv.line = (
            f"continue: the {target.figure} interval is within ±{target.half_width:g}, but it rests on fewer than "
            f"{STOP_MIN_LABELS} labels in "
            + ", ".join(f"{s} ({status.strata[s].labelled} of {status.strata[s].selected})" for s in few)
        )
    if adv.more is not None and adv.more > remaining:
        adv.line = (
            f"continue: label the {remaining} remaining item(s) — the 1/√n rule asks for about {adv.more} more "
            f"than the {status.labelled_units} labelled, more than are left (with every item labelled the figures "
            "are exact)"
        )
        adv.more = remaining
    return adv

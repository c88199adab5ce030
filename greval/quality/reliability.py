"""Judge reliability (`greval reliability`): does the verdict survive changes that should not matter?

A sample of records is judged as is, then again with the chunks / triples in another order and with a spec
copy that lists the labels (or value ranges) in another order; the share of verdicts that flip measures
position bias. A panel of judge models judges the same sample and pairwise agreement between them (Cohen's
κ through the agreement module) shows how much the verdict depends on the model. For value scales, where the
server returns log-probabilities, a G-Eval style probability-weighted score is computed beside the discrete
value.

Everything runs through the normal runner and store: a permuted record has another content hash and a
permuted spec another hash, so their verdicts are stored beside the originals, a re-run costs no calls and
the report is reproducible (the sample and shuffles are seeded).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any, Literal, cast

from pydantic import BaseModel, Field
from rich.markup import escape
from rich.table import Table

from greval._sync import run_sync
from greval.agreement import AgreementOptions, compute_agreement
from greval.agreement.scale import agreement_scale
from greval.dataset.records import Record, content_hash
from greval.errors import UserError, option, render_options
from greval.judge.judge import Judge
from greval.judge.logprobs import weighted_value
from greval.judge.outcome import config_for, missing_inputs
from greval.judge.parse import json_payload
from greval.llm.call import to_langchain
from greval.llm.config import LOCAL_PROVIDERS, JudgeConfig, openai_chat
from greval.report.format import fmt_ci, fmt_number
from greval.runner.driver import arun
from greval.runner.options import RunOptions
from greval.spec import BaseSpec, CategoricalScale, EachTarget, Spec, ValueScale, parse_spec, with_dependencies
from greval.store.results import metric_notes
from greval.store.store import spec_keys
from greval.types import ItemVerdict, JudgeResult

Order = Literal["reverse", "shuffle"]
Perturbation = Literal["items", "scale"]


# ============================================================================================ report
class FlipStat(BaseModel):
    """How often verdicts changed under one perturbation (verdicts compared where both sides succeeded)."""

    perturbation: str
    description: str
    unit: str = Field(description="'record' or the item kind (chunks / triples) compared one by one")
    n: int = Field(description="verdict pairs compared")
    flips: int
    rate: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    mean_abs_shift: float | None = Field(None, description="value scales: mean |permuted − original|")
    records: int = 0
    failed: int = Field(0, description="pairs left out because one side failed")
    note: str | None = None


class PanelPair(BaseModel):
    """Agreement between two judge models on the same verdicts (a treated as 'judge', b as 'human')."""

    a: str
    b: str
    n: int
    metrics: dict[str, float | None]
    notes: list[str] = Field(default_factory=list)


class LogprobStat(BaseModel):
    """G-Eval style probability-weighted scores next to the discrete verdicts."""

    requested: int
    usable: int
    mean_value: float | None = None
    mean_weighted: float | None = None
    mean_mass: float | None = Field(None, description="probability mass on valid values at the value token")
    scores: dict[str, float] = Field(default_factory=dict, description="record id -> weighted score")
    note: str | None = None


class ReliabilityReport(BaseModel):
    spec: str
    spec_hash: str
    judge: str
    records: int
    seed: int
    order: str
    flips: list[FlipStat] = Field(default_factory=list)
    panel: list[PanelPair] = Field(default_factory=list)
    panel_judges: list[str] = Field(default_factory=list)
    logprobs: LogprobStat | None = None
    notes: list[str] = Field(default_factory=list)


# ====================================================================================== perturbing
def _order(n: int, how: Order, rng: random.Random) -> list[int]:
    """A permutation of range(n) that differs from the identity whenever n >= 2."""
    idx = list(range(n))
    if n < 2:
        return idx
    if how == "reverse":
        return idx[::-1]
    perm = idx[:]
    while perm == idx:
        rng.shuffle(perm)
    return perm


def item_field(spec: Spec) -> str | None:
    """The list input whose order is perturbed: the judged items, else chunks / triples the judge reads. A
    conversation's turns are not: their order is what they mean."""
    if spec.each == "turns":
        return None
    if spec.each:
        return spec.each
    return next((f for f in ("chunks", "triples") if f in spec.inputs), None)


def permute_items(record: Record, field: str, how: Order = "reverse", seed: int = 0) -> Record:
    """The record with its chunks / triples in another order (ids unchanged, so verdicts pair up)."""
    items = record.items(field)
    rng = random.Random(f"{seed}|{record.hash}")
    perm = _order(len(items), how, rng)
    data = {**record.data, field: [items[i] for i in perm]}
    return Record(id=record.id, hash=content_hash(data), data=data)


def permute_scale(spec: Spec, how: Order = "reverse", seed: int = 0) -> Spec:
    """A spec copy listing the labels (or value ranges) in another order; same meaning, another hash.

    Ordered label scales say "listed from best to worst", which a reordering would contradict: the copy is
    marked unordered and given the original label scores explicitly, so scores and aggregates stay the same.
    Item metrics that count the default positive label (the first) get it named explicitly.
    """
    data = spec.model_dump(mode="json")
    rng = random.Random(f"{seed}|{spec.hash}")
    scale = data["scale"]
    if isinstance(spec.scale, CategoricalScale):
        labels = scale["labels"]
        scale["labels"] = [labels[i] for i in _order(len(labels), how, rng)]
        if spec.scale.ordered:
            scores = spec.scale.scores() or {}
            scale["ordered"] = False
            for lab in scale["labels"]:
                lab["score"] = scores.get(lab["name"])
        if isinstance(spec.target, EachTarget) and spec.aggregate == "share" and not spec.target.positive:
            data["target"]["positive"] = spec.positive_labels
    else:
        ranges = scale["ranges"]
        scale["ranges"] = [ranges[i] for i in _order(len(ranges), how, rng)]
    out = parse_spec(data, f"{spec.name} (scale order permuted)")
    assert isinstance(out, Spec)
    return out


def sample_records(records: Sequence[Record], n: int | None, seed: int) -> list[Record]:
    """A seeded sample, kept in file order (the same sample every time for the same seed)."""
    if n is None or n >= len(records):
        return list(records)
    keep = set(random.Random(seed).sample(range(len(records)), n))
    return [r for i, r in enumerate(records) if i in keep]


# ======================================================================================= comparing
def _key(spec: Spec, v: ItemVerdict) -> Any:
    return v.label if isinstance(spec.scale, CategoricalScale) else v.value


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float | None, float | None]:
    """Wilson score interval for a proportion (sound at 0 and n, unlike the normal approximation)."""
    if n == 0:
        return None, None
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def compare(
    spec: Spec,
    pairs: Sequence[tuple[JudgeResult | None, JudgeResult | None]],
    name: str,
    description: str,
) -> FlipStat:
    """Flip count over matched verdicts (record-level, or item by item for chunk / triple metrics)."""
    n = flips = failed = 0
    shifts: list[float] = []
    for a, b in pairs:
        va = {v.item_id: v for v in (a.verdicts if a else [])}
        vb = {v.item_id: v for v in (b.verdicts if b else [])}
        for iid in sorted(set(va) | set(vb)):
            x, y = va.get(iid), vb.get(iid)
            if x is None or y is None or x.status != "ok" or y.status != "ok":
                failed += 1
                continue
            n += 1
            if _key(spec, x) != _key(spec, y):
                flips += 1
            if x.value is not None and y.value is not None:
                shifts.append(abs(y.value - x.value))
    lo, hi = wilson(flips, n)
    return FlipStat(
        perturbation=name,
        description=description,
        unit=spec.each or "record",
        n=n,
        flips=flips,
        rate=flips / n if n else None,
        ci_low=lo,
        ci_high=hi,
        mean_abs_shift=sum(shifts) / len(shifts) if shifts else None,
        records=len(pairs),
        failed=failed,
        note=None if n else "no verdict pairs to compare",
    )


PANEL_METRICS = {
    "categorical": ("accuracy", "cohen_kappa", "quadratic_kappa"),
    "value": ("exact_agreement", "quadratic_kappa", "pearson"),
}


def panel_agreement(spec: Spec, judges: Mapping[str, Mapping[str, JudgeResult | None]]) -> list[PanelPair]:
    """Pairwise agreement between panel judges via the agreement module (no bootstrap: point values)."""
    import pandas as pd

    names = list(judges)
    scale = agreement_scale(spec)
    wanted = PANEL_METRICS["value" if isinstance(spec.scale, ValueScale) else "categorical"]
    out: list[PanelPair] = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            rows = []
            for rid, ra in judges[a].items():
                rb = judges[b].get(rid)
                va = {v.item_id: v for v in (ra.verdicts if ra else []) if v.status == "ok"}
                vb = {v.item_id: v for v in (rb.verdicts if rb else []) if v.status == "ok"}
                for iid in sorted(set(va) & set(vb)):
                    rows.append({"item": f"{rid}/{iid}", "judge": _key(spec, va[iid]), "human": _key(spec, vb[iid])})
            frame = pd.DataFrame(rows, columns=["item", "judge", "human"])
            if frame.empty:
                out.append(PanelPair(a=a, b=b, n=0, metrics={}, notes=["no verdicts in common"]))
                continue
            rep = compute_agreement(frame, scale, AgreementOptions(bootstrap=0))
            metrics = {k: rep.metrics[k].value for k in wanted if k in rep.metrics}
            notes = [f"{k}: {rep.metrics[k].note}" for k in wanted if k in rep.metrics and rep.metrics[k].note]
            out.append(PanelPair(a=a, b=b, n=rep.counts.items_compared, metrics=metrics, notes=notes))
    return out


# ========================================================================================= logprobs
async def alogprob_scores(
    spec: Spec, records: Sequence[Record], judge: Judge
) -> tuple[dict[str, tuple[int, float, float]], list[str]]:
    """One extra call per record with logprobs on (``judge``: :func:`logprob_judge`): {record id: (value,
    weighted, mass)} and problems."""

    scale = spec.scale
    assert isinstance(scale, ValueScale)
    out: dict[str, tuple[int, float, float]] = {}
    problems: list[str] = []
    for rec in records:
        if missing_inputs(spec, rec.data):
            continue
        method: Any = "json_schema"
        try:
            msg = await judge.bound(method).ainvoke(to_langchain(judge.messages(method, rec.data, None, None)))
        except Exception as exc:
            problems.append(f"{rec.id}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        meta = getattr(msg, "response_metadata", {}) or {}
        got = weighted_value(meta.get("logprobs"), scale.min, scale.max)
        if got is None:
            problems.append(f"{rec.id}: no log-probabilities at the value token")
            continue
        try:
            payload, _ = json_payload(msg, method)
            value = int(payload["value"])
        except Exception:
            problems.append(f"{rec.id}: the answer has no readable value")
            continue
        out[rec.id] = (value, got[0], got[1])
    return out, problems


def logprob_judge(spec: Spec, cfg: JudgeConfig, top: int) -> Judge:
    """The run's judge of ``spec`` asking for log-probabilities (OpenAI-compatible servers only): the same
    request as a run's, with the local judge's cap on each reason (an uncapped small model loops in its reason
    until it is cut off, and a cut-off answer has no value token to weigh)."""
    if cfg.provider not in ("openai", *LOCAL_PROVIDERS):
        raise UserError(f"{option('logprobs')} needs an OpenAI-compatible judge; {cfg.label} is not one")
    return Judge(spec, openai_chat(cfg), method="json_schema", logprobs=top)


# ============================================================================================ running
class ReliabilityOptions(BaseModel):
    sample: int | None = 50
    seed: int = 0
    order: Order = "reverse"
    perturb: list[Perturbation] = Field(default_factory=lambda: cast(list[Perturbation], ["items", "scale"]))
    logprobs: bool = False
    top_logprobs: int = Field(10, ge=1, le=20)
    concurrency: int = 8


async def _judged(
    specs: Sequence[BaseSpec],
    records: Sequence[Record],
    store: Any,
    cfg: JudgeConfig,
    concurrency: int,
    notes: list[str] | None = None,
) -> dict[str, JudgeResult | None]:
    """Run (or reuse from the store) and read back the target spec's verdicts, by record id; ``notes``
    receives what the run summary says about failed judgements."""

    summary = await arun(specs, records, store, cfg, options=RunOptions(concurrency=concurrency), dataset="reliability")
    target = specs[-1]
    if notes is not None:  # why judgements failed (truncated, content filter …), said once per kind of run
        notes.extend(n for m in summary.metrics if m.spec == target.name for n in metric_notes(m) if n not in notes)
    key = spec_keys(specs)[target.name]
    jkey = config_for(target, cfg).key
    return {r.id: store.result(key, jkey, r) for r in records}


async def areliability(
    specs: Sequence[BaseSpec],
    target: Spec,
    records: Sequence[Record],
    store: Any,
    cfg: JudgeConfig,
    panel: Sequence[JudgeConfig] = (),
    options: ReliabilityOptions | None = None,
) -> ReliabilityReport:
    """Judge the sample as is and perturbed; compare; judge with the panel; optionally weigh logprobs."""

    opts = options or ReliabilityOptions()
    # the target's dependencies, transitively, then the target; nothing that merely sits beside it in a file
    ordered = with_dependencies([target.name], [*(s for s in specs if s.name != target.name), target])
    sample = sample_records(records, opts.sample, opts.seed)
    report = ReliabilityReport(
        spec=target.name,
        spec_hash=target.hash,
        judge=cfg.label,
        records=len(sample),
        seed=opts.seed,
        order=opts.order,
    )
    base = await _judged(ordered, sample, store, cfg, opts.concurrency, report.notes)

    if "items" in opts.perturb:
        field = item_field(target)
        movable = [r for r in sample if field and len(r.items(field)) >= 2]
        if field is None:
            turns = target.each == "turns"
            why = "a conversation's turns keep their order" if turns else "the spec reads no chunks or triples"
            report.notes.append(f"item order: {why}; not tested")
        elif not movable:
            report.notes.append(f"item order: no sampled record has 2 or more {field}; not tested")
        else:
            permuted = [permute_items(r, field, opts.order, opts.seed) for r in movable]
            got = await _judged(ordered, permuted, store, cfg, opts.concurrency)
            report.flips.append(
                compare(
                    target,
                    [(base[r.id], got[r.id]) for r in movable],
                    "items",
                    f"{field} in {opts.order}d order",
                )
            )
            if len(movable) < len(sample):
                report.notes.append(f"item order: {len(sample) - len(movable)} record(s) with < 2 {field} skipped")
    if "scale" in opts.perturb:
        twin = permute_scale(target, opts.order, opts.seed)
        what = "labels" if isinstance(target.scale, CategoricalScale) else "value ranges"
        got = await _judged([*ordered[:-1], twin], sample, store, cfg, opts.concurrency)
        stat = compare(target, [(base[r.id], got[r.id]) for r in sample], "scale", f"{what} in {opts.order}d order")
        stat.note = f"permuted spec hash {twin.hash}"
        report.flips.append(stat)

    if panel:
        report.panel_judges = [c.label for c in panel]
        by_judge: dict[str, Mapping[str, JudgeResult | None]] = {}
        for pcfg in panel:
            label = pcfg.label if pcfg.label not in by_judge else f"{pcfg.label}#{len(by_judge)}"
            by_judge[label] = (
                base if pcfg.key == cfg.key else await _judged(ordered, sample, store, pcfg, opts.concurrency)
            )
        report.panel = panel_agreement(target, by_judge)

    if opts.logprobs:
        report.logprobs = await _logprob_stat(target, sample, cfg, opts)
    return report


async def _logprob_stat(
    target: Spec, sample: Sequence[Record], cfg: JudgeConfig, opts: ReliabilityOptions
) -> LogprobStat:
    if not isinstance(target.scale, ValueScale) or target.each is not None or target.depends_on:
        return LogprobStat(
            requested=0,
            usable=0,
            note="not done: probability-weighted scores are implemented for record-level value scales only "
            "(and not for specs with depends_on)",
        )
    scores, problems = await alogprob_scores(target, sample, logprob_judge(target, cfg, opts.top_logprobs))
    stat = LogprobStat(requested=len(sample), usable=len(scores))
    if scores:
        vals = list(scores.values())
        stat.mean_value = sum(v[0] for v in vals) / len(vals)
        stat.mean_weighted = sum(v[1] for v in vals) / len(vals)
        stat.mean_mass = sum(v[2] for v in vals) / len(vals)
        stat.scores = {rid: v[1] for rid, v in scores.items()}
    if problems:
        stat.note = (
            "not available from this model/server (no log-probabilities returned)"
            if not scores
            else f"{len(problems)} record(s) without usable log-probabilities, e.g. {problems[0]}"
        )
    return stat


def reliability(*args: Any, **kwargs: Any) -> ReliabilityReport:
    """Synchronous :func:`areliability`."""
    return run_sync(areliability(*args, **kwargs))


# ================================================================================================ CLI
def print_report(console: Any, rep: ReliabilityReport, names: Mapping[str, str] | None = None) -> None:
    """Flip rates per perturbation (with n and a Wilson 95% CI), panel agreement, weighted scores (``names``: how
    option fields are written; the CLI passes its flags)."""

    console.print(
        f"[bold]{rep.spec}[/] ({rep.spec_hash}) judged by {rep.judge} on {rep.records} sampled record(s) "
        f"(seed {rep.seed})",
        highlight=False,
    )
    t = Table(title="position bias: verdict flips under perturbation", title_justify="left")
    for col in ("perturbation", "unit", "n", "flips", "flip rate", "95% CI", "mean |Δ|", "failed", "note"):
        t.add_column(col, justify="right" if col in ("n", "flips", "flip rate", "mean |Δ|", "failed") else "left")
    for f in rep.flips:
        ci = fmt_ci(f)
        t.add_row(
            escape(f.description),
            f.unit,
            str(f.n),
            str(f.flips),
            fmt_number(f.rate),
            escape(ci),
            fmt_number(f.mean_abs_shift),
            str(f.failed),
            escape(f.note or ""),
        )
    console.print(t)
    if rep.panel:
        p = Table(title=f"panel agreement ({', '.join(rep.panel_judges)})", title_justify="left")
        keys = sorted({k for pair in rep.panel for k in pair.metrics}, key=lambda k: list(_ALL_PANEL).index(k))
        for col in ("a", "b", "n", *keys):
            p.add_column(col, justify="left" if col in ("a", "b") else "right")
        for pair in rep.panel:
            p.add_row(pair.a, pair.b, str(pair.n), *[fmt_number(pair.metrics.get(k)) for k in keys])
        console.print(p)
        for pair in rep.panel:
            for n in pair.notes:
                console.print(f"  note ({pair.a} vs {pair.b}): {escape(n)}", highlight=False)
    lp = rep.logprobs
    if lp is not None:
        if lp.usable:
            console.print(
                f"probability-weighted score (G-Eval): {lp.usable} of {lp.requested} record(s); mean value "
                f"{fmt_number(lp.mean_value)}, mean weighted {fmt_number(lp.mean_weighted)}, mass on valid values "
                f"{fmt_number(lp.mean_mass)}",
                highlight=False,
            )
        if lp.note:
            console.print(f"probability-weighted score: {escape(lp.note)}", highlight=False)
    else:
        asked = render_options(option("logprobs"), names or {})
        console.print(f"probability-weighted score: not requested ({escape(asked)})", highlight=False)
    for n in rep.notes:
        console.print(f"  note: {escape(render_options(n, names or {}))}", highlight=False)


_ALL_PANEL = dict.fromkeys([*PANEL_METRICS["categorical"], *PANEL_METRICS["value"]])


def parse_panel(ref: str) -> tuple[str, str | None]:
    """``provider:model`` or ``provider:model@http://host/v1`` (a panel member on its own server)."""
    head, sep, url = ref.partition("@")
    if sep and not url.startswith(("http://", "https://")):
        raise UserError(f"{option('panel')} {ref!r}: write provider:model or provider:model@http://host:port/v1")
    return head, (url or None)


__all__ = [
    "FlipStat",
    "LogprobStat",
    "PanelPair",
    "ReliabilityOptions",
    "ReliabilityReport",
    "areliability",
    "compare",
    "item_field",
    "panel_agreement",
    "permute_items",
    "permute_scale",
    "print_report",
    "reliability",
    "sample_records",
    "wilson",
]

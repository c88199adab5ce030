"""The judge and the optimizer of a real align run: spec versions judged through greval's run path into the store.

A candidate is a spec version (its hash); its verdicts are stored like any run's, keyed by content, so a
resumed or repeated align run pays only for what is missing. Every run align makes is an *experiment*
(:mod:`greval.store.versions`): stored, never what ``greval agreement --spec NAME``, ``gate``, ``report`` or
``annotate push`` read by default — by construction, so a killed align leaves nothing to restore. Candidates are
judged without re-asks (one call per judgement and sample: calls are known before they are made).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import median

from greval.align.models import AlignEvent, Answer, Cost, Judged, Judging, Unit
from greval.align.optimizer import edits_from, reason_record, reason_spec, rewrite_record, rewrite_spec
from greval.align.ports import Proposal, ReasonRequest, Reasons, RewriteRequest
from greval.align.text import RECORD_CHARS
from greval.dataset.records import Record
from greval.judge.prompt import example_messages, render_inputs, system_prompt
from greval.llm.config import JudgeConfig
from greval.runner.driver import arun
from greval.runner.options import RunOptions
from greval.spec import BaseSpec, Spec
from greval.spec.verdict import verdict_models
from greval.store.results import item_rows
from greval.store.schema import error_kind
from greval.store.store import Store, spec_keys
from greval.types import JudgeResult

DEFAULT_TOKENS_PER_CHAR = 0.5
"""Prompt tokens per character before a judge's own are known (English runs near 0.25)."""

DEFAULT_OUT_TOKENS = 1024
"""An answer's tokens before any was seen, when the judge has no ``max_tokens`` cap."""


@dataclass
class TokenBound:
    """Upper estimates of a judge's tokens, learnt from what it spent: 1.25 × the most prompt tokens per
    character seen, 1.5 × the longest answer seen (or the --max-tokens cap)."""

    per_char: dict[str, float] = field(default_factory=dict)
    out: dict[str, int] = field(default_factory=dict)

    def prompt(self, cfg: JudgeConfig, chars: int) -> int:
        return math.ceil(chars * self.per_char.get(cfg.key, DEFAULT_TOKENS_PER_CHAR))

    def answer(self, cfg: JudgeConfig) -> int:
        return cfg.max_tokens or self.out.get(cfg.key, DEFAULT_OUT_TOKENS)

    def learn(self, cfg: JudgeConfig, chars: int, tokens_in: int, tokens_out: int, calls: int) -> None:
        """``calls`` calls over prompts of ``chars`` characters in all spent these tokens."""
        if chars > 0 and tokens_in > 0:
            ratio = 1.25 * tokens_in / chars
            self.per_char[cfg.key] = max(self.per_char.get(cfg.key, 0.0), ratio)
        if calls > 0 and tokens_out > 0:
            self.out[cfg.key] = max(self.out.get(cfg.key, 0), math.ceil(1.5 * tokens_out / calls))


@lru_cache(maxsize=512)
def _system_chars(spec_json: str) -> int:

    spec = Spec.model_validate_json(spec_json)
    answer, _ = verdict_models(spec)
    # JSON mode carries the schema in the prompt: the longest of the three structured-output methods.
    chars = len(system_prompt(spec, "json_mode", answer.model_json_schema()))
    return chars + sum(len(m["content"]) for m in example_messages(spec))


def prompt_chars(spec: Spec, record: Record) -> int:
    """The characters the judge reads for one record: instructions, schema, examples and the record."""

    ids = [str(it.get("id")) for it in record.items(spec.each)] if spec.each else None
    return _system_chars(spec.model_dump_json()) + len(render_inputs(spec, record.data, None, ids))


class StoreRuns:
    """Runs of one spec version (with its dependencies) over some records, through ``greval.runner.driver.arun``."""

    def __init__(
        self,
        store: Store,
        options: RunOptions,
        *,
        emit: Callable[[AlignEvent], None] | None = None,
        serve: Callable[[JudgeConfig], JudgeConfig] | None = None,
    ) -> None:
        self.store = store
        self.options = options
        self.serve = serve  # the judge ready for calls (an embedded one started), asked only when a call is due
        self.emit = emit or (lambda event: None)
        self.done = 0
        self.total = 0
        self.bound = TokenBound()

    def learn(self, spec: Spec, spec_key: str, cfg: JudgeConfig, records: Sequence[Record]) -> None:
        """Calibrate the token bound on what this judge spent on the current spec's stored verdicts: the most
        prompt tokens per character and the longest answer of its one-call judgements (a judgement that holds
        re-asks shows about twice the median prompt tokens per character, and is left out)."""

        rows = item_rows(self.store, spec_key=spec_key, judge_key=cfg.key)
        spent = {r["record_hash"]: r for r in rows if r["status"] == "ok" and r["tokens_in"]}
        seen = [
            (int(spent[r.hash]["tokens_in"]) / (prompt_chars(spec, r) * cfg.samples), spent[r.hash])
            for r in records
            if r.hash in spent
        ]
        if not seen:
            return
        middle = median(ratio for ratio, _ in seen)
        single = [(ratio, row) for ratio, row in seen if ratio <= 1.5 * middle]
        most = max(ratio for ratio, _ in single)
        longest = max(int(row["tokens_out"] or 0) for _, row in single) // cfg.samples
        self.bound.learn(cfg, 100_000, math.ceil(most * 100_000), longest, 1)

    def key(self, spec: Spec, deps: Sequence[BaseSpec]) -> str:
        return spec_keys([*deps, spec])[spec.name]

    def result(self, spec: Spec, deps: Sequence[BaseSpec], cfg: JudgeConfig, record: Record) -> JudgeResult | None:
        return self.store.result(self.key(spec, deps), cfg.key, record)

    def estimate(
        self,
        spec: Spec,
        deps: Sequence[BaseSpec],
        cfg: JudgeConfig,
        records: Sequence[Record],
        *,
        fresh: bool = False,
        extra_chars: int = 0,
    ) -> Cost:
        """Exact calls (one per pending judgement and sample, dependencies included) and a token upper bound."""
        calls = tokens_in = tokens_out = 0
        for s, rec in self.pending(spec, deps, cfg, records, fresh):
            calls += cfg.samples
            tokens_in += cfg.samples * self.bound.prompt(cfg, prompt_chars(s, rec) + extra_chars)
            tokens_out += cfg.samples * self.bound.answer(cfg)
        return Cost.of(cfg.label, calls, tokens_in, tokens_out)

    def pending(
        self, spec: Spec, deps: Sequence[BaseSpec], cfg: JudgeConfig, records: Sequence[Record], fresh: bool = False
    ) -> list[tuple[Spec, Record]]:
        """The (judge spec, record) judgements not stored yet (every one when ``fresh``)."""
        keys = spec_keys([*deps, spec])
        out = []
        for s in [*deps, spec]:
            if not isinstance(s, Spec):
                continue  # computed dependencies call no model
            out += [(s, r) for r in records if fresh or self.store.result(keys[s.name], cfg.key, r) is None]
        return out

    async def run(
        self,
        spec: Spec,
        deps: Sequence[BaseSpec],
        cfg: JudgeConfig,
        records: Sequence[Record],
        label: str,
        purpose: str = "align candidate",
    ) -> Cost:
        """Judge what is missing, as an experiment run (``purpose``: what it tries); the calls and tokens this
        run spent."""
        base_done = self.done
        pending = self.pending(spec, deps, cfg, records, False)
        chars = sum(prompt_chars(s, r) for s, r in pending) * cfg.samples
        live = self.serve(cfg) if pending and self.serve is not None else cfg

        def progress(done: int, total: int, errors: int) -> None:
            if done == 0:
                self.total += total
            self.done = base_done + done
            self.emit(Judging(done=self.done, total=self.total))

        options = self.options.model_copy(update={"experiment": purpose, "promote": False})
        summary = await arun(
            [*deps, spec], records, self.store, live, options=options, dataset=label, progress=progress
        )
        tokens_in = sum(m.tokens_in for m in summary.metrics)
        tokens_out = sum(m.tokens_out for m in summary.metrics)
        cached = sum(m.tokens_cached for m in summary.metrics)
        self.bound.learn(cfg, chars, tokens_in, tokens_out, summary.calls)
        return Cost.of(cfg.label, summary.calls, tokens_in, tokens_out, cached)


def _answer(spec: Spec, res: JudgeResult | None, item_id: str) -> Answer | None:
    if res is None:
        return None
    for v in res.verdicts:
        if v.item_id == item_id:
            if v.status != "ok":
                kind = v.error_kind or error_kind(v.error or res.error)
                return Answer(reason=v.error, error_kind=kind.value)
            return Answer(label=v.label, value=None if v.value is None else float(v.value), reason=v.reason)
    return None


class StoreJudge:
    """:class:`greval.align.ports.JudgeFn` over the store: a spec version's verdicts on units' records."""

    def __init__(self, runs: StoreRuns, cfg: JudgeConfig, deps: Sequence[BaseSpec], records: dict[str, Record]) -> None:
        self.runs, self.cfg, self.deps, self.records = runs, cfg, list(deps), records

    def _records(self, units: Sequence[Unit]) -> list[Record]:
        return [self.records[h] for h in dict.fromkeys(u.record_hash for u in units)]

    def estimate(self, spec: Spec, units: Sequence[Unit], *, fresh: bool = False, extra_chars: int = 0) -> Cost:
        return self.runs.estimate(spec, self.deps, self.cfg, self._records(units), fresh=fresh, extra_chars=extra_chars)

    async def __call__(self, spec: Spec, units: Sequence[Unit]) -> Judged:
        records = self._records(units)
        cost = await self.runs.run(spec, self.deps, self.cfg, records, f"align {spec.name}@{spec.hash}")
        results = {r.hash: self.runs.result(spec, self.deps, self.cfg, r) for r in records}
        answers = {u.key: a for u in units if (a := _answer(spec, results[u.record_hash], u.item_id)) is not None}
        return Judged(answers=answers, cost=cost)


class StoreOptimizer:
    """:class:`greval.align.ports.Optimizer` over the store: the optimizer's questions asked as judge specs."""

    def __init__(self, runs: StoreRuns, cfg: JudgeConfig) -> None:
        self.runs, self.cfg = runs, cfg
        self.rewriter, self.reasoner = rewrite_spec(), reason_spec()

    def estimate_rewrite(self, request: RewriteRequest) -> Cost:
        return self.runs.estimate(self.rewriter, [], self.cfg, [rewrite_record(request)])

    async def rewrite(self, request: RewriteRequest) -> Proposal:
        rec = rewrite_record(request)
        label = f"align optimizer ({self.rewriter.name})"
        cost = await self.runs.run(self.rewriter, [], self.cfg, [rec], label, "align optimizer")
        res = self.runs.result(self.rewriter, [], self.cfg, rec)
        verdict = _answer(self.rewriter, res, "")
        if res is None or verdict is None or verdict.label is None:
            why = (verdict.reason if verdict is not None else None) or "no answer"
            return Proposal(edits=None, cost=cost, note=f"the optimizer gave no usable answer ({why})")
        edits = edits_from(res.outputs, verdict.label)
        return Proposal(edits=edits, cost=cost, note=None if edits else "the optimizer chose to keep the spec")

    def estimate_reasons(self, requests: Sequence[ReasonRequest]) -> Cost:
        return self.runs.estimate(self.reasoner, [], self.cfg, [reason_record(r) for r in requests])

    async def reasons(self, requests: Sequence[ReasonRequest]) -> Reasons:
        recs = [reason_record(r) for r in requests]
        label = f"align optimizer ({self.reasoner.name})"
        cost = await self.runs.run(self.reasoner, [], self.cfg, recs, label, "align optimizer")
        out: list[str | None] = []
        for rec in recs:
            res = self.runs.result(self.reasoner, [], self.cfg, rec)
            text = res.outputs.get("explanation") if res is not None and res.ok else None
            out.append(str(text) if text else None)
        return Reasons(reasons=tuple(out), cost=cost)

    def allowance(self, spec: Spec, rewrites: int, reasons: int) -> Cost:
        spec_chars = len(json.dumps(spec.canonical(), ensure_ascii=False))
        rewrite_chars = 4000 + 2 * spec_chars + 8 * (RECORD_CHARS + 800)  # instructions, spec, disagreements
        reason_chars = 2500 + RECORD_CHARS
        bound, cfg = self.runs.bound, self.cfg
        calls = (rewrites + reasons) * cfg.samples
        prompt = rewrites * bound.prompt(cfg, rewrite_chars) + reasons * bound.prompt(cfg, reason_chars)
        answers = (rewrites + reasons) * bound.answer(cfg)
        return Cost.of(cfg.label, calls, cfg.samples * prompt, cfg.samples * answers)


__all__ = [
    "DEFAULT_OUT_TOKENS",
    "DEFAULT_TOKENS_PER_CHAR",
    "StoreJudge",
    "StoreOptimizer",
    "StoreRuns",
    "TokenBound",
    "prompt_chars",
]

"""Simulated judges and optimizers for the pure core of ``greval align`` (no HTTP): answers are drawn from a
seeded hash of (spec version, unit), so they repeat exactly for the same version and differ between versions
only as sampling noise would, unless ``p_correct`` makes them depend on the prompt."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from greval.agreement.models import AgreementScale
from greval.align.models import Annotation, Answer, Cost, Judged, Unit
from greval.align.ports import Edits, Proposal, ReasonRequest, Reasons, RewriteRequest
from greval.dataset.sample import rank
from greval.spec import Spec, parse_spec

LABELS = ["yes", "no"]


def draw(*parts: str) -> float:
    return rank(0, *parts) / 2**256


def spec_two_labels(name: str = "supported") -> Spec:
    spec = parse_spec(
        {
            "name": name,
            "description": "Whether the answer is supported.",
            "steps": ["Read the answer.", "Decide."],
            "inputs": ["question", "answer"],
            "scale": {"kind": "categorical", "labels": {"yes": "Supported.", "no": "Not supported."}},
        }
    )
    assert isinstance(spec, Spec)
    return spec


def units(n: int, seed: int = 0, annotators: int = 1, chunks: int = 1) -> list[Unit]:
    """``n`` records with a balanced-ish true label each (``chunks`` units per record), one or more people."""
    out = []
    for i in range(n):
        truth = 0 if draw(str(seed), "truth", str(i)) < 0.5 else 1
        for c in range(chunks):
            key = f"r{i}" if chunks == 1 else f"r{i}/c{c}"
            anns = tuple(Annotation(annotator=f"p{a}", answer=LABELS[truth]) for a in range(annotators))
            out.append(
                Unit(
                    key=key,
                    record_id=f"r{i}",
                    record_hash=f"h{i}",
                    item_id="" if chunks == 1 else f"c{c}",
                    human=float(truth),
                    annotations=anns,
                )
            )
    return out


def records(us: Iterable[Unit]) -> dict[str, dict[str, object]]:
    return {u.record_hash: {"question": f"question {u.record_id}", "answer": f"answer {u.record_id}"} for u in us}


@dataclass
class SimJudge:
    """Right with probability ``p_correct(spec, unit)`` (prompt-independent by default), drawn per version."""

    seed: int = 0
    p_correct: Callable[[Spec, Unit], float] = lambda spec, unit: 0.7
    cache: set[tuple[str, str]] = field(default_factory=set)
    calls: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def estimate(self, spec: Spec, units: Sequence[Unit], *, fresh: bool = False, extra_chars: int = 0) -> Cost:
        version = spec.hash
        pending = {u.record_hash for u in units if fresh or (version, u.record_hash) not in self.cache}
        return Cost.of("sim:judge", len(pending), len(pending) * (80 + extra_chars // 2), 20 * len(pending))

    async def __call__(self, spec: Spec, units: Sequence[Unit]) -> Judged:
        cost = self.estimate(spec, units)
        version = spec.hash
        self.cache.update((version, u.record_hash) for u in units)
        self.calls.append((version, tuple(u.key for u in units)))
        answers = {}
        for u in units:  # the version computed once above: a spec's hash per unit was most of align's test time
            right = draw(str(self.seed), version, u.key) < self.p_correct(spec, u)
            code = int(u.human) if right else 1 - int(u.human)
            answers[u.key] = Answer(label=LABELS[code], reason=f"sim {version}")
        return Judged(answers=answers, cost=cost)


@dataclass
class SimOptimizer:
    """Proposes one extra step per request (``step`` names it); writes a fixed reason. One call each."""

    step: Callable[[RewriteRequest], str] = lambda req: f"Check rule {req.proposal}."
    requests: list[RewriteRequest] = field(default_factory=list)
    reason_requests: list[ReasonRequest] = field(default_factory=list)

    def estimate_rewrite(self, request: RewriteRequest) -> Cost:
        return Cost.of("sim:judge", 1, 400, 100)

    async def rewrite(self, request: RewriteRequest) -> Proposal:
        self.requests.append(request)
        return Proposal(
            edits=Edits(steps=("Read the answer.", self.step(request), "Decide.")),
            cost=Cost.of("sim:judge", 1, 400, 100),
        )

    def estimate_reasons(self, requests: Sequence[ReasonRequest]) -> Cost:
        return Cost.of("sim:judge", len(requests), 80 * len(requests), 20 * len(requests))

    async def reasons(self, requests: Sequence[ReasonRequest]) -> Reasons:
        self.reason_requests.extend(requests)
        return Reasons(reasons=tuple(f"because {r.answer}" for r in requests), cost=self.estimate_reasons(requests))

    def allowance(self, spec: Spec, rewrites: int, reasons: int) -> Cost:
        return Cost.of("sim:judge", rewrites + reasons, 400 * rewrites + 80 * reasons, 100 * rewrites + 20 * reasons)


SCALE = AgreementScale(kind="categorical", labels=LABELS)

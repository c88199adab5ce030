"""The objective, as ``greval agreement`` defines it, for one set of answers or many resamples of them.

Every figure comes from ``greval.agreement.stats`` (κ, weighted κ, accuracy and macro F1 from confusion
tallies; MAE from moment sums; Spearman from average ranks), fed the same arrays the agreement stage builds: the
people's consensus code (or mean value) per unit, the judge's code with an invalid answer counted as wrong
(nominal: a code of its own; ordered: the label farthest from the people's; values: the scale end farthest
from them). A point estimate is the statistic of one "resample" that holds every unit once; design weights
(1/π) enter as weighted counts, as ``greval.agreement.design`` weighs them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from greval.agreement import bootstrap as bs
from greval.agreement import stats as st
from greval.agreement.design import stratified_counts
from greval.agreement.models import AgreementScale
from greval.align.models import (
    CATEGORICAL_OBJECTIVES,
    LOWER_IS_BETTER,
    VALUE_OBJECTIVES,
    Answer,
    ConfusionTable,
    Difference,
    Objective,
    Unit,
)
from greval.errors import UserError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def default_objective(scale: AgreementScale) -> Objective:
    return "kappa" if scale.kind == "categorical" else "mae"


def check_objective(objective: Objective, scale: AgreementScale) -> None:
    """One line when the objective does not fit the scale."""
    allowed = CATEGORICAL_OBJECTIVES if scale.kind == "categorical" else VALUE_OBJECTIVES
    if objective not in allowed or (
        objective == "weighted_kappa" and scale.kind == "categorical" and not scale.ordered
    ):
        what = "unordered labels" if scale.kind == "categorical" and objective in allowed else f"a {scale.kind} scale"
        fits = [o for o in allowed if not (o == "weighted_kappa" and scale.kind == "categorical" and not scale.ordered)]
        raise UserError(f"objective {objective!r} does not fit {what}; use one of: {', '.join(fits)}")


def _onehot(cells: IntArray, n_cells: int) -> FloatArray:
    out = np.zeros((len(cells), n_cells), dtype=np.float64)
    out[np.arange(len(cells)), cells] = 1.0
    return out


class Scorer:
    """The objective on a scale: ``point`` for one set of answers, ``difference`` for a paired comparison."""

    def __init__(self, scale: AgreementScale, objective: Objective) -> None:
        check_objective(objective, scale)
        self.scale = scale
        self.objective = objective
        self.sign = -1.0 if objective in LOWER_IS_BETTER else 1.0
        self.perfect = 0.0 if objective in LOWER_IS_BETTER else 1.0  # no candidate can do better than this
        self.labels = list(scale.labels or [])
        self.index = {lab: i for i, lab in enumerate(self.labels)}

    # ------------------------------------------------------------------------------------ arrays
    def judge_codes(self, units: Sequence[Unit], answers: Mapping[str, Answer]) -> tuple[IntArray, IntArray]:
        """Nominal codes (k = invalid) and positions (invalid → the label farthest from the people's)."""
        k = len(self.labels)
        h = np.array([int(u.human) for u in units], dtype=np.int64)
        nom = np.array([self._code(answers.get(u.key)) for u in units], dtype=np.int64)
        pos = np.where(nom == k, st.worst_case_codes(h, k), nom).astype(np.int64)
        return nom, pos

    def _code(self, a: Answer | None) -> int:
        if a is None or a.label is None:
            return len(self.labels)
        return self.index.get(a.label, len(self.labels))

    def judge_values(self, units: Sequence[Unit], answers: Mapping[str, Answer]) -> FloatArray:
        """Values, an invalid answer as the scale end farthest from the people's (the agreement stage's rule)."""
        lo, hi = self.scale.min, self.scale.max
        out = []
        for u in units:
            a = answers.get(u.key)
            if a is not None and a.value is not None and lo is not None and hi is not None and lo <= a.value <= hi:
                out.append(float(a.value))
            elif lo is not None and hi is not None:
                out.append(hi if (u.human - lo) < (hi - u.human) else lo)
            else:
                out.append(np.nan)
        return np.array(out, dtype=np.float64)

    # ------------------------------------------------------------------------------- statistics
    def batch(self, units: Sequence[Unit], answers: Mapping[str, Answer]) -> _Batch:
        """The objective of any number of resamples of these units, given as counts (R × units)."""
        k = len(self.labels)
        if self.scale.kind == "categorical":
            h = np.array([int(u.human) for u in units], dtype=np.int64)
            nom, pos = self.judge_codes(units, answers)
            if self.objective == "weighted_kappa":
                return _Batch(self, _onehot(h * k + pos, k * k), (k, k), None)
            return _Batch(self, _onehot(h * (k + 1) + nom, (k + 1) ** 2), (k + 1, k + 1), None)
        hv = np.array([u.human for u in units], dtype=np.float64)
        jv = self.judge_values(units, answers)
        if self.objective == "mae":
            return _Batch(self, st.value_features(hv, jv), None, None)
        if self.objective == "spearman":
            return _Batch(self, np.zeros((len(units), 0)), None, (jv, hv))
        domain = None
        if self.scale.min is not None and self.scale.max is not None:
            domain = [float(v) for v in range(int(self.scale.min), int(self.scale.max) + 1)]
        codes = st.value_kappa_codes(hv, jv, domain)
        if isinstance(codes, str):
            return _Batch(self, np.zeros((len(units), 0)), None, None, undefined=codes)
        hc, jc, n = codes
        return _Batch(self, _onehot(hc * n + jc, n * n), (n, n), None)

    def point(self, units: Sequence[Unit], answers: Mapping[str, Answer]) -> tuple[float | None, str | None]:
        """The objective over these units (design-weighted when they carry inclusion probabilities), without the
        units whose answer is :attr:`Answer.excluded` (see :func:`reached`)."""
        units = reached(units, answers)
        if not units:
            return None, "no units"
        w = weights(units)
        values, notes = self.batch(units, answers).values(w[None, :])
        return (float(values[0]), None) if np.isfinite(values[0]) else (None, str(notes[0] or "undefined"))

    def difference(
        self,
        units: Sequence[Unit],
        old: Mapping[str, Answer],
        new: Mapping[str, Answer],
        resamples: int = bs.RESAMPLES,
        seed: int = 0,
        level: float = bs.LEVEL,
    ) -> Difference:
        """:meth:`paired_gain` with its bootstrap given as numbers."""
        return self.paired_gain(units, old, new, bs.Resampling(resamples=resamples, seed=seed, level=level))

    def paired_gain(
        self, units: Sequence[Unit], old: Mapping[str, Answer], new: Mapping[str, Answer], resampling: bs.Resampling
    ) -> Difference:
        """The paired gain new − old (old − new for MAE) with a percentile bootstrap CI: whole records are
        resampled (the same resamples for both versions), or units within the strata of a review design,
        weighted by 1/π. A unit either version could not be judged on (:attr:`Answer.excluded`) is left out of
        both, and counted."""
        kept = reached(reached(units, old), new)
        excluded, units = len(units) - len(kept), kept
        a, b = self.batch(units, old), self.batch(units, new)
        w = weights(units)
        design = is_design(units)
        old_v, new_v = self.point(units, old)[0], self.point(units, new)[0]
        gain = None if old_v is None or new_v is None else self.sign * (new_v - old_v)
        groups = sorted({u.record_hash for u in units})
        diffs: list[FloatArray] = []
        for counts in _resamples(units, resampling, design):
            va, _ = a.values(counts * w[None, :])
            vb, _ = b.values(counts * w[None, :])
            d = self.sign * (vb - va)
            diffs.append(d[np.isfinite(d)])
        ci = resampling.summarise({"gain": np.concatenate(diffs) if diffs else np.zeros(0)})["gain"]
        note = ci.note
        if self.objective == "spearman" and design:
            note = "; ".join(x for x in (note, "Spearman is not design-weighted: each unit counts once") if x)
        return Difference(
            old=old_v,
            new=new_v,
            gain=gain,
            ci_low=ci.low if gain is not None else None,
            ci_high=ci.high if gain is not None else None,
            level=resampling.level,
            resamples=resampling.resamples,
            unit="units within design strata" if design else "records",
            n_units=len(units),
            n_records=len(groups),
            weighted=design,
            note=note if gain is not None else "the objective is undefined on the test part for a version",
            excluded=excluded,
        )


def part_table(scorer: Scorer, units: Sequence[Unit], answers: Mapping[str, Answer], version: str) -> ConfusionTable:
    """Accuracy, confusion and per-label precision / recall of one version's answers (scikit-learn's
    definitions; an invalid or missing answer is its own column, wrong for every label)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, precision_recall_fscore_support

    k = len(scorer.labels)
    nom, _ = scorer.judge_codes(units, answers)
    human = np.array([int(u.human) for u in units], dtype=np.int64)
    cells = confusion_matrix(human, nom, labels=list(range(k + 1))) if len(units) else np.zeros((k + 1, k + 1))
    p, r, _, _ = precision_recall_fscore_support(human, nom, labels=list(range(k)), zero_division=0.0)
    return ConfusionTable(
        version=version,
        n=len(units),
        accuracy=float(accuracy_score(human, nom)) if len(units) else float("nan"),
        labels=tuple(scorer.labels),
        confusion=tuple(tuple(int(c) for c in row) for row in cells[:k]),
        precision={lab: float(p[i]) for i, lab in enumerate(scorer.labels)},
        recall={lab: float(r[i]) for i, lab in enumerate(scorer.labels)},
    )


def reached(units: Sequence[Unit], answers: Mapping[str, Answer]) -> list[Unit]:
    """The units whose answer is not :attr:`Answer.excluded` (a missing answer stays: it counts as wrong)."""
    return [u for u in units if not ((a := answers.get(u.key)) is not None and a.excluded)]


class _Batch:
    """The per-unit terms of one set of answers, from which any resample's objective follows."""

    def __init__(
        self,
        scorer: Scorer,
        terms: FloatArray,
        square: tuple[int, int] | None,
        ranks: tuple[FloatArray, FloatArray] | None,
        undefined: str | None = None,
    ) -> None:
        self.scorer, self.terms, self.square, self.ranks, self.undefined = scorer, terms, square, ranks, undefined

    def values(self, counts: FloatArray) -> tuple[FloatArray, npt.NDArray[np.object_]]:
        """The objective of each resample (rows of ``counts``: how often, or how heavily, each unit counts)."""
        r = counts.shape[0]
        if self.undefined is not None:
            return np.full(r, np.nan), np.full(r, self.undefined, dtype=object)
        obj = self.scorer.objective
        if self.ranks is not None:  # Spearman: not vectorised, one resample at a time (as the agreement stage)
            x, y = self.ranks
            vals = np.full(r, np.nan)
            notes = np.full(r, None, dtype=object)
            for i in range(r):
                idx = np.repeat(np.arange(len(x)), np.rint(counts[i]).astype(np.int64))
                v, note = st.correlation("spearman", x[idx], y[idx])
                vals[i] = np.nan if v is None else v
                notes[i] = note
            return vals, notes
        sums = counts @ self.terms
        if self.square is None:  # MAE from the moment sums
            const = np.zeros(r, dtype=np.bool_)
            return st.moment_metrics(sums, const, const)["mae"]
        cm = sums.reshape(r, *self.square)
        as_counts: IntArray = cm  # type: ignore[assignment]  # the stats are ratios of sums: weights may stand in
        if obj == "accuracy":
            return st.accuracy_from(as_counts)
        if obj == "macro_f1":
            return st.macro_f1_from(as_counts, len(self.scorer.labels))
        weights_kind: st.Weights = "quadratic" if obj == "weighted_kappa" else None
        return st.kappa_from(as_counts, weights_kind)


def weights(units: Sequence[Unit]) -> FloatArray:
    """1/π per unit under a review design, else 1."""
    if not is_design(units):
        return np.ones(len(units), dtype=np.float64)
    return np.array([1.0 / (u.probability or 1.0) for u in units], dtype=np.float64)


def is_design(units: Sequence[Unit]) -> bool:
    """Whether the units came from a review design with unequal inclusion probabilities (else weights change
    nothing, as ``greval.agreement.design.design_report`` decides)."""
    probs = {u.probability for u in units}
    return None not in probs and len(probs) > 1


def _resamples(units: Sequence[Unit], resampling: bs.Resampling, design: bool) -> list[FloatArray]:
    """(R × units) counts in batches: whole records drawn with replacement, or units within design strata
    (strata taken whole, every π = 1, kept fixed), as the agreement stage resamples."""
    if design:
        _, codes = np.unique(np.array([u.stratum or "" for u in units], dtype=object), return_inverse=True)
        strata = codes.reshape(-1).astype(np.int64)
        p = np.array([u.probability or 1.0 for u in units])
        census = np.array([bool(np.all(p[strata == s] >= 1.0)) for s in range(int(strata.max()) + 1)])
        return [stratified_counts(strata, resampling.resamples, resampling.seed, census)]
    _, groups = np.unique(np.array([u.record_hash for u in units], dtype=object), return_inverse=True)
    sampler = resampling.resampler(len(units), groups.reshape(-1).astype(np.int64))
    return [b.unit_weights()[:, sampler.unit_of_row] for b in sampler.batches()]


__all__ = ["Scorer", "check_objective", "default_objective", "is_design", "weights"]

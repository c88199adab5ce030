"""The human ceiling: how well people agree with each other on items two or more of them labelled, next to the
judge as one more annotator (mean pairwise figure, and Krippendorff's α with and without the judge)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from greval.agreement import resampling
from greval.agreement import stats as st
from greval.agreement.models import AgreementOptions, AgreementScale, Ceiling, PairAgreement, PairEstimate
from greval.agreement.prepare import Prepared
from greval.agreement.resampling import estimate
from greval.agreement.stats import FloatArray, IntArray, Val


@dataclass
class _Setup:
    """What the ceiling compares: the annotators × items matrix, the judge's row, the figure and its codes."""

    names: list[str]
    mat: FloatArray
    judge: FloatArray
    metric: str
    level: st.Level
    n_codes: int
    domain: list[float] | None


def ceiling_metric(scale: AgreementScale) -> tuple[str, st.Level]:
    """The pairwise figure of people (and of the judge with each) on this scale, and α's level."""
    if scale.kind == "value":
        return "pearson", "interval"
    if scale.ordered:
        return "quadratic_kappa", "ordinal"
    return "cohen_kappa", "nominal"


def _setup(prep: Prepared) -> _Setup | None:
    """None without two annotators on some item."""
    mat = prep.human_matrix
    if mat is None or len(prep.annotators) < 2:
        return None
    if not (np.sum(~np.isnan(mat), axis=0) >= 2).any():
        return None
    scale = prep.scale
    k = len(scale.labels or [])
    metric, level = ceiling_metric(scale)
    judge = prep.ceil_judge_nom if metric == "cohen_kappa" else prep.ceil_judge_pos
    n_codes = k + 1 if (metric == "cohen_kappa" and bool(np.any(judge == k))) else k
    domain: list[float] | None = list(map(float, range(n_codes))) if scale.kind == "categorical" else None
    return _Setup(prep.annotators, mat, judge, metric, level, n_codes, domain)


def _human_pairs(s: _Setup, cols: IntArray) -> list[PairAgreement]:
    """On the items `cols`: each pair of people on the items both labelled (where they disagree, a tie between
    two, it counts as a disagreement: nothing is left out)."""
    m = s.mat[:, cols]
    hp = []
    for a, b in itertools.combinations(range(len(s.names)), 2):
        both = ~np.isnan(m[a]) & ~np.isnan(m[b])
        v, note = st.pairwise(s.metric, m[a][both], m[b][both], s.n_codes)
        hp.append(PairAgreement(a=s.names[a], b=s.names[b], n=int(both.sum()), value=v, note=note))
    return hp


def _pairs(s: _Setup, cols: IntArray, max_values: int) -> tuple[list[PairAgreement], list[PairAgreement], Val, Val]:
    """On the items `cols`: each pair of people, the judge with each person, α of people and of people + judge."""
    m = s.mat[:, cols]
    jrow = s.judge[cols]
    hp, jp = _human_pairs(s, cols), []
    for a in range(len(s.names)):
        both = ~np.isnan(m[a]) & ~np.isnan(jrow)
        v, note = st.pairwise(s.metric, jrow[both], m[a][both], s.n_codes)
        jp.append(PairAgreement(a="judge", b=s.names[a], n=int(both.sum()), value=v, note=note))
    ah = st.alpha(m, s.level, s.domain, max_values)
    aj = st.alpha(np.vstack([m, jrow[None, :]]), s.level, s.domain, max_values)
    return hp, jp, ah, aj


def _mean_of(ps: list[PairAgreement]) -> Val:
    vals = [p.value for p in ps if p.value is not None]
    if not vals:
        return None, "no annotator pair has a defined value"
    return float(np.mean(vals)), None


def ceiling(prep: Prepared, options: AgreementOptions) -> Ceiling | None:
    """Human–human agreement on items with ≥2 annotators, next to the judge as one more annotator."""
    s = _setup(prep)
    if s is None:
        return None
    hp, jp, ah, aj = _pairs(s, np.arange(s.mat.shape[1], dtype=np.int64), options.alpha_max_values)

    def stat(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        h2, j2, a2, b2 = _pairs(s, idx, options.alpha_max_values)
        return {
            "human_pairwise_mean": _mean_of(h2),
            "judge_pairwise_mean": _mean_of(j2),
            "human_alpha": a2,
            "alpha_with_judge": b2,
        }

    cis = resampling.cis(options, s.mat.shape[1], prep.ceil_groups, stat, protocol=False)
    labelled = np.sum(~np.isnan(s.mat), axis=0)
    n_multi = int((labelled >= 2).sum())
    n_judge = int(np.sum(~np.isnan(s.judge)))
    n_with_judge = int(np.sum(labelled + ~np.isnan(s.judge) >= 2))
    return Ceiling(
        metric=s.metric,
        alpha_level=s.level,
        n_annotators=len(s.names),
        n_items_multi=n_multi,
        human_pairs=hp,
        judge_pairs=jp,
        human_pairwise_mean=estimate(_mean_of(hp), n_multi, cis.get("human_pairwise_mean")),
        judge_pairwise_mean=estimate(_mean_of(jp), n_judge, cis.get("judge_pairwise_mean")),
        human_alpha=estimate(ah, n_multi, cis.get("human_alpha")),
        alpha_with_judge=estimate(aj, n_with_judge, cis.get("alpha_with_judge")),
    )


def pair_estimates(prep: Prepared, options: AgreementOptions) -> list[PairEstimate]:
    """Each pair of people's figure (the ceiling's `human_pairs`, the same values) with a bootstrap CI from the
    ceiling's resamples (labelled items, or whole groups / records)."""
    s = _setup(prep)
    if s is None:
        return []
    points = _human_pairs(s, np.arange(s.mat.shape[1], dtype=np.int64))

    def stat(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        return {f"{p.a}|{p.b}": (p.value, p.note) for p in _human_pairs(s, idx)}

    cis = resampling.cis(options, s.mat.shape[1], prep.ceil_groups, stat, protocol=False)
    return [
        PairEstimate(a=p.a, b=p.b, estimate=estimate((p.value, p.note), p.n, cis.get(f"{p.a}|{p.b}"))) for p in points
    ]

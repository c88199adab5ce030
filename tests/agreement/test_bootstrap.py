"""agreement/bootstrap.py: the vectorised bootstrap equals the per-resample one it replaced (the same draws, tallies,
sums and CIs), whatever the batch size."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import krippendorff
import numpy as np
import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from scipy import stats as sps
from sklearn import metrics as skm

from greval.agreement import AgreementOptions, AgreementScale, Estimate, compute_agreement
from greval.agreement import bootstrap as bs
from greval.agreement.headline import BIAS_KEYS
from greval.agreement.prepare import MISSING, prepare
from greval.agreement.stats import corrected_prevalence
from tests.agreement.conftest import TOL

BOOT_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


Ref = dict[str, float | None]


def ref_draws(n: int, groups: np.ndarray | None, resamples: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """greval's draws before batching: one rng.integers call per resample."""
    rng = np.random.default_rng(seed)
    units = (
        [np.array([i]) for i in range(n)]
        if groups is None
        else [np.flatnonzero(groups == g) for g in np.unique(groups)]
    )
    m = len(units)
    if m == 0:
        return
    sizes = np.array([len(u) for u in units])
    for _ in range(resamples):
        pick = rng.integers(0, m, size=m)
        if groups is None:
            yield pick, pick
        else:
            yield np.concatenate([units[p] for p in pick]), np.repeat(np.arange(m), sizes[pick])


def quiet(fn: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def finite(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def ref_kappa(h: np.ndarray, j: np.ndarray, n_codes: int, weights: str | None = None) -> float | None:
    if len(h) < 2 or len(np.unique(np.concatenate([h, j]))) == 1:
        return None
    return finite(quiet(lambda: skm.cohen_kappa_score(h, j, labels=list(range(n_codes)), weights=weights)))


def ref_alpha(data: np.ndarray, level: str, domain: list[float] | None, max_values: int) -> float | None:
    coded = data[~np.isnan(data)]
    if np.sum(np.sum(~np.isnan(data), axis=0) >= 2) < 1 or len(np.unique(coded)) < 2:
        return None
    values = np.unique(coded) if domain is None else domain
    if len(values) > max_values:
        return None
    return finite(quiet(lambda: krippendorff.alpha(data, value_domain=domain, level_of_measurement=level)))


def ref_categorical(
    h: np.ndarray, jn: np.ndarray, jo: np.ndarray, inv: np.ndarray, k: int, ordered: bool, scores: np.ndarray | None
) -> Ref:
    n_codes = k + 1 if inv.any() else k
    n = len(h)
    out: Ref = {
        "accuracy": float(skm.accuracy_score(h, jn)) if n else None,
        "balanced_accuracy": finite(quiet(lambda: skm.balanced_accuracy_score(h, jn))) if n else None,
        "macro_f1": float(quiet(lambda: skm.f1_score(h, jn, labels=list(range(k)), average="macro", zero_division=0)))
        if n
        else None,
        "cohen_kappa": ref_kappa(h, jn, n_codes),
    }
    acc = out["accuracy"]
    out["disagreement_rate"] = None if acc is None else 1.0 - acc
    out["alpha_nominal"] = ref_alpha(np.vstack([h, jn]).astype(float), "nominal", list(range(n_codes)), 30)
    if ordered:
        out["linear_kappa"] = ref_kappa(h, jo, k, "linear")
        out["quadratic_kappa"] = ref_kappa(h, jo, k, "quadratic")
        out["alpha_ordinal"] = ref_alpha(np.vstack([h, jo]).astype(float), "ordinal", list(range(k)), 30)
        hv, jv = h[~inv], jo[~inv]
        some = len(hv) > 0
        out["judge_above_rate"] = float(np.mean(jv > hv)) if some else None
        out["judge_below_rate"] = float(np.mean(jv < hv)) if some else None
        out["mean_signed_steps"] = float(np.mean(jv - hv)) if some else None
        if scores is not None:
            out["mean_signed_score"] = float(np.mean(scores[jv] - scores[hv])) if some else None
    return out


def ref_correlation(kind: str, x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 2 or np.all(x == x[0]) or np.all(y == y[0]):
        return None
    fn = {"pearson": sps.pearsonr, "spearman": sps.spearmanr, "kendall": sps.kendalltau}[kind]
    return finite(quiet(lambda: fn(x, y)[0]))


def ref_value(h: np.ndarray, j: np.ndarray, groups: np.ndarray | None, domain: list[float] | None) -> Ref:
    out: Ref = {
        "mae": float(skm.mean_absolute_error(h, j)),
        "rmse": float(skm.root_mean_squared_error(h, j)),
        "mean_signed_error": float(np.mean(j - h)),
        "exact_agreement": float(np.mean(j == h)),
        "within_1": float(np.mean(np.abs(j - h) <= 1.0)),
    }
    for kind in ("pearson", "spearman", "kendall"):
        if groups is None:
            out[kind] = ref_correlation(kind, j, h)
        else:
            vals = [
                v for g in np.unique(groups) if (v := ref_correlation(kind, j[groups == g], h[groups == g])) is not None
            ]
            out[kind] = float(np.mean(vals)) if vals else None
    integer = bool(np.all(h == np.round(h)) and np.all(j == np.round(j)))
    cats = domain if domain is not None else sorted(set(h.tolist()) | set(j.tolist()))
    index = {c: i for i, c in enumerate(cats)}
    out["linear_kappa"] = out["quadratic_kappa"] = None
    if integer and all(v in index for v in h.tolist() + j.tolist()):
        hc = np.array([index[v] for v in h.tolist()])
        jc = np.array([index[v] for v in j.tolist()])
        out["linear_kappa"] = ref_kappa(hc, jc, len(cats), "linear")
        out["quadratic_kappa"] = ref_kappa(hc, jc, len(cats), "quadratic")
    data = np.vstack([h, j])
    out["alpha_interval"] = ref_alpha(data, "interval", None, 30)
    out["alpha_ordinal"] = ref_alpha(data, "ordinal", None, 30)
    return out


def ref_prevalence(all_j: np.ndarray, all_h: np.ndarray, k: int, idx: np.ndarray) -> Ref:
    """The old per-resample corrected prevalence (greval's own estimator; not a library's)."""
    aj, ah = all_j[idx], all_h[idx]
    judged = aj[aj != MISSING]
    q = np.bincount(judged, minlength=k).astype(float) / max(len(judged), 1)
    both = (aj != MISSING) & (ah != MISSING)
    cm = np.bincount(ah[both] * k + aj[both], minlength=k * k).reshape(k, k).astype(np.int64)
    pi = corrected_prevalence(q, cm)[0] if len(judged) else None
    return {str(i): None if pi is None else float(pi[i]) for i in range(k)}


def ref_cis(
    draws: Iterator[tuple[np.ndarray, np.ndarray]], stat: Callable[[np.ndarray, np.ndarray], Ref], resamples: int
) -> dict[str, tuple[float, float] | None]:
    """Percentile 95% CIs; None where fewer than max(2, B/2) resamples were defined."""
    samples: dict[str, list[float]] = {}
    for idx, inst in draws:
        for name, v in stat(idx, inst).items():
            bucket = samples.setdefault(name, [])
            if v is not None:
                bucket.append(v)
    out: dict[str, tuple[float, float] | None] = {}
    for name, vals in samples.items():
        if len(vals) < max(2, resamples // 2):
            out[name] = None
        else:
            lo, hi = np.quantile(np.asarray(vals), [0.025, 0.975])
            out[name] = float(lo), float(hi)
    return out


def same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(a - b) <= TOL


def check_report(metrics: dict[str, Estimate], point: Ref, cis: dict[str, tuple[float, float] | None]) -> None:
    assert set(metrics) == set(point)
    for name, e in metrics.items():
        assert same(e.value, point[name]), (name, e.value, point[name])
        ci = cis.get(name)
        if e.value is None:
            continue
        if ci is None:
            assert e.ci_low is None and e.ci_high is None, name
        else:
            assert same(e.ci_low, ci[0]) and same(e.ci_high, ci[1]), (name, (e.ci_low, e.ci_high), ci)


@settings(max_examples=200, deadline=None)
@given(m=hs.integers(1, 2**40), rows=hs.integers(1, 8), size=hs.integers(1, 40), seed=hs.integers(0, 2**32))
def test_one_matrix_draw_equals_sequential_draws(m: int, rows: int, size: int, seed: int) -> None:
    """What lets the batches keep today's random indices: numpy's Generator fills an (R, m) call from the
    same stream as R calls of size m (and leaves the generator in the same state)."""
    a, b = np.random.default_rng(seed), np.random.default_rng(seed)
    batch = a.integers(0, m, size=(rows, size))
    seq = np.stack([b.integers(0, m, size=size) for _ in range(rows)])
    assert np.array_equal(batch, seq)
    assert a.integers(0, 2**62) == b.integers(0, 2**62)


@BOOT_SETTINGS
@given(
    groups=hs.lists(hs.integers(0, 6), min_size=1, max_size=30),
    clustered=hs.booleans(),
    resamples=hs.integers(1, 25),
    seed=hs.integers(0, 2**20),
    max_cells=hs.sampled_from([1, 7, 64, bs.MAX_CELLS]),
)
def test_batches_give_the_reference_draws_tallies_and_sums(
    groups: list[int], clustered: bool, resamples: int, seed: int, max_cells: int
) -> None:
    n = len(groups)
    g = np.array(groups, dtype=np.int64) if clustered else None
    sampler = bs.Resampler(n, g, resamples, seed, max_cells=max_cells)
    ref = list(ref_draws(n, g, resamples, seed))
    got = list(sampler.draws())
    assert len(got) == len(ref) == resamples
    for (i1, c1), (i2, c2) in zip(got, ref, strict=True):
        assert np.array_equal(i1, i2) and np.array_equal(c1, c2)
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 5, n).astype(np.int64)
    x = rng.normal(size=n).round(1)
    values = np.column_stack([x, x * x])
    r = 0
    for batch in sampler.batches():
        tallies, sums, const = batch.tally(codes, 5), batch.sums(values), batch.constant(x)
        for t, s, c in zip(tallies, sums, const, strict=True):
            idx = ref[r][0]
            assert np.array_equal(t, np.bincount(codes[idx], minlength=5))
            assert np.allclose(s, values[idx].sum(axis=0), rtol=0, atol=1e-12)
            assert c == bool(np.all(x[idx] == x[idx][0]))
            r += 1
    assert r == resamples


LABELS = ["a", "b", "c", "d"]


@BOOT_SETTINGS
@given(
    k=hs.integers(2, 4),
    rows=hs.lists(
        hs.tuples(
            hs.integers(0, 4), hs.integers(0, 4), hs.integers(0, 5)
        ),  # human (4 = missing), judge (≥k invalid), group
        min_size=1,
        max_size=40,
    ),
    ordered=hs.booleans(),
    with_scores=hs.booleans(),
    grouped=hs.booleans(),
    resamples=hs.integers(2, 40),
    seed=hs.integers(0, 2**16),
)
def test_categorical_bootstrap_equals_the_per_resample_reference(
    k: int,
    rows: list[tuple[int, int, int]],
    ordered: bool,
    with_scores: bool,
    grouped: bool,
    resamples: int,
    seed: int,
) -> None:
    labels = LABELS[:k]
    human = [None if h == 4 else labels[h % k] for h, _, _ in rows]
    judge = [labels[j] if j < k else "???" for _, j, _ in rows]
    df = pd.DataFrame({"item": [f"i{n}" for n in range(len(rows))], "judge": judge, "human": human})
    if grouped:
        df["group"] = [g for _, _, g in rows]
    scores = {lab: float(i * i) for i, lab in enumerate(labels)} if ordered and with_scores else None
    scale = AgreementScale(kind="categorical", labels=labels, ordered=ordered, scores=scores)
    options = AgreementOptions(bootstrap=resamples, seed=seed, alpha_max_values=30)
    if all(h is None for h in human):
        return
    rep = compute_agreement(df, scale, options)
    prep = prepare(df, scale, options)
    sc = None if scores is None else np.array([scores[lab] for lab in labels])

    def stat(idx: np.ndarray, _inst: np.ndarray) -> Ref:
        return ref_categorical(prep.h[idx], prep.j_nom[idx], prep.j_ord[idx], prep.invalid[idx], k, ordered, sc)

    everything = np.arange(len(prep.h))
    point = stat(everything, everything)
    cis = ref_cis(ref_draws(len(prep.h), prep.groups, resamples, seed), stat, resamples)
    if len(np.unique(prep.h)) == 1:  # people gave one label: κ is undefined (greval's rule; the libraries say 0)
        for name in ("cohen_kappa", "linear_kappa", "quadratic_kappa"):
            if name in point:
                point[name], cis[name] = None, None
    metrics = dict(rep.metrics)
    bias = rep.categorical.bias if rep.categorical is not None else None
    for name in BIAS_KEYS:
        if bias is not None and (e := getattr(bias, name)) is not None:
            metrics[name] = e
    check_report(metrics, point, cis)

    # prevalence: bootstrapped over every row with a judge or a human label
    assert rep.categorical is not None
    prev = rep.categorical.prevalence
    n_all = len(prep.all_j)
    prev_cis = ref_cis(
        ref_draws(n_all, prep.all_groups, resamples, seed),
        lambda idx, _inst: ref_prevalence(prep.all_j, prep.all_h, k, idx),
        resamples,
    )
    ref_point = ref_prevalence(prep.all_j, prep.all_h, k, np.arange(n_all))
    for i, e in enumerate(prev.corrected):
        assert same(e.value, ref_point[str(i)])
        ci = prev_cis[str(i)]
        if e.value is not None and ci is not None:
            assert same(e.ci_low, ci[0]) and same(e.ci_high, ci[1])


@BOOT_SETTINGS
@given(
    k=hs.integers(2, 4),
    rows=hs.lists(hs.tuples(hs.integers(0, 3), hs.integers(0, 3), hs.booleans()), min_size=1, max_size=30),
    ordered=hs.booleans(),
)
def test_invalid_answers_already_turned_into_labels_add_no_category(
    k: int, rows: list[tuple[int, int, bool]], ordered: bool
) -> None:
    """`invalid_code=False` (e.g. an invalid verdict scored as the opposite label): no extra nominal code."""
    from greval.agreement import stats as st

    h = np.array([r[0] % k for r in rows], dtype=np.int64)
    j = np.array([r[1] % k for r in rows], dtype=np.int64)
    inv = np.array([r[2] for r in rows])
    got = st.categorical_metrics(h, j, j, inv, k, ordered, 30, None, invalid_code=False)
    ref = ref_categorical(h, j, j, np.zeros(len(h), dtype=bool), k, ordered, None)
    for name in ("judge_above_rate", "judge_below_rate", "mean_signed_steps"):  # valid answers only
        if ordered:
            hv, jv = h[~inv], j[~inv]
            ref[name] = (
                None
                if not len(hv)
                else {
                    "judge_above_rate": float(np.mean(jv > hv)),
                    "judge_below_rate": float(np.mean(jv < hv)),
                    "mean_signed_steps": float(np.mean(jv - hv)),
                }[name]
            )
    assert set(got) == set(ref)
    for name, (value, _) in got.items():
        assert same(value, ref[name]), (name, value, ref[name])


@BOOT_SETTINGS
@given(
    rows=hs.lists(hs.tuples(hs.integers(1, 5), hs.integers(1, 5), hs.integers(0, 5)), min_size=1, max_size=40),
    fractional=hs.booleans(),
    bounded=hs.booleans(),
    grouped=hs.booleans(),
    resamples=hs.integers(2, 40),
    seed=hs.integers(0, 2**16),
)
def test_value_bootstrap_equals_the_per_resample_reference(
    rows: list[tuple[int, int, int]],
    fractional: bool,
    bounded: bool,
    grouped: bool,
    resamples: int,
    seed: int,
) -> None:
    """The pooled protocol, with rows or whole groups resampled (the per-group protocol is computed one
    resample at a time, within groups: test_agreement.py checks it against scikit-learn / scipy)."""
    h = np.array([r[0] for r in rows], dtype=float)
    j = np.array([r[1] for r in rows], dtype=float)
    if fractional:
        j = np.clip(j + np.linspace(-0.4, 0.4, len(j)), 1, 5)
    df = pd.DataFrame({"item": [f"i{n}" for n in range(len(rows))], "judge": j, "human": h})
    protocol = "pooled"
    if grouped:
        df["group"] = [r[2] for r in rows]
    scale = AgreementScale(kind="value", min=1 if bounded else None, max=5 if bounded else None)
    options = AgreementOptions(bootstrap=resamples, seed=seed, protocol=protocol, alpha_max_values=30)
    rep = compute_agreement(df, scale, options)
    prep = prepare(df, scale, options)
    domain = [1.0, 2.0, 3.0, 4.0, 5.0] if bounded else None

    def stat(idx: np.ndarray, inst: np.ndarray | None) -> Ref:
        return ref_value(prep.hv[idx], prep.jv[idx], inst if protocol == "per-group" else None, domain)

    point = stat(np.arange(len(prep.hv)), prep.groups)
    cis = ref_cis(ref_draws(len(prep.hv), prep.groups, resamples, seed), stat, resamples)
    if len(np.unique(prep.hv)) == 1:  # people gave one value: κ is undefined (greval's rule; the libraries say 0)
        for name in ("cohen_kappa", "linear_kappa", "quadratic_kappa"):
            if name in point:
                point[name], cis[name] = None, None
    check_report(rep.metrics, point, cis)


def test_batch_size_does_not_change_the_cis() -> None:
    rng = np.random.default_rng(5)
    h = rng.integers(0, 3, 300)
    j = np.where(rng.random(300) < 0.6, h, rng.integers(0, 3, 300))
    from greval.agreement import stats as st

    def three(b: bs.Batch) -> dict[str, np.ndarray]:
        cm = b.tally(h * 3 + j, 9).reshape(b.size, 3, 3)
        return {"acc": st.accuracy_from(cm)[0], "kappa": st.kappa_from(cm)[0], "f1": st.macro_f1_from(cm, 3)[0]}

    runs = [bs.run(bs.Resampler(300, None, 200, 1, max_cells=c), None, 0.95, three) for c in (1, 1000, 10**7)]
    for name in ("acc", "kappa", "f1"):
        assert len({(r[name].low, r[name].high) for r in runs}) == 1


# ------------------------------------------------------------------------------ Resampling: one bundle
def test_a_resampling_bundle_gives_the_figures_its_keywords_give() -> None:
    """Issue 41: the resample count, the seed and the CI level travel as one Resampling; the public keyword forms
    (``resamples=``, ``seed=``) build the same bundle, so either way a figure and its CI are the same."""
    from greval.agreement.calibration import calibration
    from greval.agreement.design import DesignSample, design_estimates
    from greval.report.scores import paired_change
    from greval.report.stats import mean_ci, score_ci

    rng = np.random.default_rng(3)
    boot = bs.Resampling(resamples=300, seed=2)
    x = rng.random(40).tolist()
    assert mean_ci(x, boot) == mean_ci(x, resamples=300, seed=2) != mean_ci(x, resamples=300, seed=3)
    rows = [
        {"record_id": f"r{i}", "record_hash": f"h{i}", "status": "ok", "score": float(s), "units": int(u)}
        for i, (s, u) in enumerate(zip(rng.random(30), rng.integers(1, 4, 30), strict=True))
    ]
    assert score_ci(rows, "micro", boot) == score_ci(rows, "micro", resamples=300, seed=2)
    later = [{**r, "score": float(rng.random())} for r in rows]
    assert paired_change(later, rows, "micro", boot) == paired_change(later, rows, "micro", resamples=300, seed=2)
    conf = rng.random(200)
    right = rng.random(200) < conf
    assert calibration(right, conf, resampling=boot) == calibration(right, conf, resamples=300, seed=2)
    sample = DesignSample(
        human=[int(v) for v in rng.integers(0, 2, 80)],
        judge=[int(v) for v in rng.integers(0, 2, 80)],
        probability=[0.2 if i % 3 else 1.0 for i in range(80)],
        stratum=["a" if i % 3 else "b" for i in range(80)],
    )
    assert design_estimates(sample, ["no", "yes"], boot) == design_estimates(
        sample, ["no", "yes"], resamples=300, seed=2
    )
    assert bs.Resampling.of(boot, seed=5) == bs.Resampling(resamples=300, seed=5, level=bs.LEVEL)
    assert bs.Resampling.of(None) == bs.Resampling() and bs.Resampling.of(boot) is boot


def test_the_ci_level_is_level_and_reports_written_before_still_read() -> None:
    """Issue 41: one word per idea. ``confidence`` is the judge's confidence in its answer (calibration); the
    CI's level is ``level`` (and the resample count ``resamples``) in the options and in the report. A level
    reaches every CI of the report (here 50 %: narrower intervals, the note says so), and JSON written with the
    earlier names (``bootstrap``, ``confidence``) reads back into the same report."""
    rng = np.random.default_rng(1)
    labels = ["a", "b"]
    human = rng.choice(labels, 200)
    frame = pd.DataFrame(
        {
            "item": range(200),
            "human": human,
            "judge": np.where(rng.random(200) < 0.8, human, rng.choice(labels, 200)),
            "judge_confidence": rng.random(200),
        }
    )
    scale = AgreementScale(labels=labels)
    wide = compute_agreement(frame, scale, AgreementOptions(bootstrap=200, seed=4))
    narrow = compute_agreement(frame, scale, AgreementOptions(resamples=200, seed=4, level=0.5))
    assert narrow.options.level == 0.5 and narrow.options.resampling == bs.Resampling(resamples=200, seed=4, level=0.5)
    assert narrow.bootstrap is not None and narrow.bootstrap.level == 0.5
    assert any(n.startswith("50% percentile bootstrap CIs: 200 resamples") for n in narrow.notes)

    def widths(report: Any) -> dict[str, float]:
        return {
            k: e.ci_high - e.ci_low for k, e in report.metrics.items() if e.ci_low is not None and e.ci_high is not None
        }

    w, n = widths(wide), widths(narrow)
    assert w.keys() == n.keys() and len(w) >= 3 and all(n[k] <= w[k] for k in w) and sum(n.values()) < sum(w.values())
    cal_w, cal_n = wide.calibration, narrow.calibration
    assert cal_w is not None and cal_n is not None
    assert cal_n.ece.ci_high - cal_n.ece.ci_low < cal_w.ece.ci_high - cal_w.ece.ci_low  # type: ignore[operator]
    written = wide.model_dump_json()
    assert '"confidence"' not in written and '"level":0.95' in written and '"resamples":200' in written
    before = written.replace('"level":', '"confidence":').replace(
        '"options":{"invalid":"as-wrong","protocol":"pooled","resamples"',
        '"options":{"invalid":"as-wrong","protocol":"pooled","bootstrap"',
    )
    assert '"bootstrap":200' in before and '"confidence":0.95' in before
    assert type(wide).model_validate_json(before) == wide


def test_align_s_decision_reads_its_earlier_names() -> None:
    """The align options and the decision's difference (written in the evidence JSON) read ``bootstrap`` and
    ``confidence``, their earlier names."""
    from greval.align.models import AlignOptions, Difference

    assert AlignOptions(bootstrap=500, confidence=0.9).resampling == bs.Resampling(resamples=500, level=0.9)
    old = {"old": 0.5, "new": 0.6, "gain": 0.1, "confidence": 0.95, "resamples": 1000, "unit": "records"}
    diff = Difference.model_validate({**old, "n_units": 10, "n_records": 10})
    assert diff.level == 0.95 and '"level":0.95' in diff.model_dump_json()

"""Gold labels from several people's answers on the same items: people's majority (a tie stays a tie), a
label model's estimate with its posterior (Dawid–Skene, MACE: crowd-kit's implementations), an adjudicator's
label where there is one, or one named annotator's labels. Pure: answers in, gold out.

A tie is never broken: the item's gold is None and the labels that tie are listed, whether the votes tie
(majority) or the posteriors do (a label model on a symmetric item). crowd-kit, and with it pandas and SciPy,
is imported only when a label model is asked for.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from greval.agreement.models import GoldChoice, GoldLabel, LabelModel
from greval.agreement.stats import FloatArray
from greval.errors import DataError, UserError, option

if TYPE_CHECKING:
    import pandas as pd
    from crowdkit.aggregation import MACE

TIE = 1e-9
"""Two posteriors closer than this are a tie (the item gets no gold)."""


@dataclass(frozen=True)
class Answers:
    """People's answers as label codes: ``by_item[item][annotator]`` is a code of ``labels``; items in order of
    first appearance."""

    labels: list[str]
    by_item: dict[str, dict[str, int]]

    @property
    def annotators(self) -> list[str]:
        """Every annotator, in the order the ceiling lists them (shortest name first, then by name)."""
        names = {a for answers in self.by_item.values() for a in answers}
        return sorted(names, key=lambda a: (len(a), a))

    def without(self, names: set[str]) -> Answers:
        """The answers of everyone but ``names`` (items left with none dropped)."""
        kept = {i: {a: c for a, c in ans.items() if a not in names} for i, ans in self.by_item.items()}
        return Answers(self.labels, {i: ans for i, ans in kept.items() if ans})


@dataclass
class Gold:
    """Each item's gold (``codes``: a label code, None when tied; an item absent has no gold) and what the label
    model learned of each annotator."""

    choice: GoldChoice
    labels: list[str]
    items: dict[str, GoldLabel]
    codes: dict[str, int | None]
    model_confusion: dict[str, list[list[float]]] = field(default_factory=dict)
    """Dawid–Skene / MACE: P(the annotator's label | true label), rows true labels, per annotator."""
    competence: dict[str, float] = field(default_factory=dict)
    """MACE: the probability that the annotator knows the label (does not guess)."""


@dataclass
class _Estimate:
    """A label model's output on the answers it saw."""

    labels: dict[str, GoldLabel]
    codes: dict[str, int | None]
    confusion: dict[str, list[list[float]]] = field(default_factory=dict)
    competence: dict[str, float] = field(default_factory=dict)


def estimate_gold(answers: Answers, choice: GoldChoice, seed: int = 0) -> Gold:
    """Every item's gold under ``choice``; a DataError when the choice names nobody who answered."""
    if choice.method == "annotator":
        assert choice.annotator is not None
        return _annotator(answers, choice, choice.annotator)
    if choice.method == "adjudicated":
        return _adjudicated(answers, choice, seed)
    est = label_model(answers, choice.method, seed)
    return Gold(choice, answers.labels, est.labels, est.codes, est.confusion, est.competence)


def label_model(answers: Answers, method: LabelModel, seed: int = 0) -> _Estimate:
    """Majority, Dawid–Skene or MACE over every answer."""
    if method == "majority":
        return _majority(answers)
    posteriors, confusion, competence = _crowdkit(answers, method, seed)
    return _from_posteriors(answers, posteriors, method, confusion, competence)


def _majority(answers: Answers) -> _Estimate:
    """The label most people gave; a tie between the top labels is reported, with its labels."""
    out = _Estimate({}, {})
    for item, ans in answers.by_item.items():
        counts = Counter(ans.values()).most_common()
        top = [code for code, n in counts if n == counts[0][1]]
        share = counts[0][1] / len(ans)
        out.codes[item] = top[0] if len(top) == 1 else None
        out.labels[item] = _gold_label(answers, item, top, share if len(top) == 1 else None, "majority")
    return out


def _gold_label(answers: Answers, item: str, top: list[int], posterior: float | None, source: str) -> GoldLabel:
    labels = answers.labels
    tied = [labels[c] for c in sorted(top)] if len(top) > 1 else []
    label = labels[top[0]] if len(top) == 1 else None
    return GoldLabel(
        item=item, label=label, tied=tied, posterior=posterior, source=source, answers=len(answers.by_item[item])
    )


def _from_posteriors(
    answers: Answers,
    posteriors: FloatArray,
    method: str,
    confusion: dict[str, list[list[float]]],
    competence: dict[str, float],
) -> _Estimate:
    """Each item's most probable label, or a tie when the top posteriors are equal (within ``TIE``)."""
    out = _Estimate({}, {}, confusion, competence)
    for row, item in enumerate(answers.by_item):
        p = posteriors[row]
        best = float(p.max())
        top = [int(c) for c in np.flatnonzero(p >= best - TIE)]
        out.codes[item] = top[0] if len(top) == 1 else None
        out.labels[item] = _gold_label(answers, item, top, best if len(top) == 1 else None, method)
    return out


def _long(answers: Answers) -> tuple[pd.DataFrame, list[str], list[int]]:
    """crowd-kit's (task, worker, label) table with workers and labels numbered by first appearance: crowd-kit's
    MACE numbers them so in one place and sorts them in another, and the two orders must agree. Returns it with
    the workers and the label codes in that numbering."""
    import pandas as pd

    workers: dict[str, int] = {}
    codes: dict[int, int] = {}
    rows = []
    for task, ans in enumerate(answers.by_item.values()):
        for who, code in ans.items():
            rows.append((task, workers.setdefault(who, len(workers)), codes.setdefault(code, len(codes))))
    frame = pd.DataFrame(rows, columns=["task", "worker", "label"])
    return frame, list(workers), list(codes)


def _crowdkit(
    answers: Answers, method: LabelModel, seed: int
) -> tuple[FloatArray, dict[str, list[list[float]]], dict[str, float]]:
    """(items × labels posteriors, each annotator's P(label | true label), MACE's competences) from crowd-kit."""
    with warnings.catch_warnings():  # crowd-kit's pandas calls warn of pandas' future: not the user's concern
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return _fit(answers, method, seed)


def _fit(
    answers: Answers, method: LabelModel, seed: int
) -> tuple[FloatArray, dict[str, list[list[float]]], dict[str, float]]:
    try:
        from crowdkit.aggregation import MACE, DawidSkene
    except ImportError:
        raise UserError(
            f"the {method} gold needs crowd-kit, which is not installed: pip install 'greval[crowd]'"
        ) from None

    k = len(answers.labels)
    data, workers, used = _long(answers)
    n = len(answers.by_item)
    posteriors = np.zeros((n, k))
    if data.empty:
        return posteriors, {}, {}
    if method == "dawid-skene":
        ds = DawidSkene(n_iter=100, tol=1e-5)
        probas = ds.fit_predict_proba(data)
        confusion = _ds_confusion(ds.errors_, workers, used, k)
        competence: dict[str, float] = {}
    else:
        mace = MACE(n_restarts=10, n_iter=50, random_state=seed)
        probas = mace.fit_predict_proba(data)
        confusion, competence = _mace_confusion(mace, workers, used, k)
    for col in probas.columns:
        posteriors[probas.index.to_numpy(dtype=np.int64), used[int(col)]] = probas[col].to_numpy(dtype=float)
    return posteriors, confusion, competence


def _ds_confusion(
    errors: pd.DataFrame | None, workers: list[str], used: list[int], k: int
) -> dict[str, list[list[float]]]:
    """Dawid–Skene's error matrices (indexed (worker, observed label), a column per true label) as each
    annotator's k × k P(observed | true), rows true labels, in the scale's codes."""
    out: dict[str, list[list[float]]] = {}
    if errors is None:
        return out
    mats = {w: np.zeros((k, k)) for w in range(len(workers))}
    trues = [used[int(c)] for c in errors.columns.tolist()]
    for (worker, observed), probs in zip(errors.index.tolist(), errors.to_numpy(dtype=float), strict=True):
        mats[int(worker)][trues, used[int(observed)]] = probs
    return {workers[w]: m.tolist() for w, m in mats.items()}


def _mace_confusion(
    mace: MACE, workers: list[str], used: list[int], k: int
) -> tuple[dict[str, list[list[float]]], dict[str, float]]:
    """MACE's implied P(observed | true) = θ·[observed = true] + (1 − θ)·ξ(observed) per annotator (θ: the
    competence, ξ: the guessing distribution), and the competences."""
    spamming = np.asarray(mace.spamming_, dtype=float)
    strategy = np.asarray(mace.thetas_, dtype=float)
    confusion: dict[str, list[list[float]]] = {}
    competence: dict[str, float] = {}
    for w, name in enumerate(workers):
        # Variational Bayes leaves both distributions a little short of 1 (exp∘digamma): normalised here.
        theta = float(spamming[w, 1] / spamming[w].sum())
        guess = np.zeros(k)
        guess[used] = strategy[w, : len(used)] / strategy[w, : len(used)].sum()
        confusion[name] = (theta * np.eye(k) + (1.0 - theta) * guess[None, :]).tolist()
        competence[name] = theta
    return confusion, competence


def _annotator(answers: Answers, choice: GoldChoice, name: str) -> Gold:
    """One annotator's labels are the gold where they answered; elsewhere no gold."""
    if name not in answers.annotators:
        raise DataError(
            f"{option('gold')} {name!r}: no such annotator; annotators are {_few(sorted(answers.annotators))}"
        )
    codes: dict[str, int | None] = {}
    labels: dict[str, GoldLabel] = {}
    for item, ans in answers.by_item.items():
        if name in ans:
            codes[item] = ans[name]
            labels[item] = _gold_label(answers, item, [ans[name]], None, "annotator")
    return Gold(choice, answers.labels, labels, codes)


def _adjudicated(answers: Answers, choice: GoldChoice, seed: int) -> Gold:
    """An adjudicator's label wins (adjudicators who disagree tie); elsewhere the fallback label model over
    everyone else's answers."""
    names = set(choice.adjudicators)
    if not names:
        raise DataError(f"{option('gold')} adjudicated needs the adjudicators' names: adjudicated:NAME[,NAME]")
    unknown = sorted(names - set(answers.annotators))
    if unknown:
        raise DataError(
            f"{option('gold')} adjudicated: {_few(unknown)} answered nothing here; annotators are "
            f"{_few(sorted(answers.annotators))}"
        )
    est = label_model(answers.without(names), choice.fallback, seed)
    codes, labels = dict(est.codes), dict(est.labels)
    for item, ans in answers.by_item.items():
        said = {c for a, c in ans.items() if a in names}
        if said:
            top = sorted(said)
            codes[item] = top[0] if len(top) == 1 else None
            labels[item] = _gold_label(answers, item, top, None, "adjudicator")
    order = {item: n for n, item in enumerate(answers.by_item)}
    labels = dict(sorted(labels.items(), key=lambda kv: order[kv[0]]))
    return Gold(choice, answers.labels, labels, codes, est.confusion, est.competence)


def _few(names: list[str], n: int = 8) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")

"""How a figure is written, everywhere greval writes one (terminal tables, HTML, Markdown): one definition, so
the terminal and the report pages never disagree on a number; and how a report's notes write the option
fields they name (:func:`with_names`). Pure; imports nothing heavy."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from greval.agreement.models import ONE_LABEL
from greval.errors import render_options

M = TypeVar("M", bound=BaseModel)


class Interval(Protocol):
    """Anything with a confidence interval (an agreement ``Estimate``, a report's ``MeanCI``, a flip rate)."""

    @property
    def ci_low(self) -> float | None: ...

    @property
    def ci_high(self) -> float | None: ...


class Estimated(Interval, Protocol):
    """An estimate: a value and its interval (an agreement ``Estimate``)."""

    @property
    def value(self) -> float | None: ...


def fmt_number(x: float | None, d: int = 3) -> str:
    """A figure with ``d`` decimals; "—" when it is undefined (None or NaN: its note says why)."""
    return "—" if x is None or math.isnan(x) else f"{x:.{d}f}"


def fmt_ci(e: Interval, d: int = 3) -> str:
    """ "[low, high]" with ``d`` decimals; empty when either end is undefined."""
    lo, hi = e.ci_low, e.ci_high
    return "" if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) else f"[{lo:.{d}f}, {hi:.{d}f}]"


def fmt_value_ci(e: Estimated, d: int = 3) -> str:
    """Value and CI in one cell: "0.712 [0.650, 0.770]", or just "—" when undefined ("undefined: one label"
    for a κ where people gave one label: the agreement stage's rule)."""
    if e.value is None and str(getattr(e, "note", None) or "").startswith(ONE_LABEL):
        return ONE_LABEL
    return f"{fmt_number(e.value, d)} {fmt_ci(e, d)}".strip()


def fmt_corrected(value: float | None, ci: Interval, d: int = 3) -> str:
    """A prevalence-corrected share as every page writes it: "0.500 [0.167, 0.833]", or "undefined" when the
    correction is (its note, in the same row, says why: a judge no better than chance, a label nobody gave)."""
    return "undefined" if value is None or math.isnan(value) else f"{fmt_number(value, d)} {fmt_ci(ci, d)}".strip()


def with_names(model: M, names: Mapping[str, str]) -> M:
    """A copy of a report model whose notes (every ``note`` and ``notes`` field, at any depth) write the option
    fields they name as ``names`` says (greval.errors.render_options). The CLI applies it once, with its flags,
    to what it prints and to the pages it writes; the model itself (and its JSON) keeps the fields."""
    return _named(model, names, "")  # type: ignore[no-any-return]


def _named(value: Any, names: Mapping[str, str], key: str) -> Any:
    if isinstance(value, BaseModel):
        fields = type(value).model_fields
        return value.model_copy(update={k: _named(getattr(value, k), names, k) for k in fields})
    if isinstance(value, str):
        return render_options(value, names) if key in ("note", "notes") else value
    if isinstance(value, list):
        return [_named(v, names, key) for v in value]
    if isinstance(value, dict):
        return {k: _named(v, names, key) for k, v in value.items()}
    return value


def best_first(report: Any) -> Any:
    """An agreement report (greval.agreement.AgreementReport) with an ordered scale's labels listed best first,
    as the spec lists them, in its tables and charts (the agreement stage codes them low → high; its scale keeps
    that order, so signed steps keep their sign); other reports unchanged. A display copy: the model and its
    JSON keep the stage's order."""
    cat = report.categorical
    if report.scale.kind != "categorical" or not report.scale.ordered or cat is None:
        return report
    order = list(reversed(cat.labels))

    def by_label(rows: list[Any]) -> list[Any]:
        known = {r.label: r for r in rows}
        return [known[lab] for lab in order if lab in known] + [r for r in rows if r.label not in order]

    def flip(row: list[Any]) -> list[Any]:
        k = len(order)
        return list(reversed(row[:k])) + list(row[k:])  # an invalid-answer column stays last

    cm = cat.confusion
    confusion = cm.model_copy(
        update={
            "labels": order,
            "judge_labels": flip(cm.judge_labels),
            "counts": [flip(r) for r in reversed(cm.counts)],
        }
    )
    update: dict[str, Any] = {
        "labels": order,
        "per_label": by_label(cat.per_label),
        "confusion": confusion,
        "bias": cat.bias.model_copy(update={"per_label": by_label(cat.bias.per_label)}),
    }
    p = cat.prevalence
    if p is not None and list(p.labels) == list(reversed(order)):
        update["prevalence"] = p.model_copy(
            update={k: list(reversed(getattr(p, k))) for k in ("labels", "observed", "human", "corrected")}
        )
    return report.model_copy(update={"categorical": cat.model_copy(update=update)})

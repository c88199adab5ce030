"""How a figure is written, everywhere greval writes one (terminal tables, HTML, Markdown): one definition, so
the terminal and the report pages never disagree on a number; and how a report's notes write the option
fields they name (:func:`with_names`). Pure; imports nothing heavy."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

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
    """Value and CI in one cell: "0.712 [0.650, 0.770]", or just "—" when undefined."""
    return f"{fmt_number(e.value, d)} {fmt_ci(e, d)}".strip()


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

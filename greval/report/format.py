"""How a figure is written, everywhere greval writes one (terminal tables, HTML, Markdown): one definition, so
the terminal and the report pages never disagree on a number. Pure; imports nothing heavy."""

from __future__ import annotations

import math
from typing import Protocol


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

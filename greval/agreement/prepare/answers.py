"""How one raw answer reads: its canonical text (2, 2.0 and "2" are the same label), whether it is missing,
and its value on a scale. Pure; every phase of prepare and the calibration and design modules read answers
through these."""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from greval.agreement.models import AgreementScale

_PANDAS_NULLS = frozenset({"NAType", "NaTType"})
"""The classes of pandas.NA and pandas.NaT (named, so that reading a value never imports pandas)."""


def is_null(v: Any) -> bool:
    """A null of any kind: None, NaN, pandas' NA or NaT (an empty text is not one)."""
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    return type(v).__name__ in _PANDAS_NULLS and type(v).__module__.startswith("pandas")


def is_missing(v: Any) -> bool:
    """A null of any kind, or an empty / blank cell: no answer whatever the user's missing_values say."""
    return is_null(v) or (isinstance(v, str) and not v.strip())


_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+)")


def _canonical_number(s: str) -> str:
    """'2.0' and '02' read as 2, '1.50' as 1.5: text read from a CSV compares like the numbers pandas made."""
    if _INTEGER.fullmatch(s):
        return str(int(s))
    if _DECIMAL.fullmatch(s):
        f = float(s)
        return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)
    return s


def label_text(v: Any, mapping: dict[str, str], missing: frozenset[str] = frozenset()) -> str | None:
    """The canonical string of a raw answer (whole numbers lose their '.0'), after `mapping`; None when missing."""
    if is_missing(v):
        return None
    if isinstance(v, bool | np.bool_):
        s = str(bool(v)).lower()
    elif (isinstance(v, float | np.floating) and float(v).is_integer()) or isinstance(v, int | np.integer):
        s = str(int(v))
    else:
        raw = str(v).strip()
        if raw in missing:
            return None
        s = _canonical_number(raw)
    if s in missing:
        return None
    return mapping.get(s, s)


def sort_labels(labels: set[str]) -> list[str]:
    """Numeric order when every label is a number, else alphabetical."""
    try:
        return sorted(labels, key=float)
    except ValueError:
        return sorted(labels)


def value_of(s: str | None, scale: AgreementScale) -> float | None:
    """An answer's number on a value scale (a word through the scale's scores); None when it has none."""
    if s is None:
        return None
    if scale.scores is not None and s in scale.scores:
        return float(scale.scores[s])
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def numbers(values: Sequence[Any]) -> npt.NDArray[np.float64]:
    """Each value as a float, NaN where it is missing or no number (pandas.to_numeric with errors="coerce")."""
    out = np.full(len(values), np.nan)
    for r, v in enumerate(values):
        if not is_missing(v):
            with contextlib.suppress(TypeError, ValueError):
                out[r] = float(v)
    return out


def in_bounds(v: float, scale: AgreementScale) -> bool:
    return (scale.min is None or v >= scale.min) and (scale.max is None or v <= scale.max)


def farthest(v: float, scale: AgreementScale) -> float:
    """The end of a bounded scale farthest from `v`: what an invalid answer counts as under `as-wrong`."""
    assert scale.min is not None and scale.max is not None
    return scale.max if (v - scale.min) < (scale.max - v) else scale.min


def few(items: list[str], n: int = 5) -> str:
    """A few item ids for an error message, quoted, with how many more."""
    shown = ", ".join(repr(i) for i in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")

"""Numbers a record reports about itself (an extraction's self-reported confidence): read from a field, a
dotted path, or a key of every object of a list; the record's value (or the mean of its values) is the score,
and a value below the threshold is flagged, as the clinical evaluation reports ("< 0.8 flagged")."""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import fmean
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, units_of
from greval.spec.computed import FieldStatsParams
from greval.types import ItemVerdict

_ABSENT = object()


def get_path(obj: Any, path: str) -> Any:
    """The value at a dotted path (``extraction.confidence``) of nested objects, or ``_ABSENT``."""
    for part in path.split("."):
        if not isinstance(obj, Mapping) or part not in obj:
            return _ABSENT
        obj = obj[part]
    return obj


def as_number(value: Any, where: str) -> float:
    """A finite number (numeric text such as ``"0.85"`` from a CSV counts), else the record's error."""
    if isinstance(value, bool) or value is None or value is _ABSENT:
        got = "nothing" if value is None or value is _ABSENT else f"{value!r}"
        raise ComputeError(f"{where}: expected a number, got {got}")
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ComputeError(f"{where}: expected a number, got {value[:40]!r}") from None
    else:
        hint = " (set params.key to read one key of each object)" if isinstance(value, Mapping) else ""
        raise ComputeError(f"{where}: expected a number, got {type(value).__name__}{hint}")
    if not math.isfinite(number):
        raise ComputeError(f"{where}: expected a finite number, got {value!r}")
    return number


def field_values(p: FieldStatsParams, data: Mapping[str, Any]) -> tuple[list[float], list[str], bool]:
    """The numbers to summarise, where each was read (for reasons), and whether the field is a list."""
    value = get_path(data, p.field)
    if isinstance(value, list | tuple):
        if p.key is None:
            return (
                [as_number(v, f"{p.field}[{i}]") for i, v in enumerate(value)],
                [f"{p.field}[{i}]" for i in range(len(value))],
                True,
            )
        wheres = [f"{p.field}[{i}].{p.key}" for i in range(len(value))]
        numbers = []
        for i, item in enumerate(value):
            if not isinstance(item, Mapping):
                raise ComputeError(f"{p.field}[{i}]: expected an object with {p.key!r}, got {type(item).__name__}")
            numbers.append(as_number(get_path(item, p.key), wheres[i]))
        return numbers, wheres, True
    if p.key is not None:
        raise ComputeError(f"{p.field}: expected a list of objects with {p.key!r}, got {type(value).__name__}")
    return [as_number(value, p.field)], [p.field], False


def deciding(value: float, threshold: float) -> str:
    """``value`` as a reason shows it against ``threshold``: short (``0.85``), unless the short form would hide
    which side of the threshold it is on — the mean of 0.9 and 0.7 is 0.7999999999999999 in floating point,
    flagged below 0.8, and "0.8" would read as not below — then every digit (Python's shortest exact form)."""
    short = f"{value:g}"
    return short if (float(short) < threshold) == (value < threshold) else repr(float(value))


def field_stats(p: FieldStatsParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """The field's value (or the mean of its values) as the score, labelled ``flagged`` below the threshold."""
    values, wheres, is_list = field_values(p, data)
    items: list[ItemVerdict] = []
    if is_list:
        for i, (v, where) in enumerate(zip(values, wheres, strict=True), start=1):
            low = v < p.threshold
            items.append(
                ItemVerdict(
                    item_id=f"value:{i}",
                    label="flagged" if low else "ok",
                    score=v,
                    reason=f"{where} = {deciding(v, p.threshold)} {'<' if low else '≥'} {p.threshold:g}",
                )
            )
    flagged = sum(v < p.threshold for v in values)
    score = fmean(values) if values else None
    label = None if score is None else "flagged" if score < p.threshold else "ok"
    if score is None:
        reason = f"{p.field}: no values"
    elif is_list:
        reason = (
            f"mean {deciding(score, p.threshold)} {'<' if score < p.threshold else '≥'} {p.threshold:g} "
            f"of {len(values)} values ({p.field}"
            + (f"[].{p.key}" if p.key else "[]")
            + f"), {flagged} below {p.threshold:g}"
        )
    else:
        reason = f"{p.field} = {deciding(score, p.threshold)} " + ("<" if flagged else "≥") + f" {p.threshold:g}"
    outputs = {
        "n": len(values),
        "mean": score,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "flagged": flagged,
        "flagged_rate": flagged / len(values) if values else None,
        "threshold": p.threshold,
        "units": units_of(score, len(values)),
    }
    return [record_verdict(score, reason, label), *items], outputs

"""What one step of the search may read: a view holding only the labelled units it is allowed to see.

A generator instantiating a candidate for fold k gets the view of the other folds' units (with the parent's
answers on them); a scorer gets the view of fold k; the final instantiation gets the whole search part. The
test part is never put in a view before the decision. Every read goes through the view and is reported to
an optional :class:`Tracer`, which is how the leakage tests prove what each step touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from greval.align.models import Answer, Unit
from greval.errors import GrevalError


class Tracer(Protocol):
    """Told about every unit a step reads (``phase`` names the step: ``train:2``, ``score:2``, ``final``)."""

    def touched(self, phase: str, keys: Iterable[str]) -> None: ...


class LeakError(GrevalError, AssertionError):
    """A step asked for a record or unit outside its view: a bug, never a user's mistake."""


class LabelView:
    """The labelled units one step may read, the parent's answers on them, and their records' fields."""

    def __init__(
        self,
        units: Sequence[Unit],
        phase: str,
        *,
        answers: Mapping[str, Answer] | None = None,
        records: Mapping[str, Mapping[str, Any]] | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self._units = tuple(units)
        self._keys = {u.key for u in self._units}
        self._hashes = {u.record_hash for u in self._units}
        self._answers = {k: a for k, a in (answers or {}).items() if k in self._keys}
        self._records = records or {}
        self.phase = phase
        self._tracer = tracer

    @property
    def units(self) -> tuple[Unit, ...]:
        if self._tracer is not None:
            self._tracer.touched(self.phase, self._keys)
        return self._units

    def answer(self, unit: Unit) -> Answer | None:
        """The parent candidate's (out-of-fold) answer on a unit of this view."""
        if unit.key not in self._keys:
            raise LeakError(f"{self.phase}: unit {unit.key} is not in this view")
        return self._answers.get(unit.key)

    def record(self, unit: Unit) -> Mapping[str, Any]:
        """The fields of a unit's record (what the judge reads), for a unit of this view only."""
        if unit.record_hash not in self._hashes:
            raise LeakError(f"{self.phase}: record {unit.record_id} is not in this view")
        if self._tracer is not None:
            self._tracer.touched(self.phase, [unit.key])
        return self._records.get(unit.record_hash, {})

    def __len__(self) -> int:
        return len(self._units)


__all__ = ["LabelView", "LeakError", "Tracer"]

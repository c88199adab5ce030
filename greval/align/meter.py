"""The budget: calls and tokens spent, and whether the next spend fits.

Every spend is checked before it is made, against an estimate that is exact for calls (one call per judgement
and sample: align judges without re-asks) and an upper bound for tokens. Part of the budget is reserved for
the decision (the winner and the current spec on the test part), so the search can never spend it.
"""

from __future__ import annotations

from greval.align.models import Cost
from greval.errors import GrevalError


class OutOfBudget(GrevalError):
    """The next spend would cross the budget: the search stops proposing."""


class Meter:
    """Calls and tokens spent against optional limits, with a reserve only the decision may use."""

    def __init__(self, calls: int | None, tokens: int | None) -> None:
        self.calls, self.tokens = calls, tokens
        self.spent = Cost()
        self.reserve = Cost()

    @property
    def limited(self) -> bool:
        return self.calls is not None or self.tokens is not None

    def fits(self, cost: Cost, *, reserve: bool = False) -> bool:
        """Whether ``cost`` fits in what is left (the reserve counts only for the decision: ``reserve=True``)."""
        held = Cost() if reserve else self.reserve
        total = self.spent + cost + held
        return (self.calls is None or total.calls <= self.calls) and (
            self.tokens is None or total.tokens <= self.tokens
        )

    def check(self, cost: Cost, *, reserve: bool = False) -> None:
        if not self.fits(cost, reserve=reserve):
            raise OutOfBudget(self.describe(cost))

    def charge(self, cost: Cost) -> None:
        self.spent = self.spent + cost

    def describe(self, cost: Cost) -> str:
        parts = []
        if self.calls is not None:
            parts.append(f"{self.spent.calls} + {cost.calls} calls of {self.calls} (reserved {self.reserve.calls})")
        if self.tokens is not None:
            parts.append(
                f"{self.spent.tokens} + ~{cost.tokens} tokens of {self.tokens} (reserved {self.reserve.tokens})"
            )
        return "; ".join(parts) or "no limit"


__all__ = ["Meter", "OutOfBudget"]

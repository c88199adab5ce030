"""What a watch may spend: a cap on traces judged per minute, and a budget of tokens and / or US dollars per day
(UTC), priced with the price table every cost of greval uses (:mod:`greval.llm.prices`).

The rate cap **throttles**: a trace past it waits for the minute to roll on (nothing is dropped, so the sample
stays what the sampling drew; traffic above the cap for long makes the watch fall behind, which its status says).
The budget **holds back**: a trace that would take the day past it is recorded as held back and not judged that
day. A cost is known only once a trace is judged, so a trace is admitted only when the day's budget still has room
for the most any recent trace cost, with a margin (:data:`MARGIN`); before any trace was judged, one is judged
alone to learn it. Both are pure functions of what the store counted, the clock passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from greval.store.watch import Spend

__all__ = ["MARGIN", "Limits", "budget_room", "day_start", "rate_room"]

#: A trace is admitted when the budget has room for this many times the most a recent trace cost.
MARGIN = 1.25


class Limits(BaseModel):
    """How much a watch may judge."""

    model_config = ConfigDict(frozen=True)

    rate_per_min: int | None = Field(None, ge=1, description="Traces judged per minute at most.")
    tokens_per_day: int | None = Field(None, ge=1, description="Judge tokens (prompt + completion) per UTC day.")
    usd_per_day: float | None = Field(None, gt=0, description="US dollars per UTC day, at the price table's prices.")

    @property
    def budgeted(self) -> bool:
        return self.tokens_per_day is not None or self.usd_per_day is not None


def day_start(now: float) -> float:
    """The start (Unix seconds) of the UTC day ``now`` falls in."""
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


def rate_room(admitted: Sequence[float], cap: int | None, now: float) -> tuple[int | None, float]:
    """(traces that may be admitted now — None: no cap —, seconds until one more may be when none can)."""
    if cap is None:
        return None, 0.0
    recent = [t for t in admitted if t > now - 60.0]
    room = cap - len(recent)
    if room > 0:
        return room, 0.0
    return 0, max(0.0, sorted(recent)[len(recent) - cap] + 60.0 - now)


def budget_room(limits: Limits, spent: Spend, peak: tuple[int, float] | None) -> int | None:
    """How many more traces the day's budget admits (None: no budget; a large number when a trace costs nothing).
    ``spent``: the day's spend and the admitted traces still to judge; ``peak``: the most a recent trace cost."""
    if not limits.budgeted:
        return None
    rooms: list[int] = []
    for budget, used, per in (
        (limits.tokens_per_day, spent.tokens, None if peak is None else peak[0]),
        (limits.usd_per_day, spent.usd, None if peak is None else peak[1]),
    ):
        if budget is None:
            continue
        if per is None:  # nothing judged yet: one trace alone, to learn what one costs
            rooms.append(1 if used < budget and spent.pending == 0 else 0)
            continue
        each = per * MARGIN
        left = budget - used - spent.pending * each
        rooms.append(1_000_000 if each <= 0 else max(0, math.floor(left / each)))
    return min(rooms)

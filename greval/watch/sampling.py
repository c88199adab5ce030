"""Which traces a watch judges: a filter (:mod:`greval.watch.where`), then a share of what passes it, drawn
within strata — by default the trace's system, route and the hour it started — and within the time window it
started in.

The draw is **systematic within each stratum of each window**: the k-th trace of a stratum in a window (in the
order the source lists them) is chosen when ``floor((k + 1)·r + u) > floor(k·r + u)``, with ``u`` in [0, 1) drawn
from the seed, the window and the stratum. Each trace's inclusion probability is exactly ``r``; each stratum of a
window gets ``r`` of its traces to within one (a rare route is neither drowned nor over-sampled by chance, and the
overall share lies well inside the binomial margin of a coin-flip sample). It depends only on the order of the
source and the counts so far, which the store keeps with the cursor: a page read again decides again the same way.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from greval.watch.where import Expr, lookup, parse_where

__all__ = ["DEFAULT_STRATA", "Rules", "chosen", "offset", "stratum_of", "trace_fields", "window_of"]

#: The fields traces are stratified by, by default.
DEFAULT_STRATA = ("system", "route", "hour")
#: A stratum's value when the trace has none.
MISSING = "-"


class Rules(BaseModel):
    """The sampling rules of a watch."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    rate: float = Field(1.0, gt=0.0, le=1.0, description="The share of matching traces judged.")
    where: str | None = Field(None, description="Only traces this expression holds for (greval.watch.where).")
    strata: tuple[str, ...] = Field(DEFAULT_STRATA, description="Fields the draw is stratified by.")
    seed: int = Field(0, description="Seeds each stratum's start in each window.")

    def expr(self) -> Expr | None:
        return parse_where(self.where) if self.where else None


def window_of(at: float, seconds: float) -> float:
    """The start of the window ``at`` falls in (windows of ``seconds`` from the Unix epoch, UTC)."""
    return math.floor(at / seconds) * seconds


def trace_fields(
    row: Mapping[str, Any], attributes: Mapping[str, Any], metadata: Mapping[str, Any], name: str, started: float
) -> dict[str, Any]:
    """What the filter and the strata read of a trace: its record's fields, its root span's attributes,
    metadata and name, and the hour it started (UTC)."""
    hour = datetime.fromtimestamp(started, UTC).hour
    return {**row, "attributes": dict(attributes), "metadata": dict(metadata), "name": name, "hour": hour}


def _value(fields: Mapping[str, Any], name: str) -> Any:
    for path in (name, f"attributes.{name}", f"metadata.{name}"):
        found = lookup(fields, path)
        if found is not None:
            return found
    return None


def stratum_of(fields: Mapping[str, Any], strata: Sequence[str]) -> str:
    """A trace's stratum: ``system=rag-v1|route=search|hour=03`` (a field it lacks is ``-``)."""
    parts = []
    for name in strata:
        value = _value(fields, name)
        text = MISSING if value is None else f"{value:02d}" if name == "hour" and isinstance(value, int) else str(value)
        parts.append(f"{name}={text[:80]}")
    return "|".join(parts)


def offset(seed: int, window: float, stratum: str) -> float:
    """The systematic draw's start ``u`` in [0, 1) for one stratum of one window."""
    digest = hashlib.blake2b(f"{seed}|{window!r}|{stratum}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def chosen(k: int, rate: float, start: float) -> bool:
    """Whether the ``k``-th (from 0) matching trace of a stratum in a window is drawn."""
    return math.floor((k + 1) * rate + start) > math.floor(k * rate + start)

"""What a run's tokens cost: a price table the user can edit, and the one cost formula.

Prices are US dollars per million tokens: ``input`` (prompt tokens the provider did not read from its cache),
``cached_input`` (prompt tokens it did: OpenAI's ``usage.prompt_tokens_details.cached_tokens``; ``input``
when absent) and ``output``. greval ships a few providers' list prices (:data:`DEFAULT_PRICES`, as they listed
them in 2025: they change, check yours); a YAML file adds models or overrides them — ``$GREVAL_PRICES``, else
``prices.yaml`` in greval's data directory::

    # USD per 1M tokens
    gpt-4o-mini: {input: 0.15, cached_input: 0.075, output: 0.60}
    openai:my-finetune: {input: 0.30, output: 1.20}     # provider:model is matched before the model alone

A judge ``provider:model`` is priced by its full name, else by its model name, else, for a dated snapshot, by the
model it is a snapshot of (``gpt-4o-mini-2024-07-18``, ``claude-haiku-4-5-20251001``, ``…-latest``).
A model in no table has no cost: the summary says which. Light on purpose: ``greval results runs`` reads it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from greval.errors import UserError
from greval.paths import data_dir

PRICES_ENV = "GREVAL_PRICES"
_DATED = re.compile(r"^(.+)-(\d{4}-\d{2}-\d{2}|\d{8}|latest)$")  # a dated snapshot: priced as its model


class Price(BaseModel):
    """One model's prices, US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(ge=0)
    cached_input: float | None = Field(None, ge=0)
    output: float = Field(ge=0)

    def cost(self, tokens_in: int, tokens_cached: int, tokens_out: int) -> float:
        """The one cost formula: uncached prompt tokens, cached ones and completion tokens at their prices."""
        cached = min(max(tokens_cached, 0), tokens_in)
        cached_price = self.input if self.cached_input is None else self.cached_input
        return ((tokens_in - cached) * self.input + cached * cached_price + tokens_out * self.output) / 1e6


def _p(inp: float, cached: float, out: float) -> Price:
    return Price(input=inp, cached_input=cached, output=out)


#: List prices as the providers published them in 2025 (USD per 1M tokens). Prices change: check yours, and put
#: them in the table file (see the module doc) — it overrides these.
DEFAULT_PRICES: dict[str, Price] = {
    "gpt-4o": _p(2.50, 1.25, 10.00),
    "gpt-4o-mini": _p(0.15, 0.075, 0.60),
    "gpt-4.1": _p(2.00, 0.50, 8.00),
    "gpt-4.1-mini": _p(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _p(0.10, 0.025, 0.40),
    "o4-mini": _p(1.10, 0.275, 4.40),
    "gpt-5": _p(1.25, 0.125, 10.00),
    "gpt-5-mini": _p(0.25, 0.025, 2.00),
    "gpt-5-nano": _p(0.05, 0.005, 0.40),
    "claude-sonnet-4": _p(3.00, 0.30, 15.00),
    "claude-sonnet-4-5": _p(3.00, 0.30, 15.00),
    "claude-haiku-4-5": _p(1.00, 0.10, 5.00),
    "claude-3-5-haiku": _p(0.80, 0.08, 4.00),
}


def prices_path() -> Path:
    """The user's price table: ``$GREVAL_PRICES``, else ``prices.yaml`` in greval's data directory."""
    env = os.environ.get(PRICES_ENV)
    if env:
        return Path(env).expanduser()

    return data_dir() / "prices.yaml"


def load_prices(path: Path | None = None) -> dict[str, Price]:
    """The shipped prices with the user's table over them (a missing file is no table; a bad one is a
    :class:`UserError` naming the file and the model)."""
    path = prices_path() if path is None else path
    table = dict(DEFAULT_PRICES)
    if not path.is_file():
        if os.environ.get(PRICES_ENV) and path == prices_path():
            raise UserError(f"{path}: no such price table (${PRICES_ENV})")
        return table
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot read the price table: {str(exc).splitlines()[0]}") from None
    if data is None:
        return table
    if not isinstance(data, Mapping):
        raise UserError(f"{path}: a price table maps model names to {{input, cached_input, output}}")
    for name, entry in data.items():
        try:
            table[str(name)] = Price.model_validate(entry)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise UserError(f"{path}: {name}{'.' + where if where else ''}: {err['msg']}") from None
    return table


def price_for(judge: str, table: Mapping[str, Price]) -> Price | None:
    """A judge's prices (``provider:model`` as the store labels it), or None when no entry matches."""
    if judge in table:
        return table[judge]
    model = judge.split(":", 1)[1] if ":" in judge else judge
    if model in table:
        return table[model]
    dated = _DATED.match(model)
    return table.get(dated.group(1)) if dated else None


class CallsCost(BaseModel):
    """What one judgement's calls cost (a record's, on one metric): :meth:`Price.cost` of its tokens, or an upper
    bound when its cached tokens were not recorded (judged before the store kept them), or nothing without a
    price."""

    usd: float | None = Field(None, description="The cost, or its upper bound (None: no price for the judge).")
    bound: bool = Field(False, description="An upper bound: the cached prompt tokens were not recorded.")


def calls_cost(price: Price | None, tokens_in: int, tokens_cached: int | None, tokens_out: int) -> CallsCost:
    """A judgement's cost by the one formula. ``tokens_cached`` None (not recorded): the most the calls can have
    cost, whichever share of the prompt the cache held — exact anyway when cached tokens cost what others do."""
    if price is None:
        return CallsCost()
    if tokens_cached is not None:
        return CallsCost(usd=price.cost(tokens_in, tokens_cached, tokens_out))
    low, high = sorted((price.cost(tokens_in, 0, tokens_out), price.cost(tokens_in, tokens_in, tokens_out)))
    return CallsCost(usd=high, bound=low != high)


class RunCost(BaseModel):
    """What a run's calls cost: the priced part, and the judges no table prices (their tokens are not in it)."""

    usd: float | None = Field(None, description="The cost of the priced judges' tokens (None: none priced).")
    unpriced: list[str] = Field(default_factory=list, description="Judges with tokens and no price.")


def run_cost(metrics: Iterable[Mapping[str, Any]], table: Mapping[str, Price]) -> RunCost:
    """The cost of a run from its summary's metrics (each with ``judge``, ``tokens_in``, ``tokens_cached``,
    ``tokens_out``: what this run spent on it). Metrics that spent nothing cost nothing, priced or not: a run
    that spent no token cost $0; one whose tokens no table prices has no cost (None)."""
    total, spent, priced = 0.0, False, False
    unpriced: list[str] = []
    for m in metrics:
        t_in, t_cached, t_out = (int(m.get(k) or 0) for k in ("tokens_in", "tokens_cached", "tokens_out"))
        if not t_in and not t_out:
            continue
        spent = True
        judge = str(m.get("judge") or "")
        price = price_for(judge, table)
        if price is None:
            if judge not in unpriced:
                unpriced.append(judge)
            continue
        priced = True
        total += price.cost(t_in, t_cached, t_out)
    return RunCost(usd=total if priced or not spent else None, unpriced=unpriced)


def cost_text(cost: RunCost) -> str:
    """A run's cost as the CLI shows it (``$12.34``, ``$0.0123``, ``$0.000372``; ``—`` when nothing is priced),
    and the judges without a price."""
    shown = "—" if cost.usd is None else usd_text(cost.usd)
    if cost.unpriced:
        shown += f" (no price: {', '.join(cost.unpriced)})"
    return shown


def usd_text(usd: float) -> str:
    """An amount as greval shows costs: ``$12.34``, ``$0.0123``, ``$0.000372`` (small amounts, such as one
    record's calls, with enough digits to tell them apart)."""
    if usd == 0:
        return "$0"
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.4f}" if usd >= 0.01 else f"${usd:.6f}"

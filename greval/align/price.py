"""What align's calls cost in US dollars: its tokens by model at the price table ``greval run`` prices with.

No second formula: an align :class:`~greval.align.models.Cost` is handed to :func:`greval.llm.prices.run_cost` as
one line per model (the judge, the optimizer), so align's cost and a run's are the same figure for the same
tokens. A model the table does not price has no cost: it is named, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field

from greval.align.models import Cost, Frozen
from greval.errors import UserError
from greval.llm.prices import Price, RunCost, load_prices, prices_path, run_cost, usd_text


class Prices(Frozen):
    """The price table align prices with (the one a run's summary uses), or why there is none."""

    table: dict[str, Price] | None = None
    source: str = Field("", description="Where the prices come from, in words; or why there are none.")

    def cost(self, cost: Cost) -> RunCost | None:
        """``cost`` at these prices (None: no table could be read)."""
        if self.table is None:
            return None
        return priced(cost, self.table)


def priced(cost: Cost, table: Mapping[str, Price]) -> RunCost:
    """The run's cost formula over align's tokens, model by model."""
    return run_cost(({"judge": name, **usage.model_dump()} for name, usage in cost.models.items()), table)


def load() -> Prices:
    """greval's list prices with the user's table over them; a table that cannot be read is said, not raised
    (the dry run and the search still work without a money figure)."""
    path = prices_path()
    try:
        table = load_prices()
    except UserError as exc:
        return Prices(source=f"no cost: {exc}")
    return Prices(
        table=table, source=f"prices from {path} over greval's list" if path.is_file() else "greval's list prices"
    )


def usd_line(cost: RunCost | None, source: str) -> str:
    """A cost as align shows it: ``$0.0123``; ``no price known for openai:my-model`` (never a made-up figure);
    a partly priced cost names the models left out of it; no table: ``source`` says why."""
    if cost is None:
        return source
    if cost.usd is None:
        return f"no price known for {', '.join(cost.unpriced)}"
    text = usd_text(cost.usd)
    if cost.unpriced:
        text += f" (no price known for {', '.join(cost.unpriced)}: their tokens are not in it)"
    return text


__all__ = ["Prices", "load", "priced", "usd_line"]

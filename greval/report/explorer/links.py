"""Where a figure's records are: the record explorer's address of a filtered table (or of one record), as the
report pages link to it. The explorer reads the same keys from its address (greval/report/explorer/static/app.js,
``readHash``)."""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

#: The explorer's folder, beside index.html.
FOLDER = "explorer"
#: The filters an address may carry (the table's columns the figures filter on), and the record key.
KEYS = ("system", "group", "status", "label", "value", "bin", "human", "judge", "agree", "changed", "q", "record")


def href(metric: int, filters: Mapping[str, str] | None = None, base: str = f"{FOLDER}/index.html") -> str:
    """The explorer's address of metric number ``metric``'s records filtered by ``filters`` (each a KEYS
    column = value)."""
    parts = [f"m={metric}"]
    for key, value in (filters or {}).items():
        if key not in KEYS:
            raise ValueError(f"not an explorer filter: {key}")
        parts.append(f"{key}={quote(str(value), safe='')}")
    return f"{base}#{'&'.join(parts)}"

"""Where a figure's records are: the record explorer's address of a filtered table (or of one record), as the
report pages link to it. The explorer reads the same keys from its address (greval/report/explorer/static/app.js,
``readHash``)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
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


def confusion_section(
    metric: int, labels: Sequence[str], judge_labels: Sequence[str], counts: Sequence[Sequence[int]]
) -> str:
    """An agreement page's confusion matrix as links: each cell opens the explorer's records where people said
    the row's label and the judge the column's (from the page beside index.html)."""
    head = "".join(f"<th>{html.escape(j)}</th>" for j in judge_labels)
    rows = []
    for h, row in zip(labels, counts, strict=True):
        cells = "".join(
            f'<td><a href="{html.escape(href(metric, {"human": h, "label": j}))}">{n}</a></td>' if n else "<td>0</td>"
            for j, n in zip(judge_labels, row, strict=True)
        )
        rows.append(f"<tr><td>{html.escape(h)}</td>{cells}</tr>")
    return (
        "<h2 id=confusion-records>The records behind each cell</h2><p class=note>Rows: people's label; columns: the "
        "judge's. A count opens its records in the record explorer.</p>"
        f"<table><tr><th>human \\ judge</th>{head}</tr>{''.join(rows)}</table>"
    )

"""How text and tables fit a console, for every printer (greval.report.terminal, greval.cli): tables with
every word whole, prose wrapped between words. The width is the console's at each print (80 columns into a pipe
or a file). rich is imported at the top: the command line loads it for every command anyway."""

from __future__ import annotations

import re
import textwrap
from typing import TYPE_CHECKING, Any

from rich.cells import cell_len
from rich.measure import Measurement
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text


def say(text: str | Text, to: Console, hang: int = 0) -> None:
    """Print rich markup (or a Text) wrapped between words at the console's width, continuation lines
    indented by ``hang``: a word longer than the width (a path, a URL) stays whole on a line of its own."""

    body = Text.from_markup(text) if isinstance(text, str) else text
    for i, line in enumerate(body.divide(_breaks(body.plain, max(20, to.width - hang)))):
        line.rstrip()
        to.print(Text(" " * hang) + line if i and hang else line, soft_wrap=True, highlight=False)


def _breaks(plain: str, width: int) -> list[int]:
    """Where to break ``plain`` into lines of at most ``width`` cells: before a word that would not fit, never
    inside one (rich's own wrapping folds a long word, or wraps nothing when told not to fold)."""

    offsets: list[int] = []
    column = len(plain) - len(plain.lstrip(" "))
    for word in re.finditer(r"\S+\s*", plain):
        size = cell_len(word.group().rstrip())
        if column and column + size > width and word.start() > (offsets[-1] if offsets else 0):
            offsets.append(word.start())
            column = 0
        column += cell_len(word.group())
    return offsets


def wrap_plain(text: str, width: int, indent: str = "", hang: str = "") -> list[str]:
    """Plain text wrapped between words (never inside a word, nor at a hyphen) at ``width``."""

    return textwrap.wrap(
        text, width, initial_indent=indent, subsequent_indent=hang, break_long_words=False, break_on_hyphens=False
    ) or [indent.rstrip()]


def print_table(table: Table, to: Console) -> None:
    """A table at the console's width (80 columns into a pipe) with every word whole: as wide as it needs when
    that fits, else without its outer border, then with columns narrowed, the widest first, never below their
    longest word, so cells wrap between words; a table whose longest words cannot stand side by side is
    printed one row at a time, a "column: value" line per cell. A title wider than the table is printed above
    it, wrapped."""

    roomy = to.options.update(width=100_000)
    natural = Measurement.get(to, roomy, table).maximum
    if natural > to.width:  # first without the outer border and padding: 4 columns more for the cells
        table.show_edge = table.pad_edge = False
        natural = Measurement.get(to, roomy, table).maximum
    if natural > to.width:
        bounds = [_column_bounds(to, column) for column in table.columns]
        chrome = natural - sum(hi for _, hi in bounds)
        widths = _narrowed([lo for lo, _ in bounds], [hi for _, hi in bounds], to.width - chrome)
        if widths is None:
            _print_rows(table, to)
            return
        for column, w in zip(table.columns, widths, strict=True):
            column.width = w
        natural = sum(widths) + chrome
    title = table.title
    if isinstance(title, str) and Measurement.get(to, roomy, title).maximum > natural:
        say(title, to)
        table.title = None
    to.print(table)


def _column_bounds(to: Console, column: Any) -> tuple[int, int]:
    """(longest word, longest line) of a column's header and cells; a no-wrap column cannot narrow."""

    roomy = to.options.update(width=100_000)
    sizes = [Measurement.get(to, roomy, cell) for cell in (column.header, *column.cells)]
    lo, hi = max(m.minimum for m in sizes), max(m.maximum for m in sizes)
    return (hi if column.no_wrap else lo), hi


def _narrowed(lows: list[int], highs: list[int], room: int) -> list[int] | None:
    """Column widths within ``room``: the widest column narrowed first, none below its low; None when the
    lows alone do not fit."""
    if sum(lows) > room:
        return None
    widths = list(highs)
    while sum(widths) > room:
        i = max((k for k in range(len(widths)) if widths[k] > lows[k]), key=lambda k: widths[k])
        widths[i] -= 1
    return widths


def _print_rows(table: Table, to: Console) -> None:
    """A table too wide for the console, one row at a time: the first cell, then "column: value" lines."""

    def plain(cell: Any) -> str:
        return Text.from_markup(cell).plain if isinstance(cell, str) else getattr(cell, "plain", str(cell))

    if table.title:
        say(table.title if isinstance(table.title, str) else Text(plain(table.title)), to)
    heads = [plain(c.header) for c in table.columns]
    columns = [[plain(cell) for cell in c.cells] for c in table.columns]
    for r in range(table.row_count):
        cells = [col[r] if r < len(col) else "" for col in columns]
        say(Text(cells[0], style="bold"), to)
        for head, cell in zip(heads[1:], cells[1:], strict=True):
            say(Text(f"  {head}: {cell}"), to, hang=4)

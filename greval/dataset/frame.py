"""A small table of named columns, without pandas: what the agreement stage reads (its long frame) and what
:func:`greval.dataset.tables.read_columns` makes of a CSV / TSV / JSON file.

Importing pandas (and, with it, pyarrow) cost a `greval agreement` call more CPU than its statistics; the
stage needs only columns of values, row subsets and new columns. A pandas DataFrame becomes a Frame with
:meth:`Frame.of` (its values as ``tolist`` gives them, nothing converted) and goes back with
:meth:`Frame.to_pandas` (pandas imported then), so Python callers may pass either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


class Frame:
    """Columns of equal length (a value per row, None or NaN where missing), in order; ``attrs`` as a
    DataFrame's (what a store's frame says beyond its rows)."""

    def __init__(self, columns: Mapping[str, Sequence[Any]] | None = None, rows: int | None = None) -> None:
        self._data: dict[str, list[Any]] = {}
        self._rows = rows
        self.attrs: dict[str, Any] = {}
        for name, values in (columns or {}).items():
            self[name] = values

    @classmethod
    def of(cls, frame: Frame | pd.DataFrame) -> Frame:
        """``frame`` itself, or a DataFrame's columns (names as text) and attrs."""
        if isinstance(frame, Frame):
            return frame
        out = cls({str(name): frame[name].tolist() for name in frame.columns}, rows=len(frame))
        out.attrs = {str(k): v for k, v in frame.attrs.items()}
        return out

    @property
    def columns(self) -> list[str]:
        return list(self._data)

    def __len__(self) -> int:
        return self._rows or 0

    def __getitem__(self, name: str) -> list[Any]:
        return self._data[name]

    def __setitem__(self, name: str, values: Iterable[Any]) -> None:
        column = list(values)
        if self._rows is None:
            self._rows = len(column)
        elif len(column) != self._rows:
            raise ValueError(f"column {name!r} has {len(column)} values for {self._rows} rows")
        self._data[name] = column

    def take(self, rows: Sequence[int]) -> Frame:
        """The rows at these positions, in this order (attrs kept)."""
        out = Frame({name: [values[r] for r in rows] for name, values in self._data.items()}, rows=len(rows))
        out.attrs = dict(self.attrs)
        return out

    def where(self, keep: Iterable[bool]) -> Frame:
        """The rows where ``keep`` holds, in order."""
        return self.take([r for r, k in enumerate(keep) if k])

    def copy(self) -> Frame:
        return self.take(range(len(self)))

    def without(self, *names: str) -> Frame:
        out = Frame({name: values for name, values in self._data.items() if name not in names}, rows=len(self))
        out.attrs = dict(self.attrs)
        return out

    def to_pandas(self) -> pd.DataFrame:
        """The same columns as a DataFrame, dtypes as pandas infers them from the values (pandas imported here)."""
        import pandas as pd

        out = pd.DataFrame(self._data) if self._data else pd.DataFrame(index=range(len(self)))
        out.attrs = {k: v for k, v in self.attrs.items()}
        return out

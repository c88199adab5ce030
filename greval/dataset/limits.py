"""What reading one data file may cost: limits checked while the file is read, before memory grows.

A hostile (or broken) file can cost far more memory than its size: a CSV header of a million columns (11 MB
on disk) made pandas grow past 3.7 GB; a 1 MB ``.jsonl.gz`` expanding to one 1 GB line cost 2.2 GB. The table
reader (:mod:`greval.dataset.tables`) counts the bytes it reads and stops at a limit with a
:class:`~greval.errors.LimitExceeded` naming the file, the line and the limit; a bigger legitimate file is
read by raising that limit (the command line's flags; README, "Limits").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class ReadLimits:
    """The limits of one read of a data file (datasets, agreement tables, label files)."""

    #: Columns of a CSV / TSV header or Parquet file; fields of one JSON object, and of every row of a
    #: table read whole (agreement tables and label files: the union of the rows' fields, flattened).
    max_columns: int = 10_000
    #: Bytes of one line of a JSON Lines / CSV / TSV file (a JSON Lines record is one line).
    max_line_bytes: int = 16 * MiB
    #: Bytes a compressed file (``.gz``; a Parquet file's column data) may expand to.
    max_decompressed_bytes: int = GiB

    def __post_init__(self) -> None:
        for name in ("max_columns", "max_line_bytes", "max_decompressed_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")


_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB, "g": GiB, "gb": GiB}
_UNITS |= {"gib": GiB, "t": GiB * KiB, "tb": GiB * KiB, "tib": GiB * KiB}


def parse_size(text: str) -> int:
    """A size in bytes from ``1048576``, ``64k``, ``16M``, ``1.5G``, ``2GiB`` (binary units, any case)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = _UNITS.get(m.group(2).lower()) if m else None
    if m is None or unit is None:
        raise ValueError(f"{text!r} is not a size: write bytes, or a number with k, M or G (e.g. 64M, 2G)")
    return int(float(m.group(1)) * unit)


def size_text(n: int) -> str:
    """A byte count as people read it: ``16 MiB``, ``1.5 GiB``, ``900 bytes``."""
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit:
            value = n / unit
            return f"{value:.0f} {name}" if value == int(value) else f"{value:.1f} {name}"
    return f"{n} bytes"

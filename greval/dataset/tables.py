"""The one reader of table files: datasets, agreement tables and label files all come through here.

Formats: ``.jsonl`` / ``.ndjson``, ``.json``, ``.csv``, ``.tsv`` / ``.tab``, ``.parquet`` / ``.pq``, each
optionally ``.gz``. Whatever the file itself gets wrong (not UTF-8, a broken gzip stream, invalid JSON, an
unparsable CSV, a directory, an unknown suffix) is one :class:`DataError` naming the file.

JSON Lines and JSON are read with the standard library, row by row for JSON Lines, so reading a dataset
does not import pandas; CSV, TSV and Parquet go through pandas (imported when such a file is read), except in
:func:`read_columns`, which reads CSV and TSV with the standard library too (only Parquet imports pandas).

What a file may cost is bounded (:class:`~greval.dataset.limits.ReadLimits`): every byte goes through one
counting stream (:class:`_Counted`) that stops at a line longer than ``max_line_bytes`` (JSON Lines, CSV, TSV)
or a ``.gz`` file expanding past ``max_decompressed_bytes``, before the line or the file is in memory; the
columns of a header, a Parquet file or a JSON object are counted before a table of them is built. Each is a
:class:`~greval.errors.LimitExceeded` naming the file and the line.

Three shapes: :func:`iter_rows` / :func:`read_rows` hand over plain dicts (a JSON object as written, CSV cells
as text, the empty cell as ``""``); :func:`read_frame` a DataFrame (CSV numbers parsed unless ``as_text``,
where only the empty cell is missing so labels such as ``NA`` or ``None`` survive; JSON flattened on request);
:func:`read_columns` a :class:`~greval.dataset.frame.Frame` (CSV cells as text, the empty cell None; JSON
values as written, flattened on request), what the agreement stage reads.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import re
import sys
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from greval.dataset.frame import Frame
from greval.dataset.limits import ReadLimits, size_text
from greval.errors import DataError, LimitExceeded

if TYPE_CHECKING:
    import pandas as pd

#: Suffix (before an optional ``.gz``) -> format.
FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".tab": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
}

_Row = TypeVar("_Row")

#: Keys of a JSON object whose list holds the rows (``{"records": [...]}``), asked in this order.
_ROW_KEYS = ("records", "data", "items")


def table_format(path: str | Path) -> str:
    """The file's format from its name (``jsonl``, ``json``, ``csv``, ``tsv`` or ``parquet``)."""
    p = Path(path)
    name = p.name.lower().removesuffix(".gz")
    kind = FORMATS.get(Path(name).suffix)
    if kind is None:
        raise DataError(f"{p}: unknown format; use .jsonl, .json, .csv, .tsv or .parquet (optionally .gz)")
    return kind


def check_file(path: str | Path) -> tuple[Path, str]:
    """The path and its format, once it is known to be a file greval can try to read."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, not a data file")
    return p, table_format(p)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _not_utf8(path: Path, line: int, byte: bytes) -> DataError:
    return DataError(
        f"{path}: line {line}: not UTF-8 text (byte 0x{byte.hex()}); re-save the file as UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8)"
    )


def _decode(raw: bytes, path: Path, line: int | None = None) -> str:
    """UTF-8 text (a leading BOM is dropped), or a DataError naming the line and the offending byte."""
    try:
        return raw.decode("utf-8-sig" if raw.startswith(codecs.BOM_UTF8) else "utf-8")
    except UnicodeDecodeError as exc:
        if line is None:
            line = raw.count(b"\n", 0, exc.start) + 1
        raise _not_utf8(path, line, raw[exc.start : exc.start + 1]) from None


def _json(text: str, where: str, at: str) -> Any:
    """Parsed JSON, or a one-line DataError naming ``where`` (``at`` may place the error: ``{line}``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: invalid JSON{at.format(line=exc.lineno)} ({exc.msg})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply") from None
    except ValueError:
        # The one other ValueError json raises: an integer longer than Python converts to int.
        most = sys.get_int_max_str_digits()
        found = re.search(rf"\d{{{most + 1},}}", text)
        place = at.format(line=text.count("\n", 0, found.start()) + 1) if found else ""
        digits = f"{len(found.group()):,} digits" if found else "too many digits"
        raise DataError(
            f"{where}: a number{place} has {digits}, more than the {most:,} Python reads as an integer; "
            "write it as a string"
        ) from None


class _Counted(io.RawIOBase):
    """A file's bytes (decompressed) as they are read, counted against the limits before they go further:
    the whole stream against ``max_decompressed_bytes`` (``total``), each line against ``max_line_bytes``
    (``lines``). ``utf8``: checked as UTF-8 too, so a bad byte is reported at its line (pandas cannot say).
    Errors of the gzip stream are reported here, at the line they break."""

    def __init__(self, inner: Any, path: Path, limits: ReadLimits, *, total: bool, lines: bool, utf8: bool) -> None:
        super().__init__()
        self._inner = inner
        self._path = path
        self._limits = limits
        self._total = limits.max_decompressed_bytes if total else None
        self._line_max = limits.max_line_bytes if lines else None
        self._utf8 = codecs.getincrementaldecoder("utf-8")() if utf8 else None
        self.read_bytes = 0
        self.lines = 0  # line breaks read so far
        self._run = 0  # bytes since the last line break

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        try:
            if isinstance(self._inner, gzip.GzipFile):
                # read1: what one step of decompression gives, so that an error comes at the line it breaks
                data = self._inner.read1(len(buffer))
                n = len(data)
                buffer[:n] = data
            else:
                n = self._inner.readinto(buffer)
        except gzip.BadGzipFile:
            raise DataError(f"{self._path}: not a gzip file, though its name ends in .gz") from None
        except (EOFError, zlib.error) as exc:
            raise DataError(
                f"{self._path}: line {self.lines + 1}: truncated or corrupt gzip data ({_one_line(exc)})"
            ) from None
        if n:
            self._count(bytes(memoryview(buffer)[:n]))
        elif self._utf8 is not None:
            self._check_utf8(b"", final=True)
        return n

    def _count(self, chunk: bytes) -> None:
        self.read_bytes += len(chunk)
        if self._total is not None and self.read_bytes > self._total:
            raise LimitExceeded(
                f"{self._path}: line {self.lines + 1}: expands to more than {size_text(self._total)} once "
                "decompressed, the limit",
                "max_decompressed_bytes",
            )
        if self._utf8 is not None:
            self._check_utf8(chunk)
        if self._line_max is not None:
            self._check_lines(chunk, self._line_max)
        else:
            self.lines += chunk.count(b"\n")

    def _check_utf8(self, chunk: bytes, final: bool = False) -> None:
        assert self._utf8 is not None
        try:
            self._utf8.decode(chunk, final)
        except UnicodeDecodeError as exc:
            data: bytes = exc.object  # a character cut at the last chunk's end, then this chunk
            line = self.lines + data.count(b"\n", 0, exc.start) + 1
            raise _not_utf8(self._path, line, data[exc.start : exc.start + 1]) from None

    def _check_lines(self, chunk: bytes, most: int) -> None:
        first = chunk.find(b"\n")
        if first < 0:
            self._run += len(chunk)
            if self._run > most:
                raise self._long_line(self.lines + 1)
            return
        if self._run + first > most:
            raise self._long_line(self.lines + 1)
        if len(chunk) > most:  # a whole line may lie inside this chunk: look at each
            start, line = first + 1, self.lines + 1
            while (end := chunk.find(b"\n", start)) >= 0:
                line += 1
                if end - start > most:
                    raise self._long_line(line)
                start = end + 1
        self.lines += chunk.count(b"\n")
        self._run = len(chunk) - chunk.rfind(b"\n") - 1
        if self._run > most:
            raise self._long_line(self.lines + 1)

    def _long_line(self, line: int) -> LimitExceeded:
        assert self._line_max is not None
        return LimitExceeded(
            f"{self._path}: line {line}: longer than {size_text(self._line_max)}, the limit of one line",
            "max_line_bytes",
        )

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            super().close()


def _too_wide(path: Path, line: int | None, count: int, what: str, limits: ReadLimits) -> LimitExceeded:
    where = f"{path}: line {line}: " if line is not None else f"{path}: "
    return LimitExceeded(
        f"{where}{count:,} {what}, more than the limit of {limits.max_columns:,} columns", "max_columns"
    )


def _guarded(path: Path, rows: Iterator[_Row]) -> Iterator[_Row]:
    """``rows``, with whatever the file itself gets wrong turned into a DataError naming it (what the
    counting stream sees is reported there, with its line; this is the rest: pyarrow's reads, the OS)."""
    gz = path.name.lower().endswith(".gz")
    try:
        yield from rows
    except DataError:
        raise
    except gzip.BadGzipFile:
        raise DataError(f"{path}: not a gzip file, though its name ends in .gz") from None
    except (EOFError, zlib.error) as exc:
        what = "truncated or corrupt gzip data" if gz else "the file ends unexpectedly"
        raise DataError(f"{path}: {what} ({_one_line(exc)})") from None
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 text ({_one_line(exc)}); re-save the file as UTF-8") from None
    except IsADirectoryError:
        raise DataError(f"{path}: is a directory, not a data file") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc.strerror or _one_line(exc)}") from None
    except RecursionError:
        raise DataError(f"{path}: nested too deeply") from None


def _open(path: Path, limits: ReadLimits, *, lines: bool, utf8: bool = False) -> io.BufferedReader:
    """The file's bytes, decompressed if its name ends in .gz, read through :class:`_Counted` (``lines``:
    a format read line by line, whose lines are bounded; ``utf8``: checked as UTF-8 on the way)."""
    gz = path.name.lower().endswith(".gz")
    inner = gzip.open(path, "rb") if gz else open(path, "rb", buffering=0)  # noqa: SIM115 (closed by the stream)
    counted = _Counted(inner, path, limits, total=gz, lines=lines, utf8=utf8)
    return io.BufferedReader(counted, buffer_size=1 << 20)


def _jsonl_rows(path: Path, limits: ReadLimits) -> Iterator[dict[str, Any]]:
    for _, row in _jsonl_lines(path, limits):
        yield row


def _jsonl_lines(path: Path, limits: ReadLimits) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each row of a JSON Lines file with the byte offset its line starts at (blank lines skipped)."""
    with _open(path, limits, lines=True) as fh:
        end = 0
        for n, raw in enumerate(fh, start=1):
            start, end = end, end + len(raw)
            line = _decode(raw, path, n)
            if not line.strip():
                continue
            row = _json(line, f"{path}: line {n}", "")
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {n}: each line must be a JSON object")
            if len(row) > limits.max_columns:
                raise _too_wide(path, n, len(row), "fields in one object", limits)
            yield start, row


def seekable_lines(path: str | Path) -> bool:
    """Whether ``path`` is a plain (uncompressed) JSON Lines file: one whose rows :func:`iter_rows_at` can place
    by byte offset, for a reader to seek to one again."""
    return table_format(path) == "jsonl" and not Path(path).name.lower().endswith(".gz")


def iter_rows_at(path: str | Path, limits: ReadLimits | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`iter_rows` of a plain JSON Lines file (:func:`seekable_lines`), each row with the byte offset its
    line starts at."""
    limits = limits or ReadLimits()
    p, _ = check_file(path)
    if not seekable_lines(p):
        raise ValueError(f"{p}: not a plain JSON Lines file")
    return _guarded(p, _jsonl_lines(p, limits))


def _json_rows(path: Path, limits: ReadLimits) -> Iterator[dict[str, Any]]:
    """An array of objects, or an object holding one (under records / data / items, else its first list)."""
    with _open(path, limits, lines=False) as fh:
        text = _decode(fh.read(), path)
    data = _json(text, str(path), " at line {line}")
    if isinstance(data, dict):
        lists = [(k, v) for k, v in data.items() if isinstance(v, list)]
        data = next((v for k, v in lists if k in _ROW_KEYS), lists[0][1] if lists else None)
    if not isinstance(data, list):
        raise DataError(f'{path}: expected a JSON array of objects (or {{"records": [...]}})')
    for n, row in enumerate(data):
        if not isinstance(row, dict):
            raise DataError(f"{path}: item {n} is not an object")
        if len(row) > limits.max_columns:
            raise _too_wide(path, None, len(row), f"fields in item {n}", limits)
        yield row


def _check_header(path: Path, kind: str, limits: ReadLimits) -> None:
    """A CSV / TSV header of more than ``max_columns`` columns stops here, before pandas builds a column
    for each (a million-column header of 11 MB grew pandas past 3.7 GB). Its first line is read (at most a
    line's limit) and its separators counted; parsed as CSV only when quotes make that count too high."""
    with _open(path, limits, lines=True) as fh:
        head = fh.readline()
    sep = "\t" if kind == "tsv" else ","
    count = head.count(sep.encode()) + 1
    if count > limits.max_columns and b'"' in head:
        count = len(next(csv.reader([head.decode("utf-8", "replace")], delimiter=sep), []))
    if count > limits.max_columns:
        raise _too_wide(path, 1, count, f"columns in the {kind.upper()} header", limits)


def _parquet_frame(path: Path, limits: ReadLimits) -> pd.DataFrame:
    """A Parquet file, once its footer says it has at most ``max_columns`` columns and at most
    ``max_decompressed_bytes`` of column data (its pages are compressed)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.ParquetFile(path).metadata
        if meta.num_columns > limits.max_columns:
            raise _too_wide(path, None, meta.num_columns, "Parquet columns", limits)
        size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
        if size > limits.max_decompressed_bytes:
            raise LimitExceeded(
                f"{path}: {size_text(size)} of Parquet column data once decompressed, more than the limit of "
                f"{size_text(limits.max_decompressed_bytes)}",
                "max_decompressed_bytes",
            )
        return pd.read_parquet(path)
    except (EOFError, zlib.error):
        raise
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None


def _pandas_frame(path: Path, kind: str, as_text: bool, empty_missing: bool, limits: ReadLimits) -> pd.DataFrame:
    """A CSV / TSV / Parquet file as a DataFrame (errors of the file itself as DataErrors naming it). A CSV
    reaches pandas through the counting stream: its lines and decompressed size are bounded as it reads."""
    import pandas as pd

    if kind not in ("csv", "tsv"):
        return _parquet_frame(path, limits)
    label = kind.upper()
    sep = "\t" if kind == "tsv" else ","
    _check_header(path, kind, limits)
    how: dict[str, Any] = {}
    if as_text:
        how = {"dtype": str, "keep_default_na": False} | ({"na_values": [""]} if empty_missing else {})
    try:
        with _open(path, limits, lines=True, utf8=True) as fh:
            frame: pd.DataFrame = pd.read_csv(fh, sep=sep, compression=None, **how)
            return frame
    except pd.errors.EmptyDataError:
        raise DataError(f"{path}: empty {label} file (no header row)") from None
    except UnicodeDecodeError:
        raise  # reported by _guarded, like any other file that is not UTF-8
    except (pd.errors.ParserError, ValueError) as exc:
        raise DataError(f"{path}: cannot parse {label}: {_one_line(exc)}") from None


def _frame_rows(path: Path, kind: str, limits: ReadLimits) -> Iterator[dict[str, Any]]:
    frame = _pandas_frame(path, kind, as_text=True, empty_missing=False, limits=limits)
    for row in frame.to_dict(orient="records"):
        yield {str(k): v for k, v in row.items()}


def iter_rows(path: str | Path, limits: ReadLimits | None = None) -> Iterator[dict[str, Any]]:
    """The file's rows as dicts, in file order; JSON Lines is streamed (one line in memory at a time).

    A JSON object is handed over as written (nested values stay nested); CSV / TSV cells are text, the
    empty cell ``""``; Parquet values as pandas reads them. ``limits``: what reading it may cost (the
    defaults of :class:`ReadLimits` when None)."""
    limits = limits or ReadLimits()
    p, kind = check_file(path)
    if kind == "jsonl":
        rows = _jsonl_rows(p, limits)
    elif kind == "json":
        rows = _json_rows(p, limits)
    else:
        rows = _frame_rows(p, kind, limits)
    return _guarded(p, rows)


def read_json(path: str | Path, limits: ReadLimits | None = None) -> Any:
    """A ``.json`` file's whole value, as json reads it (decompressed if ``.gz``, within ``limits``; errors as
    for a table): for documents that are not a table of rows (a tracing tool's trace download)."""
    limits = limits or ReadLimits()
    p, _ = check_file(path)

    def read() -> Iterator[dict[str, Any]]:
        with _open(p, limits, lines=False) as fh:
            text = _decode(fh.read(), p)
        yield {"value": _json(text, str(p), " at line {line}")}

    return next(_guarded(p, read()))["value"]


def stream_bytes(path: str | Path, limits: ReadLimits | None = None) -> Iterator[bytes]:
    """A file's bytes a chunk at a time (decompressed if ``.gz``, within ``limits``; errors as for a table): for
    a reader that parses a large document as it streams instead of holding it whole."""
    limits = limits or ReadLimits()
    p, _ = check_file(path)

    def read() -> Iterator[bytes]:
        with _open(p, limits, lines=False) as fh:
            while chunk := fh.read(1 << 20):
                yield chunk

    return _guarded(p, read())


def _columns(path: Path, rows: Iterable[dict[str, Any]], limits: ReadLimits, flat: bool) -> list[str]:
    """The columns of rows read whole (every field of every row, in order of first appearance; nested objects'
    as dotted paths when ``flat``), stopped at ``max_columns``: a table of them would cost rows x columns."""
    seen: dict[str, None] = {}
    for n, row in enumerate(rows, start=1):
        seen.update(dict.fromkeys(_flat_keys(row) if flat else row))
        if len(seen) > limits.max_columns:
            raise _too_wide(path, None, len(seen), f"distinct fields in its first {n:,} rows", limits)
    return list(seen)


def _flat_keys(row: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """The columns pandas.json_normalize makes of one object (nested objects' keys as dotted paths)."""
    for key, value in row.items():
        if isinstance(value, dict) and value:
            yield from _flat_keys(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def read_rows(path: str | Path, limits: ReadLimits | None = None) -> list[dict[str, Any]]:
    """Every row of the file (:func:`iter_rows`), each with every column the file has (``None`` where a JSON
    object lacks a key), columns in order of first appearance."""
    limits = limits or ReadLimits()
    rows = list(iter_rows(path, limits))
    columns = _columns(Path(path), rows, limits, flat=False)
    return [r if len(r) == len(columns) else {c: r.get(c) for c in columns} for r in rows]


def read_frame(
    path: str | Path, *, as_text: bool = False, flatten: bool = False, limits: ReadLimits | None = None
) -> pd.DataFrame:
    """The file as a DataFrame.

    ``as_text``: CSV / TSV cells are strings and only the empty cell is missing (labels such as ``NA``,
    ``None`` or ``null`` would otherwise become NaN); without it pandas parses numbers and its NA literals.
    ``flatten``: nested JSON objects become dotted columns (``scores.q``, pandas.json_normalize).
    JSON ``null`` and Parquet nulls are missing either way."""
    import pandas as pd

    limits = limits or ReadLimits()
    p, kind = check_file(path)

    def read() -> Iterator[dict[str, Any]]:
        # Inside the guard: a file error while pandas reads is reported like one while rows are read.
        if kind in ("jsonl", "json"):
            rows = list(_jsonl_rows(p, limits) if kind == "jsonl" else _json_rows(p, limits))
            _columns(p, rows, limits, flat=flatten)
            yield {"frame": pd.json_normalize(rows) if flatten else pd.DataFrame(rows)}
        else:
            yield {"frame": _pandas_frame(p, kind, as_text=as_text, empty_missing=True, limits=limits)}

    frame: pd.DataFrame = next(_guarded(p, read()))["frame"]
    return frame


def _header_names(cells: list[str]) -> list[str]:
    """Column names as pandas makes them of a header: an empty one is ``Unnamed: i``, a repeated one gets
    ``.1``, ``.2`` … (so no column is lost)."""
    names: list[str] = []
    seen: set[str] = set()
    for i, cell in enumerate(cells):
        name = cell or f"Unnamed: {i}"
        base, n = name, 0
        while name in seen:
            n += 1
            name = f"{base}.{n}"
        seen.add(name)
        names.append(name)
    return names


def _no_cell_limit() -> None:
    """The csv module refuses a cell over 128 KiB by default; pandas has no such limit, and what a file may cost
    is bounded by ReadLimits already (lines, decompressed size), so cells may be as long as those allow."""
    try:
        csv.field_size_limit(sys.maxsize)
    except OverflowError:  # a C long narrower than Python's size (Windows)
        csv.field_size_limit(2**31 - 1)


def _csv_columns(path: Path, kind: str, limits: ReadLimits) -> Frame:
    """A CSV / TSV file as text columns (the standard library's reader, strict about quotes): the empty cell
    and the cells a short row lacks are None, a blank line is skipped, a row with more cells than the header
    is an error naming its line (what pandas reads with ``dtype=str, keep_default_na=False, na_values=[""]``,
    without pandas' quirks: a row one cell longer is an error, not a silent index column)."""
    label = kind.upper()
    _no_cell_limit()
    with _open(path, limits, lines=True, utf8=True) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        reader = csv.reader(text, delimiter="\t" if kind == "tsv" else ",", strict=True)
        try:
            header = next((row for row in reader if row), None)
            if header is None:
                raise DataError(f"{path}: empty {label} file (no header row)")
            if len(header) > limits.max_columns:
                raise _too_wide(path, reader.line_num, len(header), f"columns in the {label} header", limits)
            names = _header_names(header)
            width = len(names)
            rows: list[list[str | None]] = []
            for row in reader:
                if not row:
                    continue
                if len(row) > width:
                    line = reader.line_num
                    raise DataError(
                        f"{path}: cannot parse {label}: line {line}: {len(row)} cells, the header has {width}"
                    )
                rows.append([cell if cell != "" else None for cell in row] + [None] * (width - len(row)))
        except csv.Error as exc:
            raise DataError(f"{path}: cannot parse {label}: line {reader.line_num}: {_one_line(exc)}") from None
    return Frame({name: [row[c] for row in rows] for c, name in enumerate(names)}, rows=len(rows))


def _flat(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """One object with its nested objects' keys as dotted paths, as pandas.json_normalize flattens it (an
    empty nested object gives no column)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def read_columns(path: str | Path, *, flatten: bool = False, limits: ReadLimits | None = None) -> Frame:
    """The file as a :class:`Frame`: CSV / TSV cells as text (only the empty cell missing, so labels such as
    ``NA`` or ``None`` survive), JSON values as written (``None`` where an object lacks a key; nested objects
    as dotted columns with ``flatten``), Parquet as pandas reads it. Only Parquet imports pandas."""
    limits = limits or ReadLimits()
    p, kind = check_file(path)

    def read() -> Iterator[dict[str, Any]]:
        if kind in ("jsonl", "json"):
            rows = list(_jsonl_rows(p, limits) if kind == "jsonl" else _json_rows(p, limits))
            columns = _columns(p, rows, limits, flat=flatten)
            if flatten:
                rows = [_flat(r) for r in rows]
                columns = list(dict.fromkeys(c for r in rows for c in r))
            yield {"frame": Frame({c: [r.get(c) for r in rows] for c in columns}, rows=len(rows))}
        elif kind == "parquet":
            yield {"frame": Frame.of(_parquet_frame(p, limits))}
        else:
            yield {"frame": _csv_columns(p, kind, limits)}

    frame: Frame = next(_guarded(p, read()))["frame"]
    return frame

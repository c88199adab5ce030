"""The one reader of table files: datasets, agreement tables and label files all come through here.

Formats: ``.jsonl`` / ``.ndjson``, ``.json``, ``.csv``, ``.tsv`` / ``.tab``, ``.parquet`` / ``.pq``, each
optionally ``.gz``. Whatever the file itself gets wrong (not UTF-8, a broken gzip stream, invalid JSON, an
unparsable CSV, a directory, an unknown suffix) is one :class:`DataError` naming the file.

JSON Lines and JSON are read with the standard library, row by row for JSON Lines, so reading a dataset
does not import pandas; CSV, TSV and Parquet go through pandas (imported when such a file is read).

Two shapes: :func:`iter_rows` / :func:`read_rows` hand over plain dicts (a JSON object as written, CSV cells
as text, the empty cell as ``""``); :func:`read_frame` a DataFrame (CSV numbers parsed unless ``as_text``,
where only the empty cell is missing so labels such as ``NA`` or ``None`` survive; JSON flattened on request).
"""

from __future__ import annotations

import codecs
import gzip
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greval.errors import DataError

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


def _decode(raw: bytes, path: Path, line: int | None = None) -> str:
    """UTF-8 text (a leading BOM is dropped), or a DataError naming the line and the offending byte."""
    try:
        return raw.decode("utf-8-sig" if raw.startswith(codecs.BOM_UTF8) else "utf-8")
    except UnicodeDecodeError as exc:
        if line is None:
            line = raw.count(b"\n", 0, exc.start) + 1
        byte = raw[exc.start : exc.start + 1].hex()
        raise DataError(
            f"{path}: line {line}: not UTF-8 text (byte 0x{byte}); re-save the file as UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8)"
        ) from None


def _json(text: str, where: str, at: str) -> Any:
    """Parsed JSON, or a one-line DataError naming ``where`` (``at`` may place the error: ``{line}``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: invalid JSON{at.format(line=exc.lineno)} ({exc.msg})") from None
    except RecursionError:
        raise DataError(f"{where}: JSON nested too deeply") from None


def _guarded(path: Path, rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """``rows``, with whatever the file itself gets wrong turned into a DataError naming it."""
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


def _open(path: Path) -> Any:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with _open(path) as fh:
        for n, raw in enumerate(fh, start=1):
            line = _decode(raw, path, n)
            if not line.strip():
                continue
            row = _json(line, f"{path}: line {n}", "")
            if not isinstance(row, dict):
                raise DataError(f"{path}: line {n}: each line must be a JSON object")
            yield row


def _json_rows(path: Path) -> Iterator[dict[str, Any]]:
    """An array of objects, or an object holding one (under records / data / items, else its first list)."""
    with _open(path) as fh:
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
        yield row


def _pandas_frame(path: Path, kind: str, as_text: bool, empty_missing: bool) -> pd.DataFrame:
    """A CSV / TSV / Parquet file as a DataFrame (errors of the file itself as DataErrors naming it)."""
    import pandas as pd

    if kind in ("csv", "tsv"):
        label = kind.upper()
        sep = "\t" if kind == "tsv" else ","
        try:
            if not as_text:
                return pd.read_csv(path, sep=sep, compression="infer")
            if empty_missing:
                return pd.read_csv(path, sep=sep, compression="infer", dtype=str, keep_default_na=False, na_values=[""])
            return pd.read_csv(path, sep=sep, compression="infer", dtype=str, keep_default_na=False)
        except pd.errors.EmptyDataError:
            raise DataError(f"{path}: empty {label} file (no header row)") from None
        except UnicodeDecodeError:
            raise  # reported by _guarded, like any other file that is not UTF-8
        except (pd.errors.ParserError, ValueError) as exc:
            raise DataError(f"{path}: cannot parse {label}: {_one_line(exc)}") from None
    import pyarrow as pa

    try:
        return pd.read_parquet(path)
    except (EOFError, zlib.error):
        raise
    except (pa.ArrowException, ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({_one_line(exc)})") from None


def _frame_rows(path: Path, kind: str) -> Iterator[dict[str, Any]]:
    frame = _pandas_frame(path, kind, as_text=True, empty_missing=False)
    for row in frame.to_dict(orient="records"):
        yield {str(k): v for k, v in row.items()}


def iter_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """The file's rows as dicts, in file order; JSON Lines is streamed (one line in memory at a time).

    A JSON object is handed over as written (nested values stay nested); CSV / TSV cells are text, the
    empty cell ``""``; Parquet values as pandas reads them."""
    p, kind = check_file(path)
    if kind == "jsonl":
        rows = _jsonl_rows(p)
    elif kind == "json":
        rows = _json_rows(p)
    else:
        rows = _frame_rows(p, kind)
    return _guarded(p, rows)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every row of the file (:func:`iter_rows`), each with every column the file has (``None`` where a JSON
    object lacks a key), columns in order of first appearance."""
    rows = list(iter_rows(path))
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return [r if len(r) == len(columns) else {c: r.get(c) for c in columns} for r in rows]


def read_frame(path: str | Path, *, as_text: bool = False, flatten: bool = False) -> pd.DataFrame:
    """The file as a DataFrame.

    ``as_text``: CSV / TSV cells are strings and only the empty cell is missing (labels such as ``NA``,
    ``None`` or ``null`` would otherwise become NaN); without it pandas parses numbers and its NA literals.
    ``flatten``: nested JSON objects become dotted columns (``scores.q``, pandas.json_normalize).
    JSON ``null`` and Parquet nulls are missing either way."""
    import pandas as pd

    p, kind = check_file(path)

    def read() -> Iterator[dict[str, Any]]:
        # Inside the guard: a file error while pandas reads is reported like one while rows are read.
        if kind in ("jsonl", "json"):
            rows = list(_jsonl_rows(p) if kind == "jsonl" else _json_rows(p))
            yield {"frame": pd.json_normalize(rows) if flatten else pd.DataFrame(rows)}
        else:
            yield {"frame": _pandas_frame(p, kind, as_text=as_text, empty_missing=True)}

    frame: pd.DataFrame = next(_guarded(p, read()))["frame"]
    return frame

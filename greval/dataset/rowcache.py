"""A dataset file's rows remembered by their (id, content hash) and byte offset, so that a run over a file it
has read before reads the file's bytes once to recognise it instead of parsing, normalising and hashing every row.

What a run needs of most rows of a file it has judged before is their id and content hash (the store answers
what is left from those); their data is read only for the rows with work left. :class:`RowCache` keeps, per
file and way of reading it (the mapping, the id column, the row limit, the read limits: :class:`ReadKey`), the
ids, hashes and offsets of its rows and what reading it noted, in one file of greval's data directory.

An entry is used only when all of these hold, else it is ignored and the file read as before (a corrupt
entry with a note, a stale one silently) and the entry written again:

* it is whole: its own sha256 (the last 32 bytes) matches what precedes it;
* it was written by this scheme of hashing rows (:data:`HASH_SCHEME`, bumped with any change to what a row's
  content hash is made of: tests/test_rowcache.py hashes fixed rows against a committed digest) and this layout;
* the file has the size, modification time and **sha256 of all its bytes** it had when the entry was made.
  The whole file is digested (~0.3 s of CPU for 300 MB, a fiftieth of parsing it): a digest of a part, or size
  and time alone, would take a file edited in place (a typo fixed, a time stamp restored by ``cp -p`` or
  ``tar``) for the one hashed, and give its old verdicts to new content.

A row read again from its offset is hashed again and must give the id and hash the entry holds (else the file
changed while the run read it: a DataError, as for any file read twice). Entries are 0600 in a 0700 folder
(they hold record ids); the least recently used beyond :attr:`RowCache.max_entries` entries or
:attr:`RowCache.max_bytes` bytes are deleted. Only plain
JSON Lines files are cached (the format read as a stream; the others are read whole into memory anyway).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from greval.dataset.compact import Pairs
from greval.dataset.limits import MiB, ReadLimits
from greval.errors import UserError
from greval.paths import data_dir, private_output

__all__ = ["HASH_SCHEME", "Entry", "FileIdentity", "ReadKey", "RowCache", "identify"]

#: The scheme of a row's content hash: bump it whenever what goes into it changes (greval.dataset.records:
#: hash_row's normalisation, content_hash's canonical JSON, id_text, map_rows' mapping and repeated rows).
#: Entries of another scheme are never used. tests/test_rowcache.py fails when the hashes of a fixed sample of
#: rows change while this stays.
HASH_SCHEME = 1

#: The layout of an entry's file (bumped when it changes).
_LAYOUT = 1
_MAGIC = b"greval row cache\n"
_SUFFIX = ".rows"
_DIGEST = 32  # bytes of the sha256 closing an entry


@dataclass(frozen=True)
class RowCache:
    """Where a dataset file's rows are remembered, and which files are worth it."""

    #: The entries' folder; None: ``rowcache`` in greval's data directory (greval.paths.data_dir).
    directory: Path | None = None
    #: Smaller files are read again each time (parsing 1 MB of rows takes milliseconds).
    min_bytes: int = MiB
    #: Entries kept at most, and their bytes at most (~50 a row): the least recently used beyond either are
    #: deleted when one is written (the one written is kept, whatever its size).
    max_entries: int = 16
    max_bytes: int = 1024 * MiB

    def folder(self) -> Path:
        return self.directory if self.directory is not None else data_dir() / "rowcache"

    def entry_path(self, key: ReadKey) -> Path:
        return self.folder() / f"{key.name()}{_SUFFIX}"


@dataclass(frozen=True)
class ReadKey:
    """One way of reading one file: what its rows' ids and hashes depend on besides its bytes."""

    path: str  # resolved: one entry per file, however it is named
    mapping: tuple[tuple[str, str], ...]
    id_column: str | None
    limit: int | None
    limits: ReadLimits = field(default_factory=ReadLimits)

    def as_json(self) -> dict[str, Any]:
        return {
            "scheme": HASH_SCHEME,
            "layout": _LAYOUT,
            "path": self.path,
            "mapping": [list(pair) for pair in self.mapping],
            "id_column": self.id_column,
            "limit": self.limit,
            "limits": asdict(self.limits),
        }

    def name(self) -> str:
        return hashlib.sha256(json.dumps(self.as_json(), sort_keys=True).encode()).hexdigest()[:32]


class FileIdentity(NamedTuple):
    """What says a file is the one an entry was made from."""

    size: int
    mtime_ns: int
    digest: str  # sha256 of every byte


def identify(path: Path) -> FileIdentity:
    """The file's size, modification time and the sha256 of its bytes (read once, in C, outside the GIL)."""
    with path.open("rb") as fh:
        st = os.fstat(fh.fileno())
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return FileIdentity(st.st_size, st.st_mtime_ns, digest)


@dataclass
class Entry:
    """What an entry holds: the rows a read yields (in order: their ids, content hashes and byte offsets), the
    name the file was read under and the notes the read made (each begins with that name). Held compactly
    (~50 bytes a row): ids one a line in one text, hashes packed."""

    ids: str  # each row's id, one a line
    hashes: bytes  # each row's sha256 content hash, 32 bytes a row
    offsets: array[int]
    where: str
    notes: list[str]

    def __len__(self) -> int:
        return len(self.offsets)

    def pairs(self) -> Iterator[tuple[str, str]]:
        """(id, content hash) of each row, in order."""
        ids, h, start = self.ids, self.hashes, 0
        for i in range(len(self.offsets)):
            end = ids.find("\n", start)
            end = len(ids) if end < 0 else end
            yield ids[start:end], h[32 * i : 32 * i + 32].hex()
            start = end + 1

    def notes_for(self, where: str) -> list[str]:
        """The read's notes, naming the file as ``where`` does."""
        old = f"{self.where}: "
        return [f"{where}: {n.removeprefix(old)}" if n.startswith(old) else n for n in self.notes]


def pack(pairs: Pairs, offsets: array[int], where: str, notes: Sequence[str]) -> Entry | None:
    """An entry of these rows; None when one cannot be kept: an id holding a line break, a hash that is not a
    sha256 in hex (neither is greval's: such a file is read again each time). Made from the pairs' own compact
    columns, with no str per row (for a million rows that was ~160 MB more at the peak of a first run)."""
    ids = pairs.ids.joined("\n")
    if ids.count("\n") != max(0, len(pairs) - 1):
        return None
    hashes = pairs.hashes.packed()
    if hashes is None or len(hashes) != 32 * len(pairs) or len(offsets) != len(pairs):
        return None
    return Entry(ids, hashes, offsets, where, list(notes))


def write(cache: RowCache, key: ReadKey, ident: FileIdentity, entry: Entry) -> str | None:
    """Write the entry (0600, whole or not at all); a note when it cannot be written (None when written)."""
    ids = entry.ids.encode()
    head = {
        "key": key.as_json(),
        "file": ident._asdict(),
        "rows": len(entry),
        "ids_bytes": len(ids),
        "where": entry.where,
        "notes": entry.notes,
    }
    blob = json.dumps(head, ensure_ascii=False).encode()
    offsets: memoryview = memoryview(entry.offsets).cast("B")  # the array's bytes, not a copy of them
    parts: list[bytes | memoryview] = [_MAGIC, struct.pack("<I", len(blob)), blob, offsets, entry.hashes, ids]
    target = cache.entry_path(key)
    try:
        with private_output(target) as part, part.open("wb") as out:
            digest = hashlib.sha256()
            for piece in parts:  # written piece by piece: no copy of the whole entry (~50 bytes a row) in memory
                digest.update(piece)
                out.write(piece)
            out.write(digest.digest())
    except (UserError, OSError) as exc:
        return f"{key.path}: its rows' hashes could not be kept for the next run ({exc}); it is read whole each time"
    _evict(cache, keep=target)
    return None


def read(cache: RowCache, key: ReadKey, path: Path) -> tuple[Entry | None, str | None]:
    """The entry for ``key`` if it is whole, of this scheme and made from the file as it is now: (entry, None);
    else (None, a note when the entry was there but corrupt; None when absent or made from another version of
    the file)."""
    where = cache.entry_path(key)
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, _corrupt(key, where, exc.strerror or str(exc))
    try:
        head, entry = _unpack(raw)
    except ValueError as exc:
        return None, _corrupt(key, where, str(exc))
    if head["key"] != key.as_json():
        return None, None  # another scheme or layout (or a clash of names): made anew
    st = path.stat()
    file = head["file"]
    if (file["size"], file["mtime_ns"]) != (st.st_size, st.st_mtime_ns) or identify(path) != FileIdentity(**file):
        return None, None  # the file changed since: read again
    with contextlib.suppress(OSError):
        os.utime(where)  # recently used: kept by _evict
    return entry, None


def _unpack(raw: bytes) -> tuple[dict[str, Any], Entry]:
    """An entry's header and rows; ValueError when it is not a whole entry of this layout."""
    if len(raw) < len(_MAGIC) + 4 + _DIGEST or not raw.startswith(_MAGIC):
        raise ValueError("not a row cache entry")
    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    if hashlib.sha256(body).digest() != digest:
        raise ValueError("its checksum does not match: truncated or damaged")
    view = memoryview(body)
    at = len(_MAGIC)
    (size,) = struct.unpack_from("<I", body, at)
    at += 4
    try:
        head = json.loads(bytes(view[at : at + size]))
        n, id_bytes = int(head["rows"]), int(head["ids_bytes"])
        where, notes = str(head["where"]), [str(x) for x in head["notes"]]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable header ({exc})") from None
    at += size
    if len(body) != at + 8 * n + 32 * n + id_bytes:
        raise ValueError("its size does not match its header")
    offsets = array("q")
    offsets.frombytes(view[at : at + 8 * n])
    at += 8 * n
    hashes = bytes(view[at : at + 32 * n])
    at += 32 * n
    try:
        ids = bytes(view[at:]).decode()
    except UnicodeDecodeError:
        raise ValueError("its ids are not text") from None
    if ids.count("\n") != max(0, n - 1):
        raise ValueError("its ids do not match its header")
    return head, Entry(ids, hashes, offsets, where, notes)


def _corrupt(key: ReadKey, where: Path, why: str) -> str:
    return f"{key.path}: the cache of its rows' hashes ({where}) is unreadable ({why}): ignored, the file read again"


def _evict(cache: RowCache, keep: Path) -> None:
    """Delete the least recently used entries beyond ``max_entries`` or ``max_bytes`` (``keep``, just written,
    stays)."""
    try:
        found = [(st.st_mtime_ns, st.st_size, p) for p in cache.folder().glob(f"*{_SUFFIX}") for st in [p.stat()]]
        total = keep.stat().st_size
    except OSError:
        return
    found.sort(reverse=True)  # the most recently used first
    kept = 1
    for _, size, p in (f for f in found if f[2] != keep):
        if kept < cache.max_entries and total + size <= cache.max_bytes:
            kept, total = kept + 1, total + size
            continue
        with contextlib.suppress(OSError):
            p.unlink()

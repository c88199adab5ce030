"""Per-row strings of a large dataset held compactly: what a run keeps of each of a million rows.

A ``str`` costs ~50 bytes before its text and a list slot or tuple around it; a run kept each row's id and
content hash that way (~230 bytes a row in the plan's pairs, ~40 more in each set or dict of them).
:class:`Strings` keeps strs end to end in one UTF-8 buffer (each one's length + 8 bytes), :class:`Pairs` a
dataset's (record id, content hash) pairs as two columns (a sha256 hex hash packed into its 32 bytes), and
:class:`Positions` finds a str's position in such a column through a table of 32-bit digests (8 bytes a
slot): the strs themselves are compared on a digest match, so a clash of digests is never taken for a match.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import overload

__all__ = ["Hashes", "Pairs", "Positions", "Strings"]

# Any str round-trips, a lone surrogate too (Records given in Python are not checked for them).
_CODEC = ("utf-8", "surrogatepass")


def _index(i: int, n: int) -> int:
    """A position as a list takes it (negative from the end), checked against ``n``."""
    j = i + n if i < 0 else i
    if not 0 <= j < n:
        raise IndexError(f"index {i} out of range for {n} strings")
    return j


class Strings:
    """strs appended in order, held as one UTF-8 buffer and each one's end."""

    __slots__ = ("_buf", "_ends")

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._buf = bytearray()
        self._ends = array("q")
        for value in values:
            self.append(value)

    def append(self, value: str) -> None:
        self._buf += value.encode(*_CODEC)
        self._ends.append(len(self._buf))

    def __len__(self) -> int:
        return len(self._ends)

    def __getitem__(self, i: int) -> str:
        j = _index(i, len(self._ends))
        start = self._ends[j - 1] if j else 0
        return self._buf[start : self._ends[j]].decode(*_CODEC)

    def __iter__(self) -> Iterator[str]:
        buf, start = self._buf, 0
        for end in self._ends:
            yield buf[start:end].decode(*_CODEC)
            start = end

    def joined(self, sep: str) -> str:
        """The strs joined by ``sep``, made from the buffer with no str per row (a million ids: one text, not a
        million strs and a list of them first)."""
        if not sep:
            return self._buf.decode(*_CODEC)
        gap, out, start = sep.encode(*_CODEC), bytearray(), 0
        for n, end in enumerate(self._ends):
            if n:
                out += gap
            out += self._buf[start:end]
            start = end
        return out.decode(*_CODEC)

    def contains(self, pattern: re.Pattern[bytes]) -> bool:
        """Whether ``pattern`` matches the strs' UTF-8 bytes, read end to end (one search over all of them)."""
        return pattern.search(self._buf) is not None


class Hashes:
    """Content hashes: packed into their 32 bytes while every one is a sha256 in lowercase hex (what
    greval.dataset.records.content_hash makes), as :class:`Strings` once one is not."""

    __slots__ = ("_packed", "_strings")

    def __init__(self) -> None:
        self._packed = bytearray()
        self._strings: Strings | None = None

    def append(self, value: str) -> None:
        if self._strings is None:
            try:
                raw = bytes.fromhex(value)
            except ValueError:
                raw = b""
            if len(raw) == 32 and raw.hex() == value:
                self._packed += raw
                return
            self._strings = Strings(iter(self))
            self._packed = bytearray()
        self._strings.append(value)

    def extend(self, values: Iterable[str]) -> None:
        for value in values:
            self.append(value)

    def packed(self) -> bytes | None:
        """Every hash's 32 bytes end to end (None: they are held as strs, one is not a sha256 in hex)."""
        return None if self._strings is not None else bytes(self._packed)

    def __len__(self) -> int:
        return len(self._packed) // 32 if self._strings is None else len(self._strings)

    def __getitem__(self, i: int) -> str:
        if self._strings is not None:
            return self._strings[i]
        j = _index(i, len(self))
        return self._packed[32 * j : 32 * j + 32].hex()

    def __iter__(self) -> Iterator[str]:
        if self._strings is not None:
            yield from self._strings
            return
        packed = self._packed
        for start in range(0, len(packed), 32):
            yield packed[start : start + 32].hex()


class Pairs(Sequence[tuple[str, str]]):
    """(record id, content hash) pairs in order, as a list of tuples reads them (~50 bytes a row for short
    ids, not ~230): a run's snapshot of a large dataset."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self.ids = Strings()
        self.hashes = Hashes()
        self.extend(pairs)

    def append(self, record_id: str, record_hash: str) -> None:
        self.ids.append(record_id)
        self.hashes.append(record_hash)

    def extend(self, pairs: Iterable[tuple[str, str]]) -> None:
        for record_id, record_hash in pairs:
            self.append(record_id, record_hash)

    def __len__(self) -> int:
        return len(self.ids)

    @overload
    def __getitem__(self, i: int) -> tuple[str, str]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, str]]: ...
    def __getitem__(self, i: int | slice) -> tuple[str, str] | list[tuple[str, str]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.ids[i], self.hashes[i]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return zip(self.ids, self.hashes, strict=True)

    def at(self, positions: Iterable[int]) -> Iterator[tuple[str, str]]:
        """The pairs at these positions (non-negative), in their order: a million read in sorted order take
        ~0.5 s this way, ~2 s indexed one by one."""
        buf, ends = self.ids._buf, self.ids._ends
        packed, strings = self.hashes._packed, self.hashes._strings
        for i in positions:
            start = ends[i - 1] if i else 0
            rid = buf[start : ends[i]].decode(*_CODEC)
            yield rid, (packed[32 * i : 32 * i + 32].hex() if strings is None else strings[i])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == tuple(b) for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list

    def __repr__(self) -> str:
        return f"Pairs({len(self)} pairs)"


class Positions:
    """str -> the position of its first occurrence in a column (``column(position)`` reads one back): an
    open-addressing table of (digest, position) — 32 bits of Python's str hash, 8 bytes a slot (positions
    below 2**32 - 1), at most 70 % full.
    A digest match is confirmed by reading the str at that position: two strs whose digests clash are two
    entries, never one."""

    __slots__ = ("_column", "_digests", "_slots", "_used")

    def __init__(self, column: Callable[[int], str], size: int = 1024) -> None:
        self._column = column
        self._used = 0
        self._digests = array("I", bytes(4 * size))
        self._slots = array("I", bytes(4 * size))  # position + 1; 0: empty

    def __len__(self) -> int:
        return self._used

    def setdefault(self, value: str, position: int) -> int | None:
        """The position ``value`` was first added at, or None after adding it at ``position`` (which must be
        where the column holds it once it is next read)."""
        digest, slots, digests = hash(value) & 0xFFFFFFFF, self._slots, self._digests
        mask = len(slots) - 1
        i = digest & mask
        while at := slots[i]:
            if digests[i] == digest and self._column(at - 1) == value:
                return at - 1
            i = (i + 1) & mask
        digests[i], slots[i] = digest, position + 1
        self._used += 1
        if 10 * self._used > 7 * len(slots):
            self._grow()
        return None

    def _grow(self) -> None:
        old = zip(self._digests, self._slots, strict=True)
        size = 2 * len(self._slots)
        digests, slots = array("I", bytes(4 * size)), array("I", bytes(4 * size))
        mask = size - 1
        for digest, at in old:
            if at:
                i = digest & mask
                while slots[i]:
                    i = (i + 1) & mask
                digests[i], slots[i] = digest, at
        self._digests, self._slots = digests, slots

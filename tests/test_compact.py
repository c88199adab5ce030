"""What a large run keeps per row (issue 35): ids and hashes held compactly (greval.dataset.compact), the
duplicate-id check of every dataset (map_rows) and the snapshot's key (members_key) read the same as before,
and hold a fraction of the memory."""

from __future__ import annotations

import hashlib
import random
import tracemalloc
from collections.abc import Sequence

import pytest

from greval.dataset.compact import Pairs, Positions, Strings
from greval.dataset.records import map_rows
from greval.errors import DataError
from greval.store import schema
from greval.store.schema import members_key


def _sha(i: object) -> str:
    return hashlib.sha256(str(i).encode()).hexdigest()


def _key_before(members: Sequence[tuple[str, str]]) -> str:
    """members_key as it was defined (every line built, sorted and joined at once): stored keys are these."""
    lines = sorted(f"{rid}\x1f{rhash}" for rid, rhash in members)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:24]


class _Clash(str):
    """A str whose digest clashes with every other one's."""

    def __hash__(self) -> int:
        return 7


def test_pairs_read_back_as_the_list_of_tuples_they_were() -> None:
    rng = random.Random(3)
    for _ in range(200):
        hashes = [_sha(rng.random()), "x", "ABCD" * 16, "", "é" * 3]
        pairs = [("".join(rng.choice("ab\x00é😀 \ud800") for _ in range(rng.randint(0, 4))), rng.choice(hashes))]
        pairs *= rng.randint(0, 3)
        pairs += [(f"r{k}", _sha(k)) for k in range(rng.randint(0, 5))]
        rng.shuffle(pairs)
        got = Pairs(pairs)
        assert list(got) == pairs and got == pairs and len(got) == len(pairs)
        assert [got[i] for i in range(-len(pairs), len(pairs))] == pairs + pairs
        assert list(got.at(range(len(pairs))[::-1])) == pairs[::-1]
    with pytest.raises(IndexError):
        Pairs([("a", "b")])[1]


def test_positions_never_take_a_digest_clash_for_a_match() -> None:
    """Every str here has the same digest: each is still found at its own position, a new one is new."""
    column = Strings()
    at = Positions(column.__getitem__, size=2)
    for n, value in enumerate(["a", "b", "c", "d", "e"]):
        assert at.setdefault(_Clash(value), n) is None
        column.append(value)
    assert [at.setdefault(_Clash(v), 99) for v in "edcba"] == [4, 3, 2, 1, 0] and len(at) == 5
    assert at.setdefault(_Clash("f"), 5) is None and len(at) == 6


def test_map_rows_reads_repeats_once_and_refuses_an_id_with_two_contents() -> None:
    rows = [{"id": f"r{i % 500}", "answer": f"a{i % 500}"} for i in range(1500)]
    notes: list[str] = []
    got = list(map_rows(rows, "d.jsonl", notes=notes))
    assert [r.id for r in got] == [f"r{i}" for i in range(500)]
    assert notes and "1000 row(s) repeat an earlier row exactly" in notes[0]
    with pytest.raises(DataError, match=r"d\.jsonl: two different records have the id 'r7'"):
        list(map_rows([*rows, {"id": "r7", "answer": "another"}], "d.jsonl"))


@pytest.mark.parametrize("by_id", [True, False], ids=["ids-sorted", "lines-sorted"])
def test_a_snapshot_key_is_the_one_it_was(monkeypatch: pytest.MonkeyPatch, by_id: bool) -> None:
    """Keys of stored snapshots do not change: equal however the members are held and sorted — ids with a
    character below the separator, equal ids, hashes not in hex, a lone surrogate (an error, as before)."""
    monkeypatch.setattr(schema, "_SORT_COMPACT", 0 if by_id else 10**9)
    rng = random.Random(5)
    alphabet = ["a", "b", "\x1f", "\x00", "\x1e", " ", "~", "é", "😀", "-", "\x7f"]
    for _ in range(1500):
        chars = alphabet[: rng.randint(1, len(alphabet))]
        pairs = [
            ("".join(rng.choice(chars) for _ in range(rng.randint(0, 4))), rng.choice([_sha(rng.random()), "x", ""]))
            for _ in range(rng.randint(0, 30))
        ]
        assert members_key(Pairs(pairs)) == members_key(pairs) == _key_before(pairs), pairs
    with pytest.raises(UnicodeEncodeError):
        members_key(Pairs([("\ud800", _sha(1)), ("b", _sha(2))]))


def _peak_per_row(work: object, n: int) -> float:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        assert callable(work)
        work()
        return (tracemalloc.get_traced_memory()[1] - before) / n
    finally:
        tracemalloc.stop()


def test_the_snapshot_and_its_key_hold_a_fraction_of_the_lines() -> None:
    """200,000 rows: their pairs ~50 bytes a row (a list of tuples of strs: ~230), the duplicate-id check of
    map_rows ~100 (a dict of strs: ~210), the key's peak ~30 (every line at once: ~280)."""
    import numpy  # noqa: F401  (imported before measuring: its import is not the key's)

    n = 200_000
    order = random.Random(1).sample(range(n), n)
    hashes = [_sha(i) for i in order]  # held by the caller, as a data file's rows are not: not counted
    pairs = Pairs()
    assert _peak_per_row(lambda: pairs.extend((f"m-{i}", h) for i, h in zip(order, hashes, strict=True)), n) < 70
    rows = ({"id": f"m-{i}", "answer": "a"} for i in order)
    assert _peak_per_row(lambda: sum(1 for _ in map_rows(rows, "d.jsonl")), n) < 130
    key = ""

    def keyed() -> None:
        nonlocal key
        key = members_key(pairs)

    assert _peak_per_row(keyed, n) < 60
    assert key == _key_before(pairs)


def test_a_row_cache_entry_is_made_from_the_pairs_own_columns() -> None:
    """rowcache.pack reads the ids joined and the hashes packed straight from a Pairs: the same text and bytes
    as joining the strs, at ~10 bytes a row of 200,000 at the peak (the entry itself), where joining them made
    every id and hash a str first (~195 on this test)."""
    from array import array

    from greval.dataset import rowcache

    n = 200_000
    pairs = Pairs((f"m-{i}é", _sha(i)) for i in range(n))
    offsets = array("q", range(n))
    entry: list[rowcache.Entry | None] = []
    assert _peak_per_row(lambda: entry.append(rowcache.pack(pairs, offsets, "d.jsonl", [])), n) < 60
    made = entry[0]
    assert made is not None
    assert made.ids == "\n".join(f"m-{i}é" for i in range(n))
    assert made.hashes == b"".join(bytes.fromhex(_sha(i)) for i in range(n))
    assert list(made.pairs())[:3] == list(pairs)[:3] and Strings(["a", "", "b"]).joined("\n") == "a\n\nb"
    odd = Pairs([("a", "not-a-sha256")])
    assert odd.hashes.packed() is None and rowcache.pack(odd, array("q", [0]), "d.jsonl", []) is None
    assert rowcache.pack(Pairs([("a\nb", _sha(1))]), array("q", [0]), "d.jsonl", []) is None  # a line break in an id

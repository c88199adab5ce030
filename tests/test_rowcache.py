"""The row cache (greval.dataset.rowcache): a plain JSON Lines file read before and unchanged since is planned
from the (id, content hash) and byte offset of each row, and the plan is the one a full read makes (the same
ids, hashes, pending work, notes); a changed byte, size, time, mapping or hashing scheme makes it read the file
again; a corrupt entry is ignored with a note; entries are the user's alone (0600 in a 0700 folder); a row read
again at its offset that is not the one cached is an error, never another row's verdict."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

import greval.dataset.records as records
import greval.runner.plan as planning
from greval.dataset import rowcache
from greval.dataset.records import DataFile, map_rows
from greval.dataset.rowcache import HASH_SCHEME, RowCache
from greval.errors import DataError
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.test_run import FAST, cfg

#: Rows that take every path of normalising and hashing: ids given, numeric, whole-number floats, absent; chunks
#: as strings, objects (content / page_content, metadata), JSON text; triples as lists and objects; a
#: conversation with tool calls and content parts; blank, missing and nested fields; text beyond ASCII; trajectories
#: (messages with a tool call whose arguments are not JSON, a reference of bare calls, a plain-text log).
SAMPLE: list[dict[str, Any]] = [
    {"id": "a1", "question": "What?", "answer": "This.", "chunks": ["one", "two"], "blank": "  ", "none": None},
    {"id": 7, "question": "Q", "chunks": [{"id": "x", "text": "t", "source": "s"}, {"content": "c"}]},
    {"id": 8.0, "question": "Q8", "chunks": '[{"page_content": "p", "chunk_id": 3}]', "score": 0.5},
    {"question": "no id", "triples": [["s", "p", "o"], {"head": "h", "relation": "r", "tail": "t", "id": "k"}]},
    {
        "id": "c1",
        "conversation": [
            {"role": "human", "content": "hi"},
            {"from": "gpt", "value": [{"type": "text", "text": "hello"}, {"type": "image", "url": "u"}]},
            {"role": "ai", "content": "", "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "content": "42", "tool_call_id": "t", "name": "f", "extra": 1},
        ],
    },
    {"id": "ü-2", "question": "Grüße, 東京?", "answer": "ok", "meta": {"nested": [1, 2.5, True, None]}, "n": 10**20},
    {
        "id": "t1",
        "trajectory": [
            {"role": "user", "content": "Book it."},
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "b", "arguments": "{"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "done"},
            {"role": "assistant", "content": "Booked."},
        ],
        "expected_trajectory": [{"name": "b", "arguments": {"x": 1}}],
    },
    {"id": "t2", "trajectory": "a plain-text log, kept as text"},
]

#: The sha256 of the SAMPLE's (id, content hash) pairs under each hashing scheme. Never edit an entry: when a
#: change to normalising or hashing changes this digest, bump HASH_SCHEME and add the new scheme's digest.
SCHEME_DIGESTS = {1: "0f5252657e27db96b26ecd72fd89e76472e6ed5872d84a1a9c0ca66590044603"}


def _sample_digest() -> str:
    pairs = [(r.id, r.hash) for r in map_rows(SAMPLE, "sample", mapping={"expected_answer": "answer"})]
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


def test_the_hash_scheme_changes_with_what_a_row_hash_is_made_of() -> None:
    """A change to normalising or hashing rows that keeps HASH_SCHEME would let cached hashes outlive it."""
    got = _sample_digest()
    assert SCHEME_DIGESTS.get(HASH_SCHEME) == got, (
        f"the rows' hashes are now {got}: if normalising or hashing changed, bump rowcache.HASH_SCHEME and add "
        "its digest to SCHEME_DIGESTS (cached hashes of the old scheme must not be used)"
    )


# ------------------------------------------------------------------------------------------------ the plan
def _write(path: Path, n: int = 40, *, twins: int = 3, repeats: int = 2) -> None:
    """``n`` rows answer_alignment and chunk_evaluation can judge; then ``twins`` rows repeating the content of the
    first ones under other ids, and ``repeats`` exact repeats of earlier rows (read once, with a note)."""
    rows = [
        {
            "id": f"r{i}",
            "question": f"Question {i}?",
            "answer": f"Answer {i}.",
            "expected_answer": f"Gold {i}.",
            "chunks": [f"Chunk {i}a.", f"Chunk {i}b."],
        }
        for i in range(n)
    ]
    rows += [{**rows[k], "id": f"twin{k}"} for k in range(twins)] + rows[5 : 5 + repeats]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


class Hashed:
    """How many rows were hashed (each row read, parsed and hashed: what the cache spares) and how many times a
    file was read through (from its first row)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = self.reads = 0
        hash_row, iter_rows, iter_rows_at = records.hash_row, records.iter_rows, records.iter_rows_at

        def hashed(*args: Any, **kwargs: Any) -> Any:
            self.rows += 1
            return hash_row(*args, **kwargs)

        def read(real: Any) -> Any:
            def reading(*args: Any, **kwargs: Any) -> Any:
                self.reads += 1
                return real(*args, **kwargs)

            return reading

        monkeypatch.setattr(records, "hash_row", hashed)
        monkeypatch.setattr(records, "iter_rows", read(iter_rows))
        monkeypatch.setattr(records, "iter_rows_at", read(iter_rows_at))

    def reset(self) -> tuple[int, int]:
        """(rows hashed, files read through) since the last reset."""
        got = self.rows, self.reads
        self.rows = self.reads = 0
        return got


def _plan(specs: Any, data: DataFile, st: Store, judge: JudgeConfig) -> dict[str, Any]:
    """Everything a plan says, as plain values."""
    p = planning.plan_work(specs, data, st, judge)
    rows = lambda held: [(r.id, r.hash, json.dumps(r.data, sort_keys=True)) for r in held]  # noqa: E731
    return {
        "members": list(p.members),
        "pending": p.pending,
        "work": (p.judgements, p.computed, p.skipped, p.records, p.distinct_contents),
        "unique": rows(p.unique),
        "unstored": rows(p.unstored),
        "notes": list(data.notes),
    }


@pytest.fixture()
def cache(tmp_path: Path) -> RowCache:
    return RowCache(tmp_path / "cache", min_bytes=0)


@pytest.mark.parametrize("metrics", [["answer_alignment"], ["answer_alignment", "chunk_evaluation"]])
def test_an_unchanged_file_is_planned_from_the_cache_as_a_full_read_plans_it(
    metrics: list[str], llm: OpenAIServer, tmp_path: Path, cache: RowCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the records judged: the plan from the cache has the same ids, hashes, pending work, Records and notes
    as a full read's; it reads only the rows with work left or unknown to the store (a record metric's), and a
    no-op re-run reads none. The run from it judges what the full read's would."""
    data = tmp_path / "d.jsonl"
    _write(data)
    specs = resolve_specs(metrics)
    hashed = Hashed(monkeypatch)
    with Store(tmp_path / "s.sqlite") as st:
        run(specs, DataFile(data, limit=20, cache=None), st, cfg(llm), options=FAST)
        hashed.reset()
        full = _plan(specs, DataFile(data, cache=None), st, cfg(llm))
        assert hashed.reset() == (45, 1)  # every row of the file, the two repeats too
        assert _plan(specs, DataFile(data, cache=cache), st, cfg(llm)) == full  # reads in full, writes the entry
        assert hashed.reset() == (45, 1) and len(list(cache.folder().iterdir())) == 1
        assert _plan(specs, DataFile(data, cache=cache), st, cfg(llm)) == full
        assert any("repeat an earlier row" in n for n in full["notes"])
        rows, reads = hashed.reset()
        assert reads == 0  # from the entry
        if metrics == ["answer_alignment"]:
            assert rows == 23  # r20-r39 (work left, not stored) and the 3 twins (ids not stored): at their offsets
        first = run(specs, DataFile(data, cache=cache), st, cfg(llm), options=FAST)
        assert first.calls == 20 * len(metrics) and first.records == 43
        hashed.reset()
        again = run(specs, DataFile(data, cache=cache), st, cfg(llm), options=FAST)
        assert again.calls == 0 and again.records == 43
        if metrics == ["answer_alignment"]:
            assert hashed.reset() == (0, 0)  # a no-op re-run reads no row
        spent = {"judged", "reused", "calls", "tokens_in", "tokens_out", "tokens_cached"}  # this run's, not figures
        figures = lambda s: [{k: v for k, v in m.model_dump().items() if k not in spent} for m in s.metrics]  # noqa: E731
        assert figures(again) == figures(first)


def _edit_byte(path: Path) -> None:
    """One character changed, the size and modification time kept (as ``cp -p`` or ``tar`` may leave a file)."""
    st = path.stat()
    path.write_text(path.read_text().replace("Answer 17.", "Answer X7.", 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _append(path: Path) -> None:
    with path.open("a") as f:
        f.write(json.dumps({"id": "new", "question": "New?", "answer": "A.", "expected_answer": "G."}) + "\n")


def _touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


CHANGES = {"byte": _edit_byte, "size": _append, "mtime": _touch}


@pytest.mark.parametrize("change", [*CHANGES, "mapping", "scheme"])
def test_a_change_to_the_file_or_the_reading_reads_the_file_again(
    change: str, tmp_path: Path, cache: RowCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed byte (size and time kept), size or modification time, another mapping or another hashing scheme:
    the entry is not used (every row hashed again) and the plan is a full read's of the file as it is now."""
    data = tmp_path / "d.jsonl"
    _write(data)
    specs = resolve_specs(["answer_alignment"])
    judge = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")  # no call is made
    mapping = {"gold": "expected_answer"} if change == "mapping" else None
    hashed = Hashed(monkeypatch)
    with Store(tmp_path / "s.sqlite") as st:
        old = _plan(specs, DataFile(data, cache=cache), st, judge)
        assert _plan(specs, DataFile(data, cache=cache), st, judge) == old
        assert hashed.reset() == (45 + 43, 1)  # read in full once, then each row (all with work) at its offset
        if change in CHANGES:
            CHANGES[change](data)
        if change == "scheme":
            monkeypatch.setattr(rowcache, "HASH_SCHEME", HASH_SCHEME + 1)
        full = _plan(specs, DataFile(data, mapping, cache=None), st, judge)
        hashed.reset()
        assert _plan(specs, DataFile(data, mapping, cache=cache), st, judge) == full
        assert hashed.reset()[1] == 1  # read in full, not from the entry
    if change == "byte":
        assert full != old and ("r17", old["members"][17][1]) not in full["members"]


@pytest.mark.parametrize("damage", ["flipped", "truncated", "empty", "foreign"])
def test_a_corrupt_entry_is_ignored_with_a_note_and_written_again(
    damage: str, tmp_path: Path, cache: RowCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d.jsonl"
    _write(data)
    specs = resolve_specs(["answer_alignment"])
    judge = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    hashed = Hashed(monkeypatch)
    with Store(tmp_path / "s.sqlite") as st:
        full = _plan(specs, DataFile(data, cache=None), st, judge)
        _plan(specs, DataFile(data, cache=cache), st, judge)
        [entry] = cache.folder().iterdir()
        raw = bytearray(entry.read_bytes())
        if damage == "flipped":  # a byte of its hashes: the entry would give a row another hash
            raw[len(raw) // 2] ^= 0x01
        elif damage == "truncated":
            del raw[len(raw) // 2 :]
        elif damage == "empty":
            raw = bytearray()
        else:
            raw = bytearray(b"greval row cache\n" + b"\x00" * 200)
        entry.write_bytes(bytes(raw))
        hashed.reset()
        read = DataFile(data, cache=cache)
        got = _plan(specs, read, st, judge)
        assert hashed.reset()[1] == 1  # the file read in full
        [note] = [n for n in got["notes"] if "cache" in n]
        assert note.startswith(f"{data}: the cache of its rows' hashes ({entry}) is unreadable (") and "ignored" in note
        assert {**got, "notes": full["notes"]} == full
        assert _plan(specs, DataFile(data, cache=cache), st, judge) == full  # written again: whole, no note
        assert hashed.reset()[1] == 0


def test_entries_are_the_users_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """0600 in a 0700 folder, whatever the umask; in greval's data directory by default (GREVAL_HOME)."""
    monkeypatch.setenv("GREVAL_HOME", str(tmp_path / "home"))
    data = tmp_path / "d.jsonl"
    _write(data)
    old = os.umask(0o022)
    try:
        list(DataFile(data, cache=RowCache(min_bytes=0)))
    finally:
        os.umask(old)
    folder = tmp_path / "home" / "rowcache"
    [entry] = folder.iterdir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(entry.stat().st_mode) == 0o600


def test_the_cache_is_bounded_by_entries_and_bytes(tmp_path: Path) -> None:
    """The least recently used entries go first (a read from an entry counts as a use); the entry just written
    stays even when it alone is over the byte bound."""
    files = []
    for i in range(4):
        files.append(tmp_path / f"d{i}.jsonl")
        _write(files[-1], 20 + i)
    cache = RowCache(tmp_path / "cache", min_bytes=0, max_entries=2)

    def entry(f: Path, c: RowCache = cache) -> Path:
        key = DataFile(f, cache=c)._key()
        assert key is not None
        return c.entry_path(key)

    for f in files[:2]:
        list(DataFile(f, cache=cache))
    os.utime(entry(files[0]), ns=(1, 1))
    os.utime(entry(files[1]), ns=(2, 2))
    list(DataFile(files[0], cache=cache))  # from its entry: now the most recently used
    list(DataFile(files[2], cache=cache))  # a third entry: the least recently used (files[1]'s) goes
    assert sorted(cache.folder().iterdir()) == sorted([entry(files[0]), entry(files[2])])
    one = entry(files[2]).stat().st_size
    small = RowCache(tmp_path / "cache", min_bytes=0, max_bytes=one + 10)
    list(DataFile(files[3], cache=small))  # with the others over the bound: only it stays
    assert list(small.folder().iterdir()) == [entry(files[3], small)]
    tiny = RowCache(tmp_path / "cache", min_bytes=0, max_bytes=1)
    list(DataFile(files[0], cache=tiny))
    assert list(tiny.folder().iterdir()) == [entry(files[0], tiny)]
    assert len(list(DataFile(files[0], cache=tiny))) == 23  # from it


def test_an_entry_that_cannot_be_written_is_a_note(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    _write(data)
    (tmp_path / "cache").write_text("a file where the folder would be")
    read = DataFile(data, cache=RowCache(tmp_path / "cache", min_bytes=0))
    assert len(list(read)) == 43
    [note] = [n for n in read.notes if "could not be kept" in n]
    assert note.startswith(f"{data.resolve()}: its rows' hashes could not be kept for the next run")


def test_small_files_and_other_formats_are_not_cached(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    _write(data)
    small = RowCache(tmp_path / "c1", min_bytes=data.stat().st_size + 1)
    list(DataFile(data, cache=small))
    gz = tmp_path / "d.jsonl.gz"
    import gzip

    gz.write_bytes(gzip.compress(data.read_bytes()))
    zipped = RowCache(tmp_path / "c2", min_bytes=0)
    list(DataFile(gz, cache=zipped))
    assert not small.folder().exists() and not zipped.folder().exists()


# ------------------------------------------------------------------------------------------------ changed under the run
def test_a_file_changed_after_a_plan_from_the_cache_is_an_error(
    llm: OpenAIServer, tmp_path: Path, cache: RowCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planned from the entry (its rows by position past PLAN_HOLD), then a row edited: reading it again at its
    offset is refused (one line naming the file), never judged in another row's place; a row's data read after
    the file changed is refused too."""
    data = tmp_path / "d.jsonl"
    _write(data, 12, twins=0, repeats=0)
    specs = resolve_specs(["answer_alignment"])
    list(DataFile(data, cache=cache))  # the entry
    monkeypatch.setattr(planning, "PLAN_HOLD", 3)
    with Store(tmp_path / "s.sqlite") as st:
        plan = planning.plan_work(specs, DataFile(data, cache=cache), st, cfg(llm))
        assert plan.unique._held == [] and len(plan.unique) == 12
        lines = data.read_text().splitlines()
        edited = {**json.loads(lines[7]), "answer": "Something else."}
        data.write_text("\n".join([*lines[:7], json.dumps(edited), *lines[8:]]) + "\n")
        with pytest.raises(DataError, match=r"d\.jsonl: (record 'r7' changed|the file changed) while the run read"):
            run(specs, DataFile(data, cache=cache), st, cfg(llm), options=FAST, plan=plan)
        assert llm.stats()["total"] < 12
    data.write_text("\n".join(lines) + "\n")
    list(DataFile(data, cache=cache))  # read in full (its time changed), the entry written again
    rows = list(DataFile(data, cache=cache))  # from the entry: each row's data read when asked
    data.write_text("\n".join(lines[::-1]) + "\n")
    with pytest.raises(DataError, match=r"d\.jsonl: the file changed while the run read it"):
        _ = rows[3].data

"""The messages the judge was sent, for the explorer's record pages to load on demand: rebuilt by greval's own
prompt code (:class:`greval.judge.judge.Prompt`, what the judge itself sends) from the stored spec version, the
stored record and each stored call's method and items. Nothing is rendered in JavaScript.

Layout under ``explorer/data/`` (read only when a record page asks for its prompt): ``p{metric}.js`` — the static
part of the metric version's prompt (system message and few-shot turns), once per structured-output method its
calls used; ``q{metric}-{chunk}.js`` — each record's own message per distinct call (method, the items it asked
about, how many calls sent it), records chunked as the record files are. A metric whose prompts cannot be rebuilt
exactly writes neither: meta.js says why in one line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast, get_args

from greval.judge.judge import Prompt
from greval.paths import write_private
from greval.report.explorer.js import js_call
from greval.spec import Spec
from greval.types import Method

#: A judgement's calls as the store lists them: (method, item ids asked about, times sent) per call.
Calls = Sequence[tuple[str, Sequence[str], int]]
_METHODS = set(get_args(Method))


def record_calls(prompt: Any, data: Mapping[str, Any] | None, calls: Calls) -> list[list[Any]] | str:
    """A record's distinct calls as [method, item ids, the record's message, how many times it was sent: calls
    and their retries], or why
    they cannot be shown. ``prompt``: the metric's :class:`~greval.judge.judge.Prompt`."""
    if data is None:
        return "The record's fields are not in the store: its prompt cannot be rebuilt."
    sent: dict[tuple[str, tuple[str, ...]], int] = {}
    for method, items, attempts in calls:
        if method not in _METHODS:
            return f"A call was sent with a method greval does not know ({method!r}): its prompt is not rebuilt."
        key = (method, tuple(items))
        sent[key] = sent.get(key, 0) + attempts
    each = prompt.spec.each is not None
    return [
        [method, list(items), prompt.record_message(data, None, list(items) if each else None)["content"], n]
        for (method, items), n in sent.items()
    ]


def write_prompts(
    out: Path,
    index: int,
    spec: Spec,
    records: Sequence[tuple[int, str]],
    data: Mapping[str, Mapping[str, Any]],
    calls: Mapping[str, Calls],
    per_chunk: int,
) -> int:
    """Write metric ``index``'s prompt files (``records``: each record row's number and content hash). Returns
    the files written."""

    prompt = Prompt(spec)
    chunks: dict[int, dict[int, Any]] = {}
    methods: set[str] = set()
    for number, rhash in records:
        mine = calls.get(rhash, [])
        shown = record_calls(prompt, data.get(rhash), mine)
        if not isinstance(shown, str):
            methods.update(c[0] for c in shown)
        chunks.setdefault(number // per_chunk, {})[number] = shown
    static = {m: prompt.static(cast(Method, m)) for m in sorted(methods)}  # each checked against _METHODS
    write_private(out / f"p{index}.js", js_call("GREVAL.prompt", index, static))
    for k, part in chunks.items():
        write_private(out / f"q{index}-{k}.js", js_call("GREVAL.prompts", index, k, part))
    return 1 + len(chunks)

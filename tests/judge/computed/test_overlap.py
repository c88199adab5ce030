"""ROUGE and BLEU (greval.judge.computed.overlap) against the reference libraries on fixed texts."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.judge.computed.conftest import PRED, REF, REF2, computed_judge, computed_score, spec


def test_rouge_equals_rouge_score() -> None:
    from rouge_score import rouge_scorer  # type: ignore[import-untyped]

    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    for stem in (False, True):
        s = spec("rouge", {"types": types, "use_stemmer": stem})
        res = computed_judge(s, {"answer": PRED, "expected_answer": REF})
        want = rouge_scorer.RougeScorer(types, use_stemmer=stem).score(REF, PRED)
        assert computed_score(res) == pytest.approx(want["rouge1"].fmeasure, abs=1e-12)
        for t in types:
            assert res.outputs[t] == pytest.approx(want[t].fmeasure, abs=1e-12)
            assert res.outputs[f"{t}_precision"] == pytest.approx(want[t].precision, abs=1e-12)
            assert res.outputs[f"{t}_recall"] == pytest.approx(want[t].recall, abs=1e-12)
    stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(REF, PRED)["rougeL"].fmeasure
    plain = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False).score(REF, PRED)["rougeL"].fmeasure
    assert stemmed > plain  # the parameter reaches the library


def test_rouge_multiple_references_is_max_per_type() -> None:
    from rouge_score import rouge_scorer

    types = ["rouge1", "rouge2", "rougeL"]
    s = spec("rouge", {"types": types, "main": "rougeL", "use_stemmer": True})
    res = computed_judge(s, {"answer": PRED, "expected_answer": [REF, REF2]})
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=True)
    per_ref = [scorer.score(r, PRED) for r in (REF, REF2)]
    for t in types:
        assert res.outputs[t] == pytest.approx(max(x[t].fmeasure for x in per_ref), abs=1e-12)
    assert computed_score(res) == res.outputs["rougeL"]
    assert "best of 2 references" in (res.verdicts[0].reason or "")


def test_bleu_equals_nltk_sentence_bleu() -> None:
    from nltk.tokenize import RegexpTokenizer  # type: ignore[import-untyped]
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu  # type: ignore[import-untyped]

    tok = RegexpTokenizer(r"\w+|\$[\d]+|[^\s\.]+")
    hyp, refs = tok.tokenize(PRED), [tok.tokenize(REF), tok.tokenize(REF2)]
    cases: list[tuple[dict[str, Any], Any, tuple[float, ...]]] = [
        ({}, None, (0.25, 0.25, 0.25, 0.25)),
        ({"weights": [0.5, 0.5]}, None, (0.5, 0.5)),
        ({"weights": [1.0]}, None, (1.0,)),
        ({"smoothing": "method1"}, SmoothingFunction().method1, (0.25, 0.25, 0.25, 0.25)),
    ]
    for params, smooth, weights in cases:
        res = computed_judge(spec("bleu", params), {"answer": PRED, "expected_answer": [REF, REF2]})
        want = sentence_bleu(refs, hyp, weights=weights, smoothing_function=smooth)
        assert computed_score(res) == pytest.approx(float(want), abs=1e-12), params
        assert res.outputs["prediction_tokens"] == len(hyp)
    # Unsmoothed BLEU-4 with no shared 4-gram is 0, and the reason says why.
    # nltk itself returns ~1e-155 there (the smallest float stands in for the zero precision): greval says 0.
    res = computed_judge(spec("bleu"), {"answer": "brown fox river", "expected_answer": REF})
    assert computed_score(res) == 0.0 and res.outputs["bleu"] == 0.0
    assert "no smoothing" in (res.verdicts[0].reason or "")
    res = computed_judge(
        spec("bleu"), {"answer": "the quick brown fox leaps", "expected_answer": "the quick brown dog"}
    )
    assert (
        0 < float(sentence_bleu([["the", "quick", "brown", "dog"]], ["the", "quick", "brown", "fox", "leaps"])) < 1e-50
    )
    assert computed_score(res) == 0.0


def test_documented_worked_examples_of_rouge_and_bleu() -> None:
    """docs/computed.md: "the cat sat on the mat" against "the cat lay on the mat", by hand."""
    data = {"answer": "the cat sat on the mat", "expected_answer": "the cat lay on the mat"}
    r = computed_judge(spec("rouge"), data)
    # unigrams: the x2, cat, on, mat shared = 5 of 6 each side; bigrams: "the cat", "on the", "the mat" = 3 of 5;
    # longest common subsequence "the cat on the mat" = 5 of 6.
    assert r.outputs["rouge1"] == pytest.approx(5 / 6) and r.outputs["rouge2"] == pytest.approx(3 / 5)
    assert r.outputs["rougeL"] == pytest.approx(5 / 6) and r.outputs["units"] == 1
    b2 = computed_judge(spec("bleu", {"weights": [0.5, 0.5]}), data)
    assert computed_score(b2) == pytest.approx(math.sqrt(5 / 6 * 3 / 5))  # brevity penalty 1 (same length)
    b4 = computed_judge(spec("bleu"), data)
    assert computed_score(b4) == 0.0 and b4.outputs["units"] == 1  # no shared 4-gram, no smoothing


#: A fresh process scoring ROUGE-L, BLEU and a citation metric on greval's worker threads (ComputedEvaluator, as a
#: run's workers do), in the order that broke runs (issue 40): ROUGE's first record is importing nltk (through
#: rouge-score) when BLEU's first records start (nltk.tokenize). Prints each verdict's status, score and reason.
_TOGETHER = """
import asyncio, json, sys
import greval
from greval.judge.computed import ComputedEvaluator

specs = {s.name: s for s in greval.resolve_specs(["rouge_l", "bleu", "citation_coverage"])}
record = {"question": "q?", "expected_answer": "Fact is true.", "answer": "Fact is true [1].", "chunks": ["Fact."]}


async def main():
    judges = {name: ComputedEvaluator(spec) for name, spec in specs.items()}
    first = asyncio.ensure_future(judges["rouge_l"].ajudge(record))
    while "nltk" not in sys.modules and not first.done():
        await asyncio.sleep(0.0005)
    rest = [judges[n].ajudge(record) for n in ("bleu", "citation_coverage", "bleu", "rouge_l")]
    out = await asyncio.gather(first, *rest, return_exceptions=True)
    print(json.dumps([
        repr(r) if isinstance(r, BaseException) else [r.ok, r.verdicts[0].score, r.verdicts[0].reason] for r in out
    ]))


asyncio.run(main())
"""


@pytest.mark.slow
def test_rouge_and_bleu_scored_together_in_fresh_processes_never_crash_on_nltks_import() -> None:
    """Six fresh processes (two at a time: ~3 s each here): every verdict scored, the same in each. Before the
    one-at-a-time import (greval.judge.computed.common.library) nearly every process lost ROUGE's or BLEU's
    verdicts to nltk's "partially initialized module" ImportError, which failed the whole run (six catch that
    with near certainty; twenty cost the suite minutes under load)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}

    def fresh(_: int) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-c", _TOGETHER]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(fresh, range(6)))
    outputs = []
    for done in runs:
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout.splitlines()[-1]))
    crashed = [o for o in outputs if any(isinstance(r, str) for r in o)]
    assert not crashed, f"{len(crashed)} of {len(runs)} processes crashed, e.g. {crashed[0]}"
    assert all(o == outputs[0] for o in outputs)
    assert all(ok for ok, _, _ in outputs[0])


def test_a_library_that_cannot_be_imported_is_each_records_error_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broken install (simulated: the module entry set to None makes Python's own import raise ImportError,
    as a missing package does) is an error verdict naming the package, not a crashed run."""
    import nltk.tokenize  # type: ignore[import-untyped]  # noqa: F401  # nltk whole: only BLEU's module is missing

    from greval.judge.computed import common

    monkeypatch.setattr(common, "_IMPORTED", {}, raising=False)  # what this process imported before: forgotten
    monkeypatch.setitem(sys.modules, "nltk.translate.bleu_score", None)
    res = computed_judge(spec("bleu"), {"answer": PRED, "expected_answer": REF})
    assert not res.ok
    error = res.verdicts[0].error or ""
    assert res.verdicts[0].error_kind == "unknown"
    assert error.startswith("importing nltk.translate.bleu_score (nltk, a dependency of greval) failed: ")
    assert error.endswith("; reinstall nltk with pip")

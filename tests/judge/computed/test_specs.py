"""Computed specs (greval.spec.computed): parsing, defaults, one-line errors, shipped examples, old names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import greval
import greval.judge.outcome
import greval.runner.judging
from greval.errors import SpecError
from greval.llm.config import JudgeConfig
from greval.spec import load_spec_file, parse_spec, spec_json_schema
from greval.spec.computed import ComputedSpec, EmbeddingSpec, RougeSpec
from tests.judge.computed.conftest import SPAN_CHUNKS, SPAN_CLAIMS, computed_judge, spec, write


def test_yaml_from_the_brief_parses_and_is_keyed_by_library_not_judge(tmp_path: Path) -> None:
    f = write(
        tmp_path,
        "name: rouge_l\nkind: computed\ndescription: ROUGE-L F-measure of the answer against the expected answer.\n"
        "metric: rouge\nparams: {types: [rougeL], use_stemmer: true}\n",
    )
    (s,) = load_spec_file(f)
    assert isinstance(s, RougeSpec)
    assert s.needs_model is False
    assert s.params.types == ["rougeL"] and s.params.use_stemmer
    assert s.required_inputs() == ["answer", "expected_answer"]
    assert s.computed_identity().startswith("greval-computed/rouge@rouge-score==")
    cfg = greval.judge.outcome.config_for(s, JudgeConfig.parse("openai:gpt-4o-mini"))
    assert cfg == greval.judge.outcome.config_for(s, JudgeConfig.parse("openai:other"))
    # Round trip through the store's JSON form gives the same spec and hash.
    again = parse_spec(yaml.safe_load(s.model_dump_json()))
    assert type(again) is RougeSpec and again.hash == s.hash


def test_defaults_for_every_metric() -> None:
    assert spec("rouge").params.types == ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    assert spec("bleu").params.weights == [0.25] * 4
    assert isinstance(spec("embedding_similarity"), EmbeddingSpec)
    assert spec("citations").required_inputs() == ["answer"]
    assert spec("citations", {"items": "claims"}).required_inputs() == ["claims"]
    assert spec("orphan_claims").required_inputs() == ["claims"]


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("metric: rouge\nparams: {types: [rougeX]}", "params.types[0]", "'rouge1', 'rouge2', 'rougeL' or"),
        ("metric: rouge\nparams: {use_stemer: true}", "params.use_stemer", "did you mean 'use_stemmer'"),
        ("metric: rouge\nparams: {types: [rouge1], main: rougeL}", "params.main", "not among types"),
        ("metric: rouge\nparams: {use_stemmer: maybe}", "params.use_stemmer", "valid boolean"),
        ("metric: rogue", "metric", "'rouge', 'bleu'"),
        ("metric: rouge\nparms: {}", "parms", "did you mean 'params'"),
        ("metric: bleu\nparams: {weights: [0.5, -1]}", "params.weights[1]", "greater than or equal to 0"),
        ("metric: bleu\nparams: {weights: [0, 0]}", "params.weights", "must not all be zero"),
        ("metric: bleu\nparams: {smoothing: method9}", "params.smoothing", "'method1'"),
        ("metric: bleu\nparams: {tokenizer: '(('}", "params.tokenizer", "not a regular expression"),
        ("metric: citations\nparams: {field: 'an swer'}", "params.field", "identifier"),
        ("metric: citations\nparams: {score: precision}", "params.score", "'validity', 'coverage', 'evidence_co"),
        ("metric: triple_validity", "params", "required field is missing"),
        ("metric: triple_validity\nparams: {table: nope.csv}", "params.table", "no such file"),
        (
            "metric: orphan_claims\nparams: {source_keys: [], inline_citations: false}",
            "params.source_keys",
            "no claim could cite anything",
        ),
    ],
)
def test_bad_params_are_one_line_errors_with_field_paths(tmp_path: Path, body: str, where: str, message: str) -> None:
    f = write(tmp_path, f"name: x\nkind: computed\ndescription: d\n{body}\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    err = info.value
    assert err.path == where, str(err)
    assert message in err.message, str(err)
    assert "\n" not in str(err)


def test_shipped_examples_load() -> None:
    root = Path(__file__).resolve().parents[3] / "metric_specs"
    names = {s.name: s for f in root.glob("computed_*.yaml") for s in load_spec_file(f)}
    assert {"rouge_l", "bleu", "answer_similarity", "citation_validity", "citation_coverage", "orphan_claims"} <= set(
        names
    )
    assert all(isinstance(s, ComputedSpec) and not s.needs_model for s in names.values())


def test_span_consistency_is_the_deprecated_name_of_cited_span_overlap() -> None:
    """Specs and stored verdicts name `span_consistency`: it still loads and computes cited_span_overlap,
    under its own identity (verdicts stored under it stay valid)."""
    old, new = spec("span_consistency"), spec("cited_span_overlap")
    assert type(old) is type(new) and old.metric == "span_consistency"
    assert old.computed_identity() == "greval-computed/span_consistency@greval-computed=3"
    assert new.computed_identity() == "greval-computed/cited_span_overlap@greval-computed=3"
    data = {"claims": SPAN_CLAIMS, "chunks": SPAN_CHUNKS}
    assert computed_judge(old, data).verdicts == computed_judge(new, data).verdicts
    schema = json.dumps(spec_json_schema())
    assert "span_consistency is its old name (deprecated" in schema
    assert '"fact_span_consistency"' in schema and "min_claim_overlap" in schema


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("metric: field_stats\nparams: {treshold: 0.5}", "params.treshold", "did you mean 'threshold'"),
        ("metric: field_stats\nparams: {field: 'a..b'}", "params.field", "a dotted path of field names"),
        ("metric: field_stats\nparams: {threshold: high}", "params.threshold", "valid number"),
        ("metric: span_consistency\nparams: {field: 'cl aims'}", "params.field", "must be an identifier"),
        ("metric: fact_span_consistency\nparams: {min_claim_overlap: 0}", "params.min_claim_overlap", "greater than 0"),
        ("metric: fact_span_consistency\nparams: {fact_key: ''}", "params.fact_key", "at least 1 character"),
        ("metric: cited_span_overlap\nparams: {fact_key: f}", "params.fact_key", "unknown field"),
        (
            "metric: cited_span_similarity\nparams: {min_similarity: 2}",
            "params.min_similarity",
            "less than or equal to 1",
        ),
        ("metric: cited_span_similarity\nparams: {score: median}", "params.score", "'mean' or 'well_supported_rate'"),
        ("metric: citations\nparams: {score: density}", "params.score", "'density_per_100_tokens'"),
    ],
)
def test_new_metric_params_are_one_line_errors(tmp_path: Path, body: str, where: str, message: str) -> None:
    f = write(tmp_path, f"name: x\nkind: computed\ndescription: d\n{body}\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    assert info.value.path == where, str(info.value)
    assert message in info.value.message and "\n" not in str(info.value)


def test_new_shipped_computed_specs_load() -> None:
    root = Path(__file__).resolve().parents[3] / "metric_specs"
    names = {s.name: s for f in root.glob("computed_*.yaml") for s in load_spec_file(f)}
    assert {"evidence_coverage", "citation_density", "self_reported_confidence"} <= set(names)
    assert {"cited_span_overlap", "span_consistency", "cited_span_similarity", "fact_span_consistency"} <= set(names)
    assert names["span_consistency"].metric == "span_consistency"  # the deprecated name keeps its stored verdicts
    assert names["fact_span_consistency"].params.fact_key is None  # word overlap: works on any claims
    assert spec("cited_span_overlap").required_inputs() == ["claims"]
    assert spec("fact_span_consistency").required_inputs() == ["claims"]
    assert spec("field_stats", {"field": "extraction.confidence"}).required_inputs() == ["extraction"]

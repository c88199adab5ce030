"""Quality (judging the judge): `greval spec lint` rules on bad specs, `spec new` end to end through the local
OpenAI-compatible test server (scripted drafts, re-asking, repair, refusal to write an invalid file), `spec try`;
reliability: flip rates under item / label reordering on scripted answers whose flips are counted by hand,
reproducibility from the store, panel agreement across two servers, and probability-weighted scores from a server
that returns log-probabilities.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from click.testing import CliRunner

from greval._sync import run_sync
from greval.cli import main
from greval.dataset.records import Record
from greval.errors import SpecError
from greval.judge.judge import Judge
from greval.judge.logprobs import weighted_value
from greval.llm.config import JudgeConfig
from greval.quality.draft import DraftRequest, repair_ranges
from greval.quality.lint import RULES, lint_file, lint_text
from greval.quality.reliability import (
    alogprob_scores,
    logprob_judge,
    parse_panel,
    permute_items,
    permute_scale,
    sample_records,
    wilson,
)
from greval.spec import CategoricalScale, Spec, ValueScale, load_spec_file, parse_spec
from greval.testing.openai_server import OpenAIServer

# ----------------------------------------------------------------------------------------------------- authoring

GOOD = """
name: coherence
description: How coherent and well organised the answer is for the question asked.
steps:
  - Read the question and the answer.
  - Check whether the answer's sentences follow from one another.
  - Choose the value from 1 to 5 whose range description fits best.
inputs: [question, answer]
scale:
  kind: value
  min: 1
  max: 5
  ranges:
    1-2: The answer jumps between unrelated points and cannot be followed.
    "3": The answer can be followed but has one confusing jump.
    4-5: Every sentence follows from the previous one and the whole reads as one argument.
"""

LABELS = """
name: support
description: Whether the answer is supported by the retrieved chunks.
steps:
  - Read the answer and the retrieved chunks.
  - Decide whether each claim of the answer is in the chunks, then pick yes or no.
inputs: [answer, chunks]
scale:
  kind: categorical
  labels:
    "yes": Every claim of the answer is stated in some chunk.
    "no": At least one claim of the answer is in no chunk.
"""


def _edit(base: str, path: list[Any], value: Any) -> str:
    data = yaml.safe_load(base)
    cur = data
    for p in path[:-1]:
        cur = cur[p]
    if value is _DELETE:
        del cur[path[-1]]
    else:
        cur[path[-1]] = value
    return yaml.safe_dump(data, sort_keys=False)


_DELETE = object()

# One bad spec per rule: (rule, spec text, field the finding names).
BAD: list[tuple[str, str, str]] = [
    ("yaml-syntax", "name: x\nsteps: [a, b\n", "line 3, column 1"),
    ("schema", _edit(GOOD, ["scale", "kind"], "stars"), "scale"),
    (
        "range-overlap",
        _edit(GOOD, ["scale", "ranges"], {"1-3": "poor and hard to follow", "3-5": "good and easy to follow"}),
        "scale.ranges.3-5",
    ),
    (
        "range-gap",
        _edit(GOOD, ["scale", "ranges"], {"1-2": "poor and hard to follow", "4-5": "good and easy to follow"}),
        "scale.ranges",
    ),
    (
        "range-outside",
        _edit(GOOD, ["scale", "ranges"], {"0-2": "poor and hard to follow", "3-5": "good and easy to follow"}),
        "scale.ranges.0-2",
    ),
    (
        "range-backwards",
        _edit(
            GOOD,
            ["scale", "ranges"],
            [
                {"min": 2, "max": 1, "description": "poor and hard to follow"},
                {"min": 3, "max": 5, "description": "good and easy to follow"},
            ],
        ),
        "scale.ranges[0]",
    ),
    (
        "range-undescribed",
        _edit(GOOD, ["scale", "ranges"], {"1-2": "", "3-5": "good and easy to follow"}),
        "scale.ranges.1-2",
    ),
    (
        "range-short-description",
        _edit(GOOD, ["scale", "ranges"], {"1-2": "bad", "3-5": "good and easy to follow"}),
        "scale.ranges.1-2",
    ),
    ("range-single", _edit(GOOD, ["scale", "ranges"], {"1-5": "how coherent the answer is overall"}), "scale.ranges"),
    ("label-undescribed", _edit(LABELS, ["scale", "labels", "no"], None), "scale.labels.no"),
    ("label-undescribed", _edit(LABELS, ["scale", "labels", "no"], "   "), "scale.labels.no"),
    ("label-short-description", _edit(LABELS, ["scale", "labels", "no"], "unsupported"), "scale.labels.no"),
    (
        "label-duplicate",
        _edit(
            LABELS,
            ["scale", "labels"],
            [
                {"name": "yes", "description": "Every claim is stated in some chunk."},
                {"name": "no", "description": "Some claim is in no chunk at all."},
                {"name": "yes", "description": "All claims appear in the chunks."},
            ],
        ),
        "scale.labels[2]",
    ),
    (
        "label-same-description",
        _edit(LABELS, ["scale", "labels", "no"], "Every claim of the answer is stated in some  chunk."),
        "scale.labels.no",
    ),
    (
        "input-undeclared",
        _edit(LABELS, ["steps"], ["Compare the answer with the expected answer and the chunks; pick yes or no."]),
        "inputs",
    ),
    (
        "input-undeclared",
        _edit(LABELS, ["steps"], ["Check the answer against the chunks and {style_guide}; pick yes or no."]),
        "inputs",
    ),
    ("input-unused", _edit(LABELS, ["inputs"], ["answer", "chunks", "source"]), "inputs.source"),
    (
        "steps-no-scale",
        _edit(LABELS, ["steps"], ["Read the answer.", "Read the chunks and compare them with it."]),
        "steps",
    ),
    ("step-too-long", _edit(LABELS, ["steps", 1], "Decide yes or no " + "and then look again " * 20), "steps[1]"),
    ("description-short", _edit(LABELS, ["description"], "Support."), "description"),
    (
        "metric-deprecated",
        "name: x\nkind: computed\ndescription: Claims against the spans they cite.\nmetric: span_consistency\n",
        "metric",
    ),
]


def test_good_specs_lint_clean() -> None:
    assert lint_text(GOOD, "good.yaml") == []
    assert lint_text(LABELS, "labels.yaml") == []


def test_valid_bundled_specs_have_no_lint_errors() -> None:
    root = Path(__file__).resolve().parents[1]
    for f in [*(root / "metric_specs").glob("*.yaml"), *(root / "examples").rglob("*.yaml")]:
        try:
            load_spec_file(f)
        except SpecError:
            continue  # a spec someone is still editing: the schema's business, not the linter's
        assert [x for x in lint_file(f) if x.severity == "error"] == [], f


@pytest.mark.parametrize(("rule", "text", "where"), BAD, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(BAD)])
def test_each_rule_fires_on_a_bad_spec(rule: str, text: str, where: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    findings = lint_file(path)
    hits = [f for f in findings if f.rule == rule]
    assert hits, [f.line() for f in findings]
    assert hits[0].field == where
    assert hits[0].severity == RULES[rule][0]
    res = CliRunner().invoke(main, ["spec", "lint", str(path)])
    assert f"{path}: {where}: [{rule}] " in res.output
    assert res.exit_code == (1 if any(f.severity == "error" for f in findings) else 0)
    assert "Traceback" not in res.output


def test_every_rule_is_tested() -> None:
    assert {r for r, _, _ in BAD} == set(RULES)


def test_schema_errors_already_explained_by_lint_are_not_repeated() -> None:
    text = _edit(GOOD, ["scale", "ranges"], {"1-3": "poor and hard to follow", "3-5": "good and easy to follow"})
    rules = [f.rule for f in lint_text(text, "x.yaml")]
    assert rules == ["range-overlap"]


def test_lint_multi_spec_file_prefixes_fields_and_strict_flag(tmp_path: Path) -> None:
    bad = _edit(LABELS, ["description"], "Support.")
    path = tmp_path / "two.yaml"
    path.write_text(
        yaml.safe_dump({"specs": [yaml.safe_load(GOOD), yaml.safe_load(bad)]}, sort_keys=False), encoding="utf-8"
    )
    res = CliRunner().invoke(main, ["spec", "lint", str(path)])
    assert f"{path}: [1].description: [description-short]" in res.output
    assert res.exit_code == 0
    assert CliRunner().invoke(main, ["spec", "lint", "--strict", str(path)]).exit_code == 1
    assert CliRunner().invoke(main, ["spec", "lint", str(tmp_path / "missing.yaml")]).exit_code == 1


def test_examples_that_do_not_fit_the_verdict_schema_are_schema_findings() -> None:
    data = yaml.safe_load(LABELS)
    data["examples"] = [{"inputs": {"answer": "a", "chunks": ["c"]}, "output": {"reason": "r", "label": "maybe"}}]
    findings = lint_text(yaml.safe_dump(data), "x.yaml")
    assert [(f.rule, f.field) for f in findings] == [("schema", "examples[0].output")]


# ------------------------------------------------------------------------------------------ repair
def test_repair_ranges_tiles_the_scale() -> None:
    fixed = repair_ranges(
        [
            {"min": 4, "max": 2, "description": "middling"},
            {"min": 5, "max": 9, "description": "great"},
            {"min": 3, "max": 4, "description": "fine"},
        ],
        1,
        5,
    )
    assert [(r["min"], r["max"]) for r in fixed] == [(1, 4), (5, 5)]
    assert repair_ranges([{"min": 1, "max": 2, "description": ""}], 1, 5) == []


# ---------------------------------------------------------------------------------------- spec new
def _draft(ranges: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    return {
        "steps": kw.pop(
            "steps",
            [
                "Read the question and the answer.",
                "Check whether each sentence of the answer follows from the one before.",
                "Choose the value from 1 to 5 whose range description fits best.",
            ],
        ),
        "instructions": kw.pop("instructions", "Do not penalise brevity."),
        **({"ranges": ranges} if ranges is not None else {}),
        **kw,
    }


GOOD_RANGES = [
    {"min": 1, "max": 2, "description": "The answer jumps between unrelated points."},
    {"min": 3, "max": 3, "description": "The answer can be followed with one confusing jump."},
    {"min": 4, "max": 5, "description": "Every sentence follows from the previous one."},
]


def _new(llm: OpenAIServer, tmp_path: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        main,
        [
            "spec",
            "new",
            "coherence",
            "-d",
            "How coherent and well organised the answer is.",
            "-o",
            str(tmp_path / "coherence.yaml"),
            "--judge",
            "openai:drafter",
            "--base-url",
            llm.base_url,
            *extra,
        ],
    )


def _compiles(path: Path) -> Spec:
    [spec] = load_spec_file(path)
    assert isinstance(spec, Spec)
    Judge(spec, llm_model_stub())
    res = CliRunner().invoke(main, ["spec", "lint", str(path)])
    assert res.exit_code == 0, res.output
    return spec


def llm_model_stub() -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model="x", api_key="sk-x", base_url="http://127.0.0.1:9/v1")


def test_spec_new_writes_the_scripted_draft(llm: OpenAIServer, tmp_path: Path) -> None:
    llm.script([{"match": "Metric name: coherence", "action": {"type": "respond", "content": _draft(GOOD_RANGES)}}])
    res = _new(llm, tmp_path)
    assert res.exit_code == 0, res.output
    path = tmp_path / "coherence.yaml"
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=./greval-spec.schema.json\n")
    spec = _compiles(path)
    assert spec.steps[1] == "Check whether each sentence of the answer follows from the one before."
    assert spec.instructions == "Do not penalise brevity."
    assert [(r.min, r.max) for r in spec.scale.ranges] == [(1, 2), (3, 3), (4, 5)]  # type: ignore[union-attr]
    assert list(spec.inputs) == ["question", "answer"]
    assert len(llm.requests()) == 1
    body = llm.requests()[0]
    assert body["response_format"]["type"] == "json_schema"
    schema = body["response_format"]["json_schema"]["schema"]
    assert set(schema["properties"]) == {"steps", "instructions", "ranges"}
    # an existing file is not overwritten without --force
    again = _new(llm, tmp_path)
    assert again.exit_code == 2 and "--force" in again.output


def test_spec_new_reasks_with_the_problems_of_an_invalid_draft(llm: OpenAIServer, tmp_path: Path) -> None:
    gappy = [GOOD_RANGES[0], GOOD_RANGES[2]]
    llm.script(
        [
            {"match": "Metric name: coherence", "times": 1, "action": {"type": "respond", "content": _draft(gappy)}},
            {"match": "Metric name: coherence", "action": {"type": "respond", "content": _draft(GOOD_RANGES)}},
        ]
    )
    res = _new(llm, tmp_path)
    assert res.exit_code == 0, res.output
    assert len(llm.requests()) == 2
    second = json.dumps(llm.requests()[1]["messages"])
    assert "3 not covered by any range" in second
    spec = _compiles(tmp_path / "coherence.yaml")
    assert [(r.min, r.max) for r in spec.scale.ranges] == [(1, 2), (3, 3), (4, 5)]  # type: ignore[union-attr]


def test_spec_new_repairs_range_boundaries_when_reasking_does_not_help(llm: OpenAIServer, tmp_path: Path) -> None:
    overlapping = [
        {"min": 1, "max": 3, "description": "The answer jumps between unrelated points."},
        {"min": 3, "max": 4, "description": "The answer can be followed with one confusing jump."},
    ]
    llm.script([{"match": "Metric name: coherence", "action": {"type": "respond", "content": _draft(overlapping)}}])
    res = _new(llm, tmp_path)
    assert res.exit_code == 0, res.output
    assert len(llm.requests()) == 3
    assert "repaired the range boundaries" in res.output
    spec = _compiles(tmp_path / "coherence.yaml")
    assert [(r.min, r.max) for r in spec.scale.ranges] == [(1, 3), (4, 5)]  # type: ignore[union-attr]


def test_spec_new_never_writes_an_unusable_draft(llm: OpenAIServer, tmp_path: Path) -> None:
    llm.script(
        [{"match": "Metric name: coherence", "action": {"type": "respond", "content": _draft(GOOD_RANGES, steps=[])}}]
    )
    res = _new(llm, tmp_path)
    assert res.exit_code == 2
    assert "no evaluation steps" in res.output and "nothing written" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "coherence.yaml").exists()


def test_spec_new_with_default_answers_still_writes_a_valid_spec(llm: OpenAIServer, tmp_path: Path) -> None:
    # Unscripted, the server answers schema-valid nonsense (random ranges): re-ask, then repair.
    res = _new(llm, tmp_path, "--min", "0", "--max", "10")
    assert res.exit_code == 0, res.output
    spec = _compiles(tmp_path / "coherence.yaml")
    assert spec.scale.min == 0 and spec.scale.max == 10  # type: ignore[union-attr]


def test_spec_new_categorical_item_metric(llm: OpenAIServer, tmp_path: Path) -> None:
    content = {
        "steps": [
            "Read the question and the chunk.",
            "Decide whether the chunk states facts that answer the question: relevant, partial or irrelevant.",
        ],
        "instructions": "",
        "labels": {
            "relevant": "The chunk states a fact that answers the question.",
            "partial": "The chunk gives background but no direct answer.",
            "irrelevant": "The chunk has nothing to do with the question.",
        },
    }
    llm.script([{"match": "Metric name: chunk_relevance", "action": {"type": "respond", "content": content}}])
    out = tmp_path / "cr.yaml"
    res = CliRunner().invoke(
        main,
        [
            "spec",
            "new",
            "chunk_relevance",
            "-d",
            "How relevant each retrieved chunk is to the question.",
            "--labels",
            "relevant, partial, irrelevant",
            "--target",
            "chunks",
            "-o",
            str(out),
            "--judge",
            "openai:drafter",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    spec = _compiles(out)
    assert spec.each == "chunks" and list(spec.inputs) == ["question", "chunks"]
    assert spec.scale.names == ["relevant", "partial", "irrelevant"]  # type: ignore[union-attr]
    assert spec.instructions is None
    schema = llm.requests()[0]["response_format"]["json_schema"]["schema"]
    labels = schema["$defs"]["LabelDescriptions"]
    assert sorted(labels["required"]) == ["irrelevant", "partial", "relevant"]


def test_spec_new_user_mistakes_are_one_line(llm: OpenAIServer, tmp_path: Path) -> None:
    for args, msg in (
        (["--labels", "only"], "at least two labels"),
        (["--min", "5", "--max", "1"], "must be below"),
        (["--inputs", "question,bad-name"], "not an identifier"),
    ):
        res = _new(llm, tmp_path, *args)
        assert res.exit_code == 2 and msg in res.output, res.output
    res = CliRunner().invoke(main, ["spec", "new", "9bad", "-d", "x y z", "--judge", "openai:m"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert DraftRequest(name="x", description="d", target="chunks", inputs=["question"]).effective_inputs() == [
        "question",
        "chunks",
    ]


# ---------------------------------------------------------------------------------------- spec try
def test_spec_try_prints_agreement_on_a_tiny_labelled_set(llm: OpenAIServer, tmp_path: Path) -> None:
    spec_path = tmp_path / "support.yaml"
    spec_path.write_text(LABELS.replace("inputs: [answer, chunks]", "inputs: [question, answer, chunks]"))
    rows = [
        {"id": "r1", "question": "q1", "answer": "A1", "chunks": ["c"], "human": "yes"},
        {"id": "r2", "question": "q2", "answer": "A2", "chunks": ["c"], "human": "yes"},
        {"id": "r3", "question": "q3", "answer": "A3", "chunks": ["c"], "human": "no"},
        {"id": "r4", "question": "q4", "answer": "A4", "chunks": ["c"], "human": "no"},
    ]
    data = tmp_path / "labelled.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    # Judge: yes, yes, yes, no -> 3 of 4 agree; kappa = (0.75 - 0.5) / (1 - 0.5) = 0.5.
    judge = {"A1": "yes", "A2": "yes", "A3": "yes", "A4": "no"}
    llm.script(
        [
            {"match": f"## Answer\n{a}", "action": {"type": "respond", "content": {"reason": "r", "label": lab}}}
            for a, lab in judge.items()
        ]
    )
    store = tmp_path / "try.sqlite"
    args = ["spec", "try", str(spec_path), "--data", str(data), "--human-column", "human"]
    args += ["--judge", "openai:j", "--base-url", llm.base_url, "--bootstrap", "0", "--store", str(store)]
    res = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "rep.json")])
    assert res.exit_code == 0, res.output
    assert "4 of 4 items compared" in res.output
    rep = json.loads((tmp_path / "rep.json").read_text())
    assert rep["metrics"]["accuracy"]["value"] == pytest.approx(0.75)
    assert rep["metrics"]["cohen_kappa"]["value"] == pytest.approx(0.5)
    assert "accuracy" in res.output and "0.750" in res.output
    # The human column is not part of what the judge sees or what the store keys on.
    assert all("human" not in json.dumps(b["messages"]) for b in llm.requests())
    n = len(llm.requests())
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0 and len(llm.requests()) == n  # stored verdicts reused


def test_spec_try_item_metric_with_per_item_human_labels(llm: OpenAIServer, tmp_path: Path) -> None:
    spec_path = tmp_path / "rel.yaml"
    data = yaml.safe_load(LABELS)
    data.update(name="rel", inputs=["question", "chunks"], target={"each": "chunks"})
    data["steps"] = ["Read the question and each chunk; answer yes or no for each chunk."]
    spec_path.write_text(yaml.safe_dump(data))
    rows = [{"id": "r1", "question": "q", "chunks": ["alpha", "beta"], "human": ["yes", "no"]}]
    path = tmp_path / "l.jsonl"
    path.write_text(json.dumps(rows[0]))
    base = ["spec", "try", str(spec_path), "--data", str(path), "--judge", "openai:j", "--base-url", llm.base_url]
    res = CliRunner().invoke(main, [*base, "--human-column", "human", "--bootstrap", "0"])
    assert res.exit_code == 0, res.output
    assert "2 of 2 items compared" in res.output
    bad = CliRunner().invoke(main, [*base, "--human-column", "nope"])
    assert bad.exit_code == 2 and "--human-column 'nope' not found" in bad.output


def test_spec_try_with_human_labels_in_their_own_file(llm: OpenAIServer, tmp_path: Path) -> None:
    begin = Path(__file__).resolve().parents[1] / "examples" / "begin"
    labels = tmp_path / "labels.csv"
    # Two annotators on the first record, one elsewhere: the frame gets an annotator column.
    rows = (begin / "human_labels.csv").read_text().splitlines()
    first = rows[1].split(",")
    labels.write_text("\n".join([*rows, ",".join([first[0], first[1], "second-annotator"])]) + "\n")
    res = CliRunner().invoke(
        main,
        [
            "spec",
            "try",
            str(begin / "attribution.yaml"),
            "--data",
            str(begin / "records.jsonl"),
            "--human-file",
            str(labels),
            "--human-column",
            "label",
            "--annotator-column",
            "annotator",
            "--limit",
            "5",
            "--bootstrap",
            "0",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "5 of 5 items compared" in res.output
    assert len(llm.requests()) == 5


def test_human_labels_spelled_like_missing_values_are_kept(tmp_path: Path) -> None:
    """`spec try --human-file`: a label "NA" / "None" / "null" is a label, not a missing answer; only an empty
    cell is missing (as in `greval agreement`)."""
    from greval.flows.trial import humans_from_file

    path = tmp_path / "labels.csv"
    path.write_text("id,label\nr1,NA\nr2,None\nr3,null\nr4,\nr5,3\n")
    got = humans_from_file(str(path), "label")
    assert {rid: v[0][1] for rid, v in got.items()} == {"r1": "NA", "r2": "None", "r3": "null", "r4": None, "r5": "3"}


# --------------------------------------------------------------------------------------------------- reliability

ITEM_SPEC: dict[str, Any] = {
    "name": "chunk_support",
    "description": "Whether each retrieved chunk helps answer the question.",
    "steps": ["Read the question and each chunk.", "Answer yes if the chunk helps answer the question, else no."],
    "inputs": ["question", "chunks"],
    "target": {"each": "chunks"},
    "scale": {
        "kind": "categorical",
        "labels": {
            "yes": "The chunk states a fact that answers the question.",
            "no": "The chunk does not help answer the question.",
        },
    },
}
RECORD_SPEC: dict[str, Any] = {
    "name": "support",
    "description": "Whether the answer is right for the question.",
    "steps": ["Read the question and the answer.", "Say yes if the answer is right, else no."],
    "inputs": ["question", "answer"],
    "scale": {
        "kind": "categorical",
        "labels": {"yes": "The answer is right for the question.", "no": "The answer is wrong or missing."},
    },
}
VALUE_SPEC: dict[str, Any] = {
    "name": "quality",
    "description": "How good the answer is for the question.",
    "steps": ["Read the question and the answer.", "Rate the answer from 1 to 5."],
    "inputs": ["question", "answer"],
    "scale": {
        "kind": "value",
        "min": 1,
        "max": 5,
        "ranges": {"1-2": "The answer is wrong or empty.", "3": "The answer is partly right.", "4-5": "It is right."},
    },
}


def _verdicts(**labels: str) -> dict[str, Any]:
    return {
        "type": "respond",
        "content": {"verdicts": [{"id": i, "reason": "r", "label": lab} for i, lab in labels.items()]},
    }


def _write(tmp_path: Path, spec: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    sp = tmp_path / f"{spec['name']}.yaml"
    sp.write_text(yaml.safe_dump(spec, sort_keys=False))
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    return sp, data


# ------------------------------------------------------------------------------------------- units
def test_permutations_keep_meaning_and_change_hashes() -> None:
    rec = Record.from_mapping({"id": "r", "question": "q", "chunks": ["a", "b", "c"]})
    rev = permute_items(rec, "chunks")
    assert [c["id"] for c in rev.items("chunks")] == ["c3", "c2", "c1"]
    assert rev.id == rec.id and rev.hash != rec.hash
    shuf = permute_items(rec, "chunks", "shuffle", seed=3)
    assert shuf.items("chunks") != rec.items("chunks")
    assert permute_items(rec, "chunks", "shuffle", seed=3) == shuf  # seeded: reproducible

    ordered = parse_spec({**RECORD_SPEC, "scale": {**RECORD_SPEC["scale"], "ordered": True}})
    assert isinstance(ordered, Spec)
    twin = permute_scale(ordered)
    assert isinstance(twin.scale, CategoricalScale)
    assert twin.scale.names == ["no", "yes"] and twin.hash != ordered.hash and twin.name == ordered.name
    assert twin.scale.scores() == {"no": 0.0, "yes": 1.0}  # the original scores, made explicit

    items = parse_spec(ITEM_SPEC)
    assert isinstance(items, Spec)
    twin = permute_scale(items)
    assert twin.positive_labels == ["yes"]  # the default positive label survives the reordering

    value = parse_spec(VALUE_SPEC)
    assert isinstance(value, Spec)
    vt = permute_scale(value)
    assert isinstance(vt.scale, ValueScale)
    assert [r.text for r in vt.scale.ranges] == ["4-5", "3", "1-2"]


def test_sampling_is_seeded_and_keeps_file_order() -> None:
    recs = [Record.from_mapping({"id": str(i), "answer": f"a{i}"}) for i in range(10)]
    a = sample_records(recs, 4, seed=1)
    assert a == sample_records(recs, 4, seed=1)
    assert [int(r.id) for r in a] == sorted(int(r.id) for r in a)
    assert len(a) == 4 and sample_records(recs, 50, 0) == recs


def test_wilson_and_weighted_value() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi is not None and 0.25 < hi < 0.35
    assert wilson(0, 0) == (None, None)
    content = [
        {"token": t, "logprob": 0.0, "top_logprobs": []} for t in ['{"', "reason", '":"', "ok", '","', "value", '":']
    ]
    content.append(
        {
            "token": "4",
            "logprob": math.log(0.6),
            "top_logprobs": [
                {"token": "4", "logprob": math.log(0.6)},
                {"token": "3", "logprob": math.log(0.3)},
                {"token": "5", "logprob": math.log(0.05)},
                {"token": "x", "logprob": math.log(0.05)},
            ],
        }
    )
    score, mass = weighted_value({"content": content}, 1, 5)  # type: ignore[misc]
    assert score == pytest.approx((4 * 0.6 + 3 * 0.3 + 5 * 0.05) / 0.95)
    assert mass == pytest.approx(0.95)
    assert weighted_value(None, 1, 5) is None
    assert weighted_value({"content": content[:5]}, 1, 5) is None


def test_parse_panel() -> None:
    assert parse_panel("openai:a") == ("openai:a", None)
    assert parse_panel("openai:b@http://h:1/v1") == ("openai:b", "http://h:1/v1")


# ---------------------------------------------------------------------------------- flips, by hand
ROWS = [
    {"id": "A", "question": "qa", "chunks": ["apple", "banana", "cherry"]},
    {"id": "B", "question": "qb", "chunks": ["dog", "emu", "fox"]},
    {"id": "C", "question": "qc", "chunks": ["kiwi"]},
]


def _script_order_dependent(llm: OpenAIServer) -> None:
    llm.script(
        [
            # A with the labels listed no-first: every chunk "no" (2 flips vs yes, yes, no).
            {
                "match": r'- "no": [^\n]*\n- "yes"[\s\S]*\[c1\] apple',
                "regex": True,
                "action": _verdicts(c1="no", c2="no", c3="no"),
            },
            # A in file order: yes, yes, no; reversed: c1 flips to no (1 flip).
            {"match": "[c1] apple\n\n[c2] banana", "action": _verdicts(c1="yes", c2="yes", c3="no")},
            {"match": "[c3] cherry\n\n[c2] banana", "action": _verdicts(c1="no", c2="yes", c3="no")},
            # B and C answer the same whatever the order (0 flips).
            {"match": "[c1] dog", "action": _verdicts(c1="yes", c2="no", c3="no")},
            {"match": "[c3] fox", "action": _verdicts(c1="yes", c2="no", c3="no")},
            {"match": "[c1] kiwi", "action": _verdicts(c1="yes")},
        ]
    )


def test_flip_rates_match_the_hand_count_and_are_reproducible(llm: OpenAIServer, tmp_path: Path) -> None:
    _script_order_dependent(llm)
    sp, data = _write(tmp_path, ITEM_SPEC, ROWS)
    store = tmp_path / "rel.sqlite"
    args = ["reliability", "--spec", str(sp), "--data", str(data), "--store", str(store)]
    args += ["--judge", "openai:j", "--base-url", llm.base_url]
    res = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "r1.json")])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "r1.json").read_text())
    flips = {f["perturbation"]: f for f in rep["flips"]}
    # Item order: A and B have 3 chunks each (C has one and is skipped): 6 pairs, 1 flip (A/c1).
    assert (flips["items"]["n"], flips["items"]["flips"], flips["items"]["records"]) == (6, 1, 2)
    assert flips["items"]["rate"] == pytest.approx(1 / 6)
    assert flips["items"]["unit"] == "chunks"
    # Label order: all 7 chunks; A/c1 and A/c2 flip to "no".
    assert (flips["scale"]["n"], flips["scale"]["flips"]) == (7, 2)
    assert flips["scale"]["rate"] == pytest.approx(2 / 7)
    assert any("1 record(s) with < 2 chunks skipped" in n for n in rep["notes"])
    assert "0.167" in res.output and "0.286" in res.output
    assert "not requested (--logprobs)" in res.output
    calls = len(llm.requests())
    assert calls == 3 + 2 + 3  # base, permuted items (A, B), permuted labels

    # Same store, same command: no call, the same report.
    again = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "r2.json")])
    assert again.exit_code == 0, again.output
    assert len(llm.requests()) == calls
    assert json.loads((tmp_path / "r2.json").read_text()) == rep


def test_only_one_perturbation_and_shuffle(llm: OpenAIServer, tmp_path: Path) -> None:
    sp, data = _write(tmp_path, RECORD_SPEC, [{"id": "x", "question": "q", "answer": "a"}])
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--perturb",
            "items",
            "--order",
            "shuffle",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "reads no chunks or triples" in res.output
    bad = CliRunner().invoke(main, ["reliability", "-s", "nope_metric", "--data", str(data), "--judge", "openai:j"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


# ------------------------------------------------------------------------------------------- panel
@pytest.fixture()
def second_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


def _labels_by_answer(srv: OpenAIServer, labels: dict[str, str]) -> None:
    srv.script(
        [
            {"match": f"## Answer\n{a}", "action": {"type": "respond", "content": {"reason": "r", "label": lab}}}
            for a, lab in labels.items()
        ]
    )


def test_panel_agreement_between_two_judges(llm: OpenAIServer, second_server: OpenAIServer, tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "question": f"q{i}", "answer": f"A{i}"} for i in range(1, 5)]
    sp, data = _write(tmp_path, RECORD_SPEC, rows)
    _labels_by_answer(llm, {"A1": "yes", "A2": "yes", "A3": "no", "A4": "no"})
    _labels_by_answer(second_server, {"A1": "yes", "A2": "no", "A3": "no", "A4": "no"})
    out = tmp_path / "p.json"
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--perturb",
            "scale",
            "--judge",
            "openai:first",
            "--base-url",
            llm.base_url,
            "--panel",
            f"openai:second@{second_server.base_url}",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    [pair] = rep["panel"]
    assert (pair["a"], pair["b"], pair["n"]) == ("openai:first", "openai:second", 4)
    # 3 of 4 agree; chance agreement 0.5·0.25 + 0.5·0.75 = 0.5, so κ = (0.75 − 0.5) / 0.5 = 0.5.
    assert pair["metrics"]["accuracy"] == pytest.approx(0.75)
    assert pair["metrics"]["cohen_kappa"] == pytest.approx(0.5)
    assert "panel agreement" in res.output
    assert len(second_server.requests()) == 4


# ---------------------------------------------------------------------------------------- logprobs
class _LogprobServer:
    """A minimal chat-completions server that answers one fixed JSON verdict with token log-probabilities."""

    def __init__(self, tokens: list[tuple[str, dict[str, float]]]) -> None:
        self.tokens = tokens
        self.bodies: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        text = "".join(t for t, _ in self.tokens)
        logprobs = None
        if body.get("logprobs"):
            logprobs = {
                "content": [
                    {
                        "token": t,
                        "logprob": math.log(max(top.values())) if top else 0.0,
                        "bytes": None,
                        "top_logprobs": [{"token": k, "logprob": math.log(p), "bytes": None} for k, p in top.items()],
                    }
                    for t, top in self.tokens
                ]
            }
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "m"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": logprobs,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_probability_weighted_score_from_logprobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    tokens: list[tuple[str, dict[str, float]]] = [
        ('{"', {}),
        ("reason", {}),
        ('":"', {}),
        ("ok", {}),
        ('","', {}),
        ("value", {}),
        ('":', {}),
    ]
    tokens += [("4", {"4": 0.6, "3": 0.3, "5": 0.1}), ("}", {})]
    srv = _LogprobServer(tokens)
    try:
        rows = [{"id": "r1", "question": "q", "answer": "a"}, {"id": "r2", "question": "q2", "answer": "b"}]
        sp, data = _write(tmp_path, VALUE_SPEC, rows)
        out = tmp_path / "lp.json"
        res = CliRunner().invoke(
            main,
            [
                "reliability",
                "-s",
                str(sp),
                "--data",
                str(data),
                "--store",
                str(tmp_path / "s.sqlite"),
                "--logprobs",
                "--top-logprobs",
                "3",
                "--judge",
                "openai:lp",
                "--base-url",
                srv.base_url,
                "--json",
                str(out),
            ],
        )
        assert res.exit_code == 0, res.output
        lp = json.loads(out.read_text())["logprobs"]
        assert (lp["requested"], lp["usable"]) == (2, 2)
        assert lp["mean_value"] == 4
        assert lp["mean_weighted"] == pytest.approx(4 * 0.6 + 3 * 0.3 + 5 * 0.1)
        assert lp["scores"] == {"r1": pytest.approx(3.8), "r2": pytest.approx(3.8)}
        assert "probability-weighted score (G-Eval): 2 of 2" in res.output
        asked = [b for b in srv.bodies if b.get("logprobs")]
        assert len(asked) == 2 and all(b["top_logprobs"] == 3 for b in asked)
    finally:
        srv.close()


def test_the_logprob_call_caps_each_reason_as_a_run_of_the_local_judge_does(tmp_path: Path) -> None:
    """A judge with a reason cap (the embedded one's: LOCAL_REASON_CHARS) sends it in the logprob call's schema
    too, as every call of a run does (greval.judge.judge): the same request, log-probabilities added."""
    tokens: list[tuple[str, dict[str, float]]] = [
        ('{"reason":"ok","value":', {}),
        ("4", {"4": 0.9, "3": 0.1}),
        ("}", {}),
    ]
    srv = _LogprobServer(tokens)
    try:
        spec = parse_spec(VALUE_SPEC)
        assert isinstance(spec, Spec)
        cfg = JudgeConfig.parse("openai:lp", base_url=srv.base_url, api_key="sk-test", reason_chars=300)
        rec = Record.from_mapping({"id": "r1", "question": "q", "answer": "a"})
        scores, problems = run_sync(alogprob_scores(spec, [rec], logprob_judge(spec, cfg, 2)))
        assert problems == [] and scores["r1"][0] == 4
        (body,) = srv.bodies
        assert body["logprobs"] is True and body["top_logprobs"] == 2
        sent = body["response_format"]["json_schema"]["schema"]
        assert sent["properties"]["reason"]["maxLength"] == 300
    finally:
        srv.close()


def test_logprobs_not_available_is_said_plainly(llm: OpenAIServer, tmp_path: Path) -> None:
    sp, data = _write(tmp_path, VALUE_SPEC, [{"id": "r1", "question": "q", "answer": "a"}])
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--logprobs",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "not available from this model/server" in res.output
    item = dict(ITEM_SPEC, name="items_value", scale=VALUE_SPEC["scale"])
    sp2 = tmp_path / "items_value.yaml"
    sp2.write_text(yaml.safe_dump(item))
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp2),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--logprobs",
            "--perturb",
            "items",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "record-level value scales only" in res.output

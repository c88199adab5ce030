"""Stage 1 — specs: loading, shorthands, hashing, JSON Schema, and one-line errors for malformed specs."""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner

from greval.cli import main
from greval.errors import SpecError
from greval.spec import (
    CategoricalScale,
    ValueScale,
    bundled_specs,
    dependency_levels,
    load_spec_file,
    parse_spec,
    resolve_specs,
    spec_json_schema,
    with_dependencies,
)

VALUE: dict[str, Any] = {
    "name": "coherence",
    "description": "How coherent the answer is.",
    "steps": ["Read the answer.", "Rate it on the scale."],
    "inputs": ["question", "answer"],
    "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
}
CATEG: dict[str, Any] = {
    "name": "relevance",
    "description": "Per chunk relevance.",
    "steps": ["Judge each chunk against the label descriptions."],
    "inputs": {"question": True, "chunks": {"required": True, "description": "retrieved"}},
    "scale": {"kind": "categorical", "labels": {"yes": "relevant", "no": "not relevant"}},
    "target": {"each": "chunks"},
}


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of base with one dotted path set (value ``...`` deletes it)."""
    out = copy.deepcopy(base)
    cur: Any = out
    keys = path.split(".")
    for k in keys[:-1]:
        cur = cur[int(k)] if isinstance(cur, list) else cur[k]
    last = keys[-1]
    if value is ...:
        del cur[last]
    else:
        cur[last] = value
    return out


# (spec, expected field path, a fragment of the message)
MALFORMED: list[tuple[dict[str, Any], str, str]] = [
    (_with(VALUE, "name", ...), "name", "required field is missing"),
    (_with(VALUE, "name", "2fast"), "name", "identifier"),
    (_with(VALUE, "name", "has space"), "name", "identifier"),
    (_with(VALUE, "description", ""), "description", "at least 1 character"),
    (_with(VALUE, "description", ...), "description", "missing"),
    (_with(VALUE, "steps", []), "steps", "at least 1 item"),
    (_with(VALUE, "steps", ...), "steps", "missing"),
    (_with(VALUE, "steps", "one string"), "steps", "list"),
    (_with(VALUE, "stpes", ["x"]), "stpes", "did you mean 'steps'"),
    (_with(VALUE, "inputs", []), "inputs", "at least one input"),
    (
        _with(VALUE, "inputs", {"question": {"requird": True}}),
        "inputs.question.requird",
        "did you mean 'required'",
    ),
    (_with(VALUE, "inputs", {"bad name": True}), "inputs", "not an identifier"),
    (_with(VALUE, "inputs", 5), "inputs", "dictionary"),
    (_with(VALUE, "scale", ...), "scale", "missing"),
    (_with(VALUE, "scale.kind", "stars"), "scale", "'value' or 'categorical'"),
    (_with(VALUE, "scale.kind", ...), "scale", "kind: value or kind: categorical"),
    (_with(VALUE, "scale.min", 5), "scale", "must be below max"),
    (_with(VALUE, "scale.ranges", {"1-2": "a", "2-3": "b", "4-5": "c"}), "scale.ranges", "overlap at 2"),
    (_with(VALUE, "scale.ranges", {"1-2": "a", "4-5": "c"}), "scale.ranges", "3 not covered"),
    (_with(VALUE, "scale.ranges", {"1-2": "a", "3": "b", "4-6": "c"}), "scale.ranges", "outside the scale"),
    (_with(VALUE, "scale.ranges", {"2-1": "a", "3-5": "b"}), "scale.ranges[0]", "runs backwards"),
    (_with(VALUE, "scale.ranges", {"one": "a"}), "scale.ranges", "is not 'N' or 'N-M'"),
    (
        _with(VALUE, "scale.ranges", {"1-2": "", "3-5": "b"}),
        "scale.ranges[0].description",
        "at least 1 character",
    ),
    (_with(VALUE, "scale.max", 500), "scale", "at most 101 integers"),
    (_with(CATEG, "scale.labels", {"yes": "relevant"}), "scale.labels", "at least 2 items"),
    (
        _with(CATEG, "scale.labels", [{"name": "a", "description": "x"}, {"name": "a", "description": "y"}]),
        "scale.labels",
        "duplicate label",
    ),
    (
        _with(CATEG, "scale.labels", {"yes": {"descriptio": "x"}, "no": "n"}),
        "scale.labels[0].descriptio",
        "did you mean 'description'",
    ),
    (
        _with(
            CATEG,
            "scale.labels",
            [{"name": "a", "description": "x", "score": 1}, {"name": "b", "description": "y"}],
        ),
        "scale.labels",
        "every label or to none",
    ),
    (_with(CATEG, "target", {"each": "nodes"}), "target", "record' or {each: chunks|triples|turns}"),
    (_with(CATEG, "target", "everything"), "target", "record' or {each: chunks|triples|turns}"),
    (_with(VALUE, "target", {"each": "chunks"}), "target.each", "not among the inputs"),
    (_with(CATEG, "target", {"each": "turns"}), "target.each", "'turns' needs the input 'conversation'"),
    (
        _with(
            _with(_with(CATEG, "inputs", ["conversation"]), "target", {"each": "turns"}),
            "examples",
            [{"inputs": {"conversation": [{"role": "person", "content": "hi"}]}, "output": {"verdicts": []}}],
        ),
        "examples[0].inputs.conversation",
        "turn 1 has role 'person'; use user, assistant, system or tool",
    ),
    (
        _with(CATEG, "target", {"each": "chunks", "aggregate": "mean"}),
        "target.aggregate",
        "needs a value scale",
    ),
    (
        _with(CATEG, "target", {"each": "chunks", "aggregate": "score_mean"}),
        "target.aggregate",
        "needs label scores",
    ),
    (
        _with(CATEG, "target", {"each": "chunks", "positive": ["maybe"]}),
        "target.positive",
        "not a scale label",
    ),
    (_with(VALUE, "depends_on", ["coherence"]), "depends_on", "cannot depend on itself"),
    (_with(VALUE, "judge", {"temperature": 3}), "judge.temperature", "less than or equal to 2"),
    (_with(VALUE, "judge", {"samples": 0}), "judge.samples", "greater than or equal to 1"),
    (_with(VALUE, "judge", {"modle": "x"}), "judge.modle", "did you mean 'model'"),
    (
        _with(VALUE, "outputs", {"recs": {"type": "list[str]", "description": "x"}}),
        "outputs.recs.type",
        "list[string]",
    ),
    (_with(VALUE, "outputs", {"reason": {"description": "x"}}), "outputs", "reserved"),
    (_with(VALUE, "outputs", {"recs": {"type": "string"}}), "outputs.recs.description", "missing"),
    (_with(VALUE, "examples", [{"inputs": {}}]), "examples[0].output", "missing"),
]


@pytest.mark.parametrize(
    ("data", "path", "fragment"), MALFORMED, ids=[f"{i:02d}-{m[1]}" for i, m in enumerate(MALFORMED)]
)
def test_malformed_spec_gives_one_line_error(tmp_path: Path, data: dict[str, Any], path: str, fragment: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    err = info.value
    assert err.file == str(f)
    assert err.path == path, str(err)
    assert fragment in err.message, str(err)
    assert "\n" not in str(err)
    assert str(err).startswith(f"{f}: {path}: ")


def test_at_least_thirty_malformed_cases() -> None:
    assert len(MALFORMED) >= 30


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("name: x\n  bad: [", "line", "YAML syntax error"),
        ("", "", "the file is empty"),
        ("- 1\n- 2\n", "[0]", "must be a mapping"),
        ("just a string", "", "must be a mapping"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, path: str, fragment: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    assert info.value.path.startswith(path)
    assert fragment in info.value.message


def test_list_file_names_the_spec_index(tmp_path: Path) -> None:
    f = tmp_path / "two.yaml"
    f.write_text(yaml.safe_dump([VALUE, _with(CATEG, "steps", [])]))
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    assert info.value.path == "[1].steps"
    f.write_text(yaml.safe_dump({"specs": [VALUE, VALUE]}))
    with pytest.raises(SpecError, match="two specs named 'coherence'"):
        load_spec_file(f)


def test_shorthands_normalise_to_one_canonical_form() -> None:
    short = parse_spec(VALUE)
    long = parse_spec(
        _with(
            _with(VALUE, "inputs", {"question": {"required": True}, "answer": {"required": True}}),
            "scale.ranges",
            [
                {"min": 1, "max": 2, "description": "poor"},
                {"min": 3, "max": 3, "description": "fair"},
                {"min": 4, "max": 5, "description": "good"},
            ],
        )
    )
    assert short == long
    assert short.hash == long.hash
    assert isinstance(short.scale, ValueScale)
    assert [r.text for r in short.scale.ranges] == ["1-2", "3", "4-5"]


def test_hash_ignores_judge_defaults_and_key_order_but_not_content() -> None:
    a = parse_spec(VALUE)
    b = parse_spec(dict(reversed(list(_with(VALUE, "judge", {"model": "openai:gpt-4o"}).items()))))
    c = parse_spec(_with(VALUE, "steps", ["Read the answer.", "Rate it carefully."]))
    assert a.hash == b.hash
    assert a.hash != c.hash


def test_categorical_scores_and_aggregates() -> None:
    s = parse_spec(
        _with(
            CATEG,
            "scale",
            {"kind": "categorical", "ordered": True, "labels": {"yes": "y", "maybe": "m", "no": "n"}},
        )
    )
    assert isinstance(s.scale, CategoricalScale)
    assert s.scale.scores() == {"yes": 1.0, "maybe": 0.5, "no": 0.0}
    assert s.aggregate == "score_mean"
    explicit = parse_spec(
        _with(
            CATEG,
            "scale.labels",
            [
                {"name": "yes", "description": "y", "score": 1},
                {"name": "maybe", "description": "m", "score": 0.5},
                {"name": "no", "description": "n", "score": 0},
            ],
        )
    )
    assert explicit.aggregate == "score_mean"
    unscored = parse_spec(CATEG)
    assert unscored.aggregate == "share"
    assert unscored.positive_labels == ["yes"]


def test_bundled_specs_load_validate_against_json_schema_and_resolve_dependencies() -> None:
    schema = spec_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    library = bundled_specs()
    assert {
        "answer_alignment",
        "answer_quality",
        "chunk_evaluation",
        "triple_evaluation",
        "answer_completeness",
    } <= set(library)
    for path in set(library.values()):
        jsonschema.validate(yaml.safe_load(Path(path).read_text()), schema)
    specs = resolve_specs(["answer_completeness"])
    assert [s.name for s in specs][-1] == "answer_completeness"
    levels = dependency_levels(specs)
    assert {s.name for s in levels[0]} == {"chunk_evaluation", "triple_evaluation"}
    assert [s.name for s in levels[1]] == ["answer_completeness"]
    # what a named metric needs, transitively, and nothing that merely sits beside it
    library_specs = resolve_specs(["answer_completeness", "answer_alignment"])
    needed = [s.name for s in with_dependencies(["answer_completeness"], library_specs)]
    assert needed[-1] == "answer_completeness" and "answer_alignment" not in needed
    assert set(needed) == {"chunk_evaluation", "triple_evaluation", "answer_completeness"}


def test_the_conversation_specs_validate_and_say_what_they_judge() -> None:
    """The shipped conversation metrics: turn relevance and knowledge retention per assistant turn (aggregated
    as a share of the turns), task completion per conversation; every one reads the conversation, validates
    against the JSON Schema and lints clean."""
    from greval.quality.lint import lint_file

    schema = spec_json_schema()
    assert schema["$defs"]["judge__EachTarget"]["properties"]["each"]["enum"] == ["chunks", "triples", "turns", "steps"]
    library = bundled_specs()
    specs = {s.name: s for s in resolve_specs(["turn_relevance", "knowledge_retention", "task_completion"])}
    for name, spec in specs.items():
        jsonschema.validate(yaml.safe_load(Path(library[name]).read_text()), schema)
        assert lint_file(library[name]) == [], name
        assert spec.required_inputs() == ["conversation"]
        assert isinstance(spec.scale, CategoricalScale) and len(spec.steps) >= 4
    assert specs["turn_relevance"].each == specs["knowledge_retention"].each == "turns"
    assert specs["turn_relevance"].aggregate == "share" and specs["turn_relevance"].positive_labels == ["Relevant"]
    assert specs["knowledge_retention"].positive_labels == ["Retained", "Not applicable"]
    assert specs["task_completion"].each is None and list(specs["task_completion"].inputs) == ["conversation", "task"]


def test_json_schema_rejects_what_pydantic_rejects() -> None:
    schema = spec_json_schema()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(_with(VALUE, "stpes", ["x"]), schema)
    jsonschema.validate(VALUE, schema)
    jsonschema.validate([VALUE, CATEG], schema)


def test_dependency_errors(tmp_path: Path) -> None:
    a = _with(VALUE, "depends_on", ["other"])
    f = tmp_path / "a.yaml"
    f.write_text(yaml.safe_dump(a))
    with pytest.raises(SpecError, match="'other' is neither given nor predefined"):
        resolve_specs([str(f)])
    b = _with(_with(VALUE, "name", "other"), "depends_on", ["coherence"])
    f.write_text(yaml.safe_dump([a | {"depends_on": ["other"]}, b]))
    with pytest.raises(SpecError, match="dependency cycle"):
        resolve_specs([str(f)])
    with pytest.raises(SpecError, match="did you mean 'answer_alignment'"):
        resolve_specs(["answer_alignmnt"])


def test_cli_validate_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(_with(VALUE, "scale.ranges", {"1-2": "a", "4-5": "c"})))
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(VALUE))
    res = subprocess.run(
        [sys.executable, "-m", "greval", "spec", "validate", str(good), str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    assert f"ok {good}: coherence" in res.stdout
    errors = [line for line in res.stderr.splitlines() if line.strip()]
    assert errors == [f"error: {bad}: scale.ranges: 3 not covered by any range"]


def test_cli_run_with_bad_spec_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "name: x\ndescription: d\nsteps: [a]\ninputs: [answer]\nscale: {kind: value, min: 1, max: 3, "
        "ranges: {'1': a, '2': b}}\n"
    )
    data = tmp_path / "d.jsonl"
    data.write_text('{"answer": "a"}\n')
    res = CliRunner().invoke(main, ["run", str(data), "-s", str(bad), "--store", str(tmp_path / "s.sqlite")])
    assert res.exit_code == 2
    assert "scale.ranges: 3 not covered by any range" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_cli_schema_and_list(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    res = CliRunner().invoke(main, ["spec", "schema", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["$defs"]["JudgeSpec"]["properties"]["steps"]
    res = CliRunner().invoke(main, ["spec", "list"])
    assert res.exit_code == 0
    assert "answer_completeness" in res.output


def test_specs_only_declare_they_import_no_judge_and_no_llm() -> None:
    """Issue 30: which evaluator runs a kind is greval.judge.evaluators' table; greval/spec/ imports nothing from
    greval.judge or greval.llm, not even for type hints (the verdict schema is greval.spec.verdict)."""
    root = Path(__file__).resolve().parents[1] / "greval" / "spec"
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith(("greval.judge", "greval.llm"))]
    assert found == []


def test_greval_exports_the_type_load_spec_returns(tmp_path: Path) -> None:
    """Issue 30: ``greval.load_spec`` returns a ``BaseSpec``, which ``greval.BaseSpec`` names (it raised
    AttributeError)."""
    import greval
    from greval.spec import BaseSpec

    path = tmp_path / "m.yaml"
    path.write_text("kind: computed\nname: m\ndescription: d\nmetric: bleu\n", encoding="utf-8")
    assert greval.BaseSpec is BaseSpec and isinstance(greval.load_spec(path), greval.BaseSpec)
    assert "BaseSpec" in greval.__all__ and "BaseSpec" in dir(greval)

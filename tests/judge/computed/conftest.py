"""What the computed metrics' tests share: a spec of one metric, judging a record, its record score, and the
texts, chunks, claims and tables of the hand-worked examples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from greval.dataset.records import Record
from greval.judge.computed import ComputedEvaluator
from greval.spec import load_spec_file, parse_spec
from greval.spec.computed import ComputedSpec, TripleSpec
from greval.types import JudgeResult

PRED = "The quick brown foxes were jumping over the lazy dogs near the river bank."

REF = "A quick brown fox jumps over the lazy dog by the river."

REF2 = "Quick brown foxes jumped over lazy dogs near the bank of the river."


def spec(metric: str, params: dict[str, Any] | None = None, name: str = "m") -> ComputedSpec:
    data: dict[str, Any] = {"name": name, "kind": "computed", "description": "d", "metric": metric}
    if params is not None:
        data["params"] = params
    s = parse_spec(data)
    assert isinstance(s, ComputedSpec)
    return s


def computed_judge(s: ComputedSpec, data: dict[str, Any]) -> JudgeResult:
    return ComputedEvaluator(s).judge(Record.from_mapping(data))


def computed_score(res: JudgeResult) -> float | None:
    assert res.ok, res
    top = [v for v in res.verdicts if v.item_id == ""]
    assert len(top) == 1 and res.verdicts[0].item_id == ""  # the record verdict comes first
    return top[0].score


def write(tmp_path: Path, body: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    return p


SPAN_CLAIMS: list[Any] = [
    {"text": "Aspirin lowers fever.", "span": {"chunk_id": "c1", "start": 100, "end": 122}},
    {"text": "The trial enrolled 40 adults. [Data: Sources (7)]"},  # human_readable_id 7: the whole chunk c2
    {"text": "It thins the blood", "source": "c1:123-147"},  # written span syntax in a source key
    {"text": "Dosage was 2 g", "source": "c9"},  # unknown id: unresolved, no score
    {"text": "No source here"},  # cites nothing: no score
    {"text": "Out of range", "span": {"chunk_id": "c1", "start": 140, "end": 160}},  # past the chunk's end
    {"text": "Aspirin thins blood", "chunk_ids": ["c1", "c404"]},  # c1 resolves (whole chunk), c404 does not
]

# Issue 16's examples (spans, citation density, field_stats, units): every expected value in the tests that read
# them is worked out by hand (token sets written out, words counted, cosines via numpy on the model's own
# embeddings), not by calling greval's helpers.
SPAN_CHUNKS: list[dict[str, Any]] = [
    # document offsets 100-147: a span's start / end are document offsets, so c1:100-122 is text[0:22]
    {"id": "c1", "text": "Aspirin reduces fever. It also thins the blood.", "start_char": 100, "end_char": 147},
    {"id": "c2", "human_readable_id": 7, "text": "The trial enrolled 40 adults."},
]

TRIPLES = [
    ["alice", "Works_With", "bob"],  # pair and relation
    ["  Bob ", "likes", "CAROL"],  # pair only
    ["dave", "reports_to", "carol"],  # reversed pair
    ["eve", "knows", "bob"],  # absent
]

ANSWER = (
    "The lungs are clear [Data: Sources (1, 2)]. "  # 2 valid
    "No effusion is seen (chunk_5:200-250). "  # valid: inside 100-300
    "The impression is normal (IMPRESSION section, chunk_11:4648-5547). "  # valid: section and bounds
    "There is mild cardiomegaly (FINDINGS section, chunk_11:4700-4800). "  # section mismatch
    "Follow-up is advised [Data: Reports (9)]. "  # unknown id
    "The spine is unremarkable chunk_5:250-200. "  # start >= end
    "A long span chunk_5:250-400. "  # out of bounds
    "The note says so [notes]. "  # valid (bracket id)
    "Nothing cites this sentence.\n"
    "## Heading is not a claim\n"
    "Last line without a source."
)

CHUNKS = [
    {"id": "1", "text": "Source one."},
    {"id": "2", "text": "Source two."},
    {"id": "chunk_5", "text": "x" * 200, "section_title": "FINDINGS", "start_char": 100, "end_char": 300},
    {
        "id": "chunk_11",
        "text": "y" * 899,
        "metadata": {"section_title": "IMPRESSION", "start_char": 4648, "end_char": 5547},
    },
    {"id": "notes", "text": "0123456789"},
]


def triple_spec(tmp_path: Path, params: str = "") -> TripleSpec:
    (tmp_path / "tables").mkdir(exist_ok=True)
    (tmp_path / "tables" / "rel.csv").write_text(TABLE, encoding="utf-8")
    f = write(
        tmp_path,
        f"name: kg\nkind: computed\ndescription: d\nmetric: triple_validity\n"
        f"params: {{table: tables/rel.csv{params}}}\n",
    )
    (s,) = load_spec_file(f)
    assert isinstance(s, TripleSpec)
    return s


DENSITY_ANSWER = (
    "Aspirin reduces fever [Data: Sources (1)]. It thins the blood [c9]. Doctors use it daily [c1]. Nobody knows why."
)

DENSITY_CHUNKS = [{"id": "1", "text": "Aspirin reduces fever."}, {"id": "c1", "text": "Doctors use aspirin daily."}]

# The worked example of docs/computed.md (fact_span_consistency): document offsets, as the clinical notes cite.
FACT_CHUNKS: list[dict[str, Any]] = [
    {"id": "chunk_5", "text": "n" * 400, "start_char": 1000, "end_char": 1400},
    {"id": "chunk_7", "text": "m" * 100, "start_char": 2000, "end_char": 2100},
]

FACT_CLAIMS: list[dict[str, Any]] = [
    {"text": "Patient has diabetes", "fact": "diabetes", "span": {"chunk_id": "chunk_5", "start": 1200, "end": 1250}},
    {"text": "Diabetes diagnosis", "fact": "Diabetes", "source": "chunk_5:1195-1255"},
    {"text": "Type 2 diabetes since 2015", "fact": " diabetes ", "spans": ["chunk_5:1230-1300"]},
    {"text": "Takes metformin daily", "fact": "metformin", "source": "chunk_7"},  # the whole chunk: 2000-2100
    {"text": "Metformin 500 mg twice a day", "fact": "metformin", "chunk_id": "chunk_7", "start": 2040, "end": 2060},
    {"text": "Allergic to penicillin", "fact": "allergy", "source": "chunk_5:1300-1320"},
    {"text": "Penicillin causes a rash", "fact": "allergy", "source": "chunk_99"},  # does not resolve
    {"text": "Blood pressure is normal", "source": "chunk_5:1200-1250"},  # no fact named
]

TABLE = (
    "source,target,relation,description\n"
    "ALICE,BOB,works_with,Alice works with Bob\nBob,Carol,knows,x\nCAROL,DAVE,manages,y\n"
)

"""Stores for the report and explorer tests: one per metric kind, judged by the real test LLM server.

``kinds_store`` judges 24 GraphRAG-QA-style records (two methods × three films × four questions, three chunks
each) with one metric of each kind a report adapts to, and stores human labels for three of them:

- ``categorical``: the quick start's ``attribution`` (two labels without scores: described by label shares);
- ``scored``: ``graphrag_qa_correct`` (labels with scores 1 / 0);
- ``value``: ``graphrag_qa_score`` (a 0–10 value scale);
- ``items``: ``chunk_evaluation`` (one verdict per chunk, ordered labels);
- ``computed``: ``rouge_l`` (no judge).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.paths import examples_dir
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import load_spec_file, resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

#: metric kind -> the metric of that kind in the store
KINDS = {
    "categorical": "attribution",
    "scored": "graphrag_qa_correct",
    "value": "graphrag_qa_score",
    "items": "chunk_evaluation",
    "computed": "rouge_l",
}
FILMS = ("Alien", "Heat", "Up")
#: A record whose text is markup: every page must show it as text.
HOSTILE = "<script>alert(1)</script>"


def kinds_records() -> list[dict[str, Any]]:
    """Two methods × three films × four questions; record ``global-Alien-0``'s answer is :data:`HOSTILE`."""
    rows: list[dict[str, Any]] = []
    for m, method in enumerate(("global", "local")):
        for film in FILMS:
            for q in range(4):
                i = len(rows)
                rows.append(
                    {
                        "id": f"{method}-{film}-{q}",
                        "question": f"Who directed part {q} of {film}?",
                        "expected_answer": f"act {q % 3 + 1} of {film}",
                        "answer": f"{'act' if (i + m) % 3 else 'maybe'} {q % 3 + 1} of {film}, {method}",
                        "chunks": [{"id": f"k{k}", "text": f"{film} fact {k} for q{q}"} for k in range(3)],
                        "system": method,
                        "film": film,
                        "latency": 1.0 + m + q / 10,
                    }
                )
    rows[0]["answer"] = HOSTILE
    return rows


def _labels(st: Store, spec: str, pick: Sequence[str] | None = None) -> None:
    """Human labels for every other verdict of ``spec`` (the judge's label, changed on every fifth): two
    annotators on the first four, a comment on the first."""
    rows = st.query(
        "SELECT record_hash, record_id, item_id, label FROM verdicts WHERE spec_name=? AND status='ok' "
        "ORDER BY record_id, item_id",
        (spec,),
    )
    labels = list(pick or sorted({r["label"] for r in rows}))
    out = []
    for i, r in enumerate(rows):
        if i % 2:
            continue
        other = labels[(labels.index(r["label"]) + 1) % len(labels)] if r["label"] in labels else labels[0]
        label = other if i % 5 == 0 else r["label"]
        for who in ("ann1", "ann2") if i < 8 else ("ann1",):
            out.append(
                {
                    "spec_name": spec,
                    "record_hash": r["record_hash"],
                    "item_id": r["item_id"],
                    "annotator": who,
                    "record_id": r["record_id"],
                    "label": label,
                    "comment": f"{who} checked {HOSTILE}" if i == 0 else None,
                    "status": "submitted",
                    "source": "import",
                }
            )
    st.put_human_labels(out)


def kinds_store(llm: OpenAIServer, path: Path) -> Path:
    """The store described in the module doc, at ``path``."""
    specs = [*resolve_specs([KINDS[k] for k in ("scored", "value", "items", "computed")])]
    specs += load_spec_file(examples_dir() / "begin" / "attribution.yaml")
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        recs = [Record.from_mapping(r) for r in kinds_records()]
        run(specs, recs, st, cfg, options=RunOptions(retry=RetryPolicy(base_delay=0.01)))
        _labels(st, "attribution", ["Fully attributable", "Not fully attributable"])
        _labels(st, "graphrag_qa_correct", ["correct", "incorrect"])
        _labels(st, "chunk_evaluation", ["Relevant", "Indirectly relevant", "Irrelevant"])
    return path

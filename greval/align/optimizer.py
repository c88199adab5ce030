"""The optimizer's two questions, as greval judge specs: a rewrite of the spec, and a reason for an example.

Asking them as judge specs means their answers go through the run path like any verdict: structured output,
retries, the store (content-addressed: the same question is paid for once, a re-run and a resumed run pay
nothing), calls and tokens counted. Their verdicts are stored under the metrics ``greval_align_rewrite`` and
``greval_align_reason``; a question's record holds everything the optimizer was shown.
"""

from __future__ import annotations

from typing import Any

from greval.align.ports import Edits, ReasonRequest, RewriteRequest
from greval.dataset.records import Record
from greval.spec import Spec, parse_spec

REWRITE = "greval_align_rewrite"
REASON = "greval_align_reason"

_REWRITE_SPEC: dict[str, Any] = {
    "name": REWRITE,
    "description": (
        "Propose edits to the rubric (a metric spec) that an LLM judge follows, so that the judge's verdicts agree "
        "with people's labels. Edits state general rules that fit the metric's meaning and would have led the judge "
        "to people's answers on the disagreements shown."
    ),
    "instructions": (
        "Keep the metric's meaning, its labels or values and their order. Never quote or name a record. Leave a "
        "field empty to keep it as it is. Write steps as short imperative sentences; when you change the steps, "
        "give the complete new list."
    ),
    "steps": [
        "Read the spec: what it measures, its steps, and what each label or range means.",
        "Study the confusion table: which of people's answers the judge misses, and what it answers instead.",
        "Read each disagreement: the record, the judge's reason, people's answers and comments. Find what the "
        "judge overlooked or misread.",
        "Formulate general rules that would have led to people's answers without breaking the agreements.",
        "Label your answer 'edit' and fill the fields you change, or 'keep' and leave every field empty.",
    ],
    "inputs": {
        "spec": {"required": True, "description": "the spec the judge follows, as YAML"},
        "confusion": {"required": True, "description": "people's answers (rows) against the judge's (columns)"},
        "disagreements": {"required": True, "description": "units where the judge and people disagree"},
        "task": {"required": True},
    },
    "scale": {
        "kind": "categorical",
        "labels": {"edit": "You propose at least one edit.", "keep": "The spec needs no edit: every field is empty."},
    },
    "outputs": {
        "description": {"type": "string", "description": "The metric's new description, or empty to keep it."},
        "instructions": {"type": "string", "description": "New extra guidance for the judge, or empty to keep it."},
        "steps": {"type": "list[string]", "description": "The complete new evaluation steps, or empty to keep them."},
        "scale_descriptions": {
            "type": "list[string]",
            "description": "New descriptions of the labels (or value ranges) in the order the task lists them, or "
            "empty to keep them.",
        },
    },
}

_REASON_SPEC: dict[str, Any] = {
    "name": REASON,
    "description": (
        "Write the short reason a careful judge would give for the answer people chose on a record, as a worked "
        "example for the judge."
    ),
    "steps": [
        "Read the record.",
        "Read the answer people chose and what that answer means.",
        "Explain in two or three sentences, from the record's own content, why that answer is right.",
    ],
    "inputs": {
        "record": {"required": True, "description": "the record, as the judge reads it"},
        "answer": {"required": True, "description": "the answer people chose"},
        "meaning": {"required": False, "description": "what that answer means in the spec"},
    },
    "scale": {
        "kind": "categorical",
        "labels": {
            "clear": "The record shows why people's answer is right.",
            "unclear": "The record does not show it clearly; the explanation is your best reading.",
        },
    },
    "outputs": {
        "explanation": {
            "type": "string",
            "description": "Two or three sentences explaining why people's answer is right for this record.",
        }
    },
}


def _spec(data: dict[str, Any]) -> Spec:
    spec = parse_spec(data, "greval.align.optimizer")
    assert isinstance(spec, Spec)
    return spec


def rewrite_spec() -> Spec:
    return _spec(_REWRITE_SPEC)


def reason_spec() -> Spec:
    return _spec(_REASON_SPEC)


def rewrite_record(request: RewriteRequest) -> Record:
    """The rewrite question as a record (its content hash is the question's identity in the store)."""
    parts = []
    for i, d in enumerate(request.disagreements, 1):
        reason = f"\nThe judge's reason: {d.judge_reason}" if d.judge_reason else ""
        parts.append(f"### Disagreement {i}\n{d.record}\n\nThe judge answered: {d.judge}{reason}\nPeople: {d.people}")
    task = (
        f"Proposal {request.proposal + 1} of {request.proposals}: propose the edits you find most likely to help "
        f"(other proposals are asked separately). The scale, in order: {'; '.join(request.scale_items)}."
    )
    data = {
        "spec": request.spec_yaml,
        "confusion": request.confusion,
        "disagreements": "\n\n".join(parts),
        "task": task,
    }
    return Record.from_mapping(data)


def reason_record(request: ReasonRequest) -> Record:
    return Record.from_mapping({"record": request.record, "answer": request.answer, "meaning": request.meaning})


def edits_from(outputs: dict[str, Any], label: str | None) -> Edits | None:
    """The optimizer's answer as edits (None when it chose to keep the spec)."""
    if label != "edit":
        return None

    def texts(key: str) -> tuple[str, ...]:
        value = outputs.get(key) or []
        return tuple(str(v) for v in value) if isinstance(value, list) else ()

    return Edits(
        description=str(outputs.get("description") or ""),
        instructions=str(outputs.get("instructions") or ""),
        steps=texts("steps"),
        scale=texts("scale_descriptions"),
    )


__all__ = ["REASON", "REWRITE", "edits_from", "reason_record", "reason_spec", "rewrite_record", "rewrite_spec"]

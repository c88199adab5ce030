"""From a metric spec to an Argilla dataset: the annotator answers the judge's own question.

A categorical scale becomes a ``LabelQuestion`` with the same labels, a value scale a ``RatingQuestion``
with the same integers; the spec's description, steps and described scale become the guidelines, so the
person reads what the judge read. A "many" spec (one verdict per chunk / triple / assistant turn / agent step)
becomes one Argilla record per item. A conversation is a chat field (its turns as messages, each with its id); a
trajectory a markdown field, step by step (``trajectory.py``). This module
only builds settings and record payloads; talking to the server is in ``argilla.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import argilla as rg

from greval.annotation.trajectory import step_markdown, trajectory_markdown
from greval.dataset.records import CONVERSATION, EXPECTED_TRAJECTORY, TRAJECTORY, Record, item_list
from greval.errors import UserError, option
from greval.judge.prompt import NOUNS, describe_scale, example_inputs, render_inputs, tool_call_text
from greval.spec import CategoricalScale, Spec, ValueScale

if TYPE_CHECKING:
    from greval.annotation.argilla import DatasetHandle

QUESTION = "verdict"
COMMENT = "comment"
ITEM_FIELD = "item"
REASON_FIELD = "judge_reason"
REVIEWS_FIELD = "reviews"  # adjudication datasets: every reviewer's label and comment, and the judge's verdict

#: argilla-server 2.8 limits (api/schemas/v1/questions.py, datasets.py, suggestions.py).
RATING_MIN, RATING_MAX, RATING_MAX_OPTIONS = 0, 10, 11
LABEL_MAX_LENGTH = 200
DESCRIPTION_MAX = 1000
TITLE_MAX = 500
GUIDELINES_MAX = 10000
AGENT_MAX = 200
#: argilla-server 2.8's chat field: messages per field, characters per role and per message (chat.py, records.py).
CHAT_MAX_MESSAGES, CHAT_ROLE_MAX, CHAT_MESSAGE_MAX = 500, 20, 20000
_AGENT_BAD = re.compile(r"[^a-zA-Z0-9\-_:./\s]")

#: Metadata properties — the filters reviewers use: (name, kind, visible to annotators unless --blind hides it).
#: ``record_id`` finds the record someone asks about; ``system`` compares the systems under test;
#: ``judge_verdict`` / ``judge_confidence`` review one verdict or the doubtful ones first; ``selection`` (owners
#: and admins only) one stratum of a review design. Every property costs argilla-server a validation per
#: record on each push, so values nobody filters on are not properties: see :data:`EXTRA_METADATA`.
METADATA: tuple[tuple[str, str, bool], ...] = (
    ("record_id", "terms", True),
    ("system", "terms", True),
    ("judge_verdict", "terms", False),
    ("judge_confidence", "float", False),
    ("selection", "terms", False),
)
#: Metadata values kept on every record for greval's pull and for owners / admins (``⋮ → View metadata``),
#: but not declared as properties (the dataset allows extra metadata): constant within a dataset (spec,
#: judge), or identities nobody filters by (record hash, item id, π). argilla-server neither validates nor
#: shows them to annotators. Datasets made by earlier greval versions declare them all as properties; a push
#: to such a dataset fills them the same way.
EXTRA_METADATA: tuple[str, ...] = (
    "item_id",
    "spec_name",
    "spec_hash",
    "judge",
    "judge_model",
    "inclusion_probability",
    "record_hash",
)
_JUDGE_VISIBLE = {"judge_verdict", "judge_confidence"}

_TITLES = {
    "question": "Question",
    "answer": "Answer",
    "expected_answer": "Expected answer",
    "chunks": "Retrieved chunks",
    "triples": "Knowledge-graph triples",
    "source": "Source text",
    "conversation": "Conversation",
    "trajectory": "Trajectory (what the agent did)",
    "expected_trajectory": "Reference trajectory",
}
_UNDER_REVIEW = {"chunks": "chunk", "triples": "triple", "turns": "assistant turn", "steps": "agent step"}
#: Fields shown as markdown: items under their ids, a trajectory step by step.
_MARKDOWN = ("chunks", "triples", TRAJECTORY, EXPECTED_TRAJECTORY)


class ScaleDoesNotFit(UserError):
    """A spec's scale that Argilla cannot represent as the same question."""


@dataclass(frozen=True)
class VerdictRef:
    """The judge's verdict on one unit (a record, or one chunk / triple of it), as pushed."""

    record: Record
    item_id: str
    label: str | None
    value: int | None
    confidence: float | None
    reason: str | None
    judge: str
    judge_model: str
    selection: str = "all"
    probability: float = 1.0
    extra: dict[str, Any] = field(default_factory=dict)
    #: Every record id with this content (one Argilla record stands for all of them); empty: ``record.id``.
    record_ids: tuple[str, ...] = ()

    @property
    def ids(self) -> list[str]:
        """The record ids this unit stands for, each once, in order."""
        return list(dict.fromkeys(self.record_ids)) or [self.record.id]


def argilla_id(spec_name: str, record_hash: str, item_id: str) -> str:
    """A stable Argilla record id: pushing the same unit again updates it, never duplicates it."""
    blob = f"{spec_name}\x1f{record_hash}\x1f{item_id}".encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def agent_name(judge_label: str, spec_hash: str) -> str:
    """``<judge label>/<spec hash>``: argilla-server rejects '@' (and most punctuation) in an agent."""
    clean = _AGENT_BAD.sub("_", judge_label)
    return f"{clean[: AGENT_MAX - len(spec_hash) - 1]}/{spec_hash}"


def parse_agent(agent: str | None) -> tuple[str, str] | None:
    """(judge label, spec hash) back from an agent written by :func:`agent_name`."""
    if not agent or "/" not in agent:
        return None
    label, _, spec_hash = agent.rpartition("/")
    return label, spec_hash


def _cut(text: str, limit: int, tail: str = " …") -> str:
    return text if len(text) <= limit else text[: limit - len(tail)] + tail


def _title(name: str) -> str:
    return _TITLES.get(name, name.replace("_", " ").capitalize())


def check_scale(spec: Spec) -> None:
    """Raise a one-line error when the scale cannot be the same Argilla question."""
    if isinstance(spec.scale, ValueScale):
        s = spec.scale
        n = s.max - s.min + 1
        if s.min < RATING_MIN or s.max > RATING_MAX or n > RATING_MAX_OPTIONS:
            raise ScaleDoesNotFit(
                f"spec {spec.name!r}: value scale {s.min}-{s.max} does not fit an Argilla rating question "
                f"(integers {RATING_MIN}-{RATING_MAX}); use a scale within {RATING_MIN}-{RATING_MAX} "
                "or labels"
            )
    else:
        long = [lab.name for lab in spec.scale.labels if len(lab.name) > LABEL_MAX_LENGTH]
        if long:
            raise ScaleDoesNotFit(
                f"spec {spec.name!r}: label {long[0][:40]!r}… is longer than Argilla's {LABEL_MAX_LENGTH} characters"
            )


ADJUDICATION_NOTE = (
    "## Adjudication\n"
    "Reviewers disagreed on each record here. The field *Reviews* shows every reviewer's label and comment and "
    "the judge's verdict; read them, then give the label the rules below call for. Your answer becomes the "
    "record's gold label; the reviewers' labels are kept beside it."
)


def guidelines(spec: Spec, *, blind: bool = False, adjudication: bool = False) -> str:
    """Markdown guidelines: the judge's own description, steps and scale, plus how records are laid out."""
    noun = NOUNS.get(spec.each or "", "")
    parts = [f"# {spec.name}", spec.description.strip()]
    if adjudication:
        parts.append(ADJUDICATION_NOTE)
    if spec.instructions:
        parts.append("## Instructions\n" + spec.instructions.strip())
    parts.append("## Steps\n" + "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(spec.steps, 1)))
    parts.append("## Scale\n" + describe_scale(spec))
    how = []
    if spec.each == "turns":
        how.append(
            f"Each record is one {noun} (field *Under review*, its id as in the conversation); judge only that "
            "turn, reading the conversation up to it."
        )
    elif spec.each == "steps":
        how.append(
            f"Each record is one {noun} (field *Under review*; in the trajectory it is the step marked "
            "*under review*); judge only that step, reading the trajectory up to it. Tool results are folded: "
            "open one to read it."
        )
    elif noun:
        how.append(
            f"Each record is one {noun} (field *Under review*); judge only that {noun}, "
            "using the question and answer shown with it."
        )
    if blind:
        how.append("The judge's verdict is hidden so that your answer is independent.")
    else:
        how.append(
            "The judge's verdict is pre-selected as a suggestion and its reasoning is shown; "
            "change it whenever you disagree."
        )
    how.append(f"Use *{COMMENT}* to explain a disagreement or an unclear case (optional).")
    parts.append("## How to annotate\n" + "\n".join(f"- {h}" for h in how))
    if spec.examples:  # last: what the length cut drops first
        parts.append(examples_markdown(spec))
    return _cut("\n\n".join(parts), GUIDELINES_MAX)


def examples_markdown(spec: Spec) -> str:
    """The spec's few-shot examples as the judge reads them: the inputs rendered as in its prompt, its answer."""
    out = ["## Examples (the judge's few-shot examples)"]
    for k, ex in enumerate(spec.examples, 1):
        inputs = example_inputs(ex.inputs)
        ids = [it["id"] for it in item_list(inputs, spec.each)] if spec.each else None
        shown = render_inputs(spec, inputs, None, ids).replace("```", "'''")
        answer = json.dumps(ex.output, ensure_ascii=False)
        out.append(f"### Example {k}\n\n```\n{shown}\n```\n\nAnswer: `{answer}`")
    return "\n\n".join(out)


def question_text(spec: Spec) -> tuple[str, str]:
    """The question's title (the description's first line) and description (the scale explained)."""
    title = _cut(spec.description.strip().splitlines()[0], TITLE_MAX)
    return title, _cut(describe_scale(spec), DESCRIPTION_MAX, " … (see the guidelines)")


def _question(spec: Spec, client: rg.Argilla) -> rg.LabelQuestion | rg.RatingQuestion:
    check_scale(spec)
    title, desc = question_text(spec)
    if isinstance(spec.scale, CategoricalScale):
        return rg.LabelQuestion(client=client, name=QUESTION, title=title, labels=spec.scale.names, description=desc)
    return rg.RatingQuestion(
        client=client,
        name=QUESTION,
        title=title,
        values=list(range(spec.scale.min, spec.scale.max + 1)),
        description=desc,
    )


def field_names(spec: Spec) -> list[str]:
    """The record fields shown, in order: the item under review first for many specs, then the inputs
    (question and answer always, unless the spec reads a conversation), then the judge's reasoning."""
    names = [ITEM_FIELD] if spec.each else []
    inputs = [n for n in spec.inputs if n != spec.each]
    for must in ("answer", "question") if not {CONVERSATION, TRAJECTORY} & set(spec.inputs) else ():
        if must not in inputs:
            inputs.insert(0, must)
    names += inputs
    return names


def build_settings(
    spec: Spec,
    client: rg.Argilla,
    *,
    blind: bool = False,
    annotators_per_record: int = 1,
    comment: bool = True,
    adjudication: bool = False,
) -> rg.Settings:
    """Argilla settings for a spec: same question, same options, the scale explained. (The SDK binds every
    settings object to a client at construction; without one it would build a default from the env.)"""
    if annotators_per_record < 1:
        raise UserError(f"{option('annotators_per_record')} must be at least 1")
    fields: list[rg.TextField | rg.ChatField] = []
    for name in field_names(spec):
        desc = spec.inputs[name].description if name in spec.inputs else None
        if name == ITEM_FIELD:
            title = "Under review: " + _UNDER_REVIEW[spec.each or "chunks"]
            fields.append(rg.TextField(client=client, name=name, title=title, use_markdown=True, required=False))
        elif name == CONVERSATION:
            fields.append(
                rg.ChatField(  # argilla 2.8 names its client argument `_client` here alone
                    _client=client,
                    name=name,
                    title=_title(name),
                    use_markdown=True,
                    required=False,
                    description=_cut(desc, DESCRIPTION_MAX) if desc else None,
                )
            )
        else:
            markdown = name in _MARKDOWN
            fields.append(
                rg.TextField(
                    client=client,
                    name=name,
                    title=_title(name),
                    use_markdown=markdown,
                    required=False,
                    description=_cut(desc, DESCRIPTION_MAX) if desc else None,
                )
            )
    if not blind:
        fields.append(
            rg.TextField(client=client, name=REASON_FIELD, title="Judge's reasoning", use_markdown=True, required=False)
        )
    if adjudication:
        fields.insert(
            0, rg.TextField(client=client, name=REVIEWS_FIELD, title="Reviews", use_markdown=True, required=False)
        )
    questions: list[Any] = [_question(spec, client)]
    if comment:
        questions.append(
            rg.TextQuestion(
                client=client,
                name=COMMENT,
                title="Comment (optional)",
                required=False,
                description="Why you disagree with the judge, or what is unclear.",
            )
        )
    metadata: list[Any] = []
    for name, kind, visible in METADATA:
        shown = visible or (name in _JUDGE_VISIBLE and not blind)
        if kind == "float":
            metadata.append(rg.FloatMetadataProperty(client=client, name=name, visible_for_annotators=shown))
        else:
            metadata.append(rg.TermsMetadataProperty(client=client, name=name, visible_for_annotators=shown))
    return rg.Settings(
        guidelines=guidelines(spec, blind=blind, adjudication=adjudication),
        fields=fields,
        questions=questions,
        metadata=metadata,
        distribution=rg.TaskDistribution(min_submitted=annotators_per_record),
        allow_extra_metadata=True,  # EXTRA_METADATA; argilla-server shows undeclared keys to owners and admins only
    )


# ------------------------------------------------------------------------------------------ rendering
def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_chunks(chunks: Sequence[Mapping[str, Any]]) -> str:
    """Chunks as markdown: each under its bold id, separated by rules."""
    return "\n\n---\n\n".join(f"**[{c.get('id', '')}]** {c.get('text', '')}" for c in chunks)


def render_triples(triples: Sequence[Mapping[str, Any]]) -> str:
    """Triples as a markdown table (id, subject, predicate, object)."""
    rows = ["| id | subject | predicate | object |", "| --- | --- | --- | --- |"]
    rows += [
        "| " + " | ".join(_md_cell(str(t.get(k, ""))) for k in ("id", "subject", "predicate", "object")) + " |"
        for t in triples
    ]
    return "\n".join(rows)


def turn_markdown(turn: Mapping[str, Any]) -> str:
    """A turn's text with its id first (as the judge cites it) and its tool calls, in markdown."""
    lines = [f"**[{turn.get('id', '')}]** {turn.get('content', '')}".rstrip()]
    if turn.get("role") == "tool" and (turn.get("name") or turn.get("tool_call_id")):
        lines[0] += " *(" + ", ".join(str(turn[k]) for k in ("name", "tool_call_id") if turn.get(k)) + ")*"
    lines += [f"→ tool call `{tool_call_text(c)}`" for c in turn.get("tool_calls") or []]
    return "\n\n".join(lines)


def chat_messages(conversation: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """A conversation as an Argilla chat field: ``{role, content}`` messages within argilla-server's limits
    (a longer message is cut with a mark; past 500 messages the earliest are left out, and the first
    message says how many)."""
    messages = [
        {
            "role": _cut(str(t.get("role") or "unknown"), CHAT_ROLE_MAX, ""),
            "content": _cut(turn_markdown(t), CHAT_MESSAGE_MAX),
        }
        for t in conversation
    ]
    if len(messages) > CHAT_MAX_MESSAGES:
        left_out = len(messages) - CHAT_MAX_MESSAGES + 1
        note = {"role": "system", "content": f"({left_out} earlier turns not shown: Argilla shows at most 500)"}
        messages = [note, *messages[left_out:]]
    return messages


def render_item(field_name: str, item: Mapping[str, Any], number: int | None = None) -> str:
    """The chunk, triple, assistant turn or agent step (its ``number`` in the conversation / trajectory) under
    review, in markdown."""
    if field_name == "turns":
        where = f"turn {number}, " if number is not None else ""
        return f"**Assistant turn {item.get('id', '')}** ({where}{item.get('role', '')})\n\n" + turn_markdown(item)
    if field_name == "steps":  # numbered as in the trajectory; the field's title says it is an agent step
        return step_markdown(item, number or 0)
    if field_name == "triples":
        return (
            f"**Triple {item.get('id', '')}**\n\n**{item.get('subject', '')}**"
            f" — *{item.get('predicate', '')}*"
            f" — **{item.get('object', '')}**"
        )
    return f"**Chunk {item.get('id', '')}**\n\n{item.get('text', '')}"


def _under_review(spec: Spec, ref: VerdictRef) -> str:
    each = spec.each or ""
    item = next((it for it in ref.record.items(each) if str(it.get("id")) == ref.item_id), None)
    if item is None:
        return f"(item {ref.item_id} not found)"
    whole = {"turns": CONVERSATION, "steps": TRAJECTORY}.get(each)
    conv = ref.record.data.get(whole) if whole else None
    turns = conv if isinstance(conv, list) else []
    number = next((n for n, t in enumerate(turns, start=1) if t.get("id") == item.get("id")), None)
    return render_item(each, item, number)


def record_fields(spec: Spec, ref: VerdictRef, *, blind: bool, known: set[str] | None = None) -> dict[str, Any]:
    """Field values of one Argilla record (only fields the dataset has, empty ones left out): text, and a
    conversation as chat messages."""
    data = ref.record.data
    out: dict[str, Any] = {}
    for name in field_names(spec):
        value: str | list[dict[str, str]]
        if name == ITEM_FIELD and spec.each:
            value = _under_review(spec, ref)
        elif name == CONVERSATION and isinstance(data.get(name), list):
            value = chat_messages(data[name])
        elif name == "chunks" and isinstance(data.get(name), list):
            value = render_chunks(data[name])
        elif name == "triples" and isinstance(data.get(name), list):
            value = render_triples(data[name])
        elif name in (TRAJECTORY, EXPECTED_TRAJECTORY) and isinstance(data.get(name), list):
            marked = ref.item_id if spec.each == "steps" and name == TRAJECTORY else None
            value = trajectory_markdown(data[name], marked)
        else:
            raw = data.get(name)
            value = "" if raw is None else _text(raw)
        if value if isinstance(value, list) else value.strip():
            out[name] = value
    if not blind and ref.reason:
        out[REASON_FIELD] = ref.reason
    if known is not None:
        out = {k: v for k, v in out.items() if k in known}
    return out


def record_metadata(spec: Spec, ref: VerdictRef, *, known: set[str] | None = None) -> dict[str, Any]:
    """Metadata: who/what produced the verdict, and how the unit was selected. ``record_id`` is the record's
    id, or the list of every id when several records have this content (a terms property takes a list).
    ``known``: the dataset's metadata properties; other properties are left out, :data:`EXTRA_METADATA` is
    always sent (a property in older datasets, extra metadata in newer ones)."""
    system = ref.record.data.get("system")
    ids = ref.ids
    meta: dict[str, Any] = {
        "record_id": ids[0] if len(ids) == 1 else ids,
        "item_id": ref.item_id or "-",
        "spec_name": spec.name,
        "spec_hash": spec.hash,
        "judge": ref.judge,
        "judge_model": ref.judge_model,
        "selection": ref.selection,
        "inclusion_probability": float(ref.probability),
        "record_hash": ref.record.hash,
    }
    if system is not None and str(system).strip():
        meta["system"] = str(system)
    verdict = ref.label if ref.label is not None else (str(ref.value) if ref.value is not None else None)
    if verdict is not None:
        meta["judge_verdict"] = verdict
    if ref.confidence is not None:
        meta["judge_confidence"] = float(ref.confidence)
    if known is not None:
        meta = {k: v for k, v in meta.items() if k in known or k in EXTRA_METADATA}
    return meta


def suggestion_value(spec: Spec, ref: VerdictRef) -> str | int | None:
    """The judge's verdict as an answer to the Argilla question (None when it is not on the scale)."""
    if isinstance(spec.scale, CategoricalScale):
        return ref.label if ref.label in spec.scale.names else None
    if ref.value is None or not spec.scale.min <= ref.value <= spec.scale.max:
        return None
    return int(ref.value)


def record_payload(
    spec: Spec,
    ref: VerdictRef,
    handle: DatasetHandle,
    *,
    blind: bool,
    responses: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One item of a bulk upsert: stable external id, fields, metadata, the judge's suggestion."""
    item: dict[str, Any] = {
        "external_id": argilla_id(spec.name, ref.record.hash, ref.item_id),
        "fields": record_fields(spec, ref, blind=blind, known=handle.fields),
        "metadata": record_metadata(spec, ref, known=handle.metadata),
    }
    value = suggestion_value(spec, ref) if not blind else None
    if value is not None:
        sug: dict[str, Any] = {
            "question_id": handle.question_id,
            "value": value,
            "type": "model",
            "agent": agent_name(ref.judge, spec.hash),
        }
        if ref.confidence is not None and 0.0 <= ref.confidence <= 1.0:
            sug["score"] = float(ref.confidence)
        item["suggestions"] = [sug]
    if responses:
        item["responses"] = list(responses)
    return item

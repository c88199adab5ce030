"""A spec's record as a typed pydantic model: what a compiled metric (and ``greval serve``'s routes) declare as
their input, so LangServe's ``/input_schema``, OpenAPI and the playground show the fields a metric reads.

The model is a schema, not a second normaliser: a record that validates is handed to
:meth:`greval.dataset.records.Record.from_mapping` as it is (fields left unset are dropped, so they do not change
the record's content hash), which accepts every shape ``greval run`` accepts. Chunks are strings or ``{id, text}``
objects, triples ``[subject, predicate, object]`` or ``{id, subject, predicate, object}``, a conversation a list of
``{role, content}`` turns. Other fields a record carries (a system name, metadata) are allowed and kept: they are
part of the record's content, as in a dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import SkipJsonSchema

from greval.spec import BaseSpec


def _no_default(schema: dict[str, Any]) -> None:
    """An optional field's schema without ``"default": null`` (the playground would fill the form with it)."""
    schema.pop("default", None)


def _optional(description: str) -> Any:
    return Field(None, description=description, json_schema_extra=_no_default)


#: None, accepted but left out of the JSON schema (an expression, so mypy sees pydantic's runtime form once).
_NULL: Any = SkipJsonSchema[None]  # type: ignore[misc]

_ALLOW = ConfigDict(extra="allow")
_FORBID = ConfigDict(extra="forbid")

#: The field of a closed record model (``extra="forbid"``) that carries the record's other fields.
EXTRA_FIELDS = "extra_fields"


class ChunkIn(BaseModel):
    """One retrieved chunk (ids default to c1, c2, … in order)."""

    model_config = _ALLOW

    id: str | SkipJsonSchema[None] = _optional("The chunk's id, unique in the record [c1, c2, … by position].")
    text: str = Field(description="The chunk's text.")


class TripleIn(BaseModel):
    """One knowledge-graph triple (ids default to t1, t2, … in order)."""

    model_config = _ALLOW

    id: str | SkipJsonSchema[None] = _optional("The triple's id, unique in the record [t1, t2, … by position].")
    subject: str
    predicate: str
    object: str


class TurnIn(BaseModel):
    """One turn of a conversation (ids default to t1, t2, … by position; tool calls are kept)."""

    model_config = _ALLOW

    id: str | SkipJsonSchema[None] = _optional("The turn's id, unique in the record [t1, t2, … by position].")
    role: str | SkipJsonSchema[None] = _optional("user, assistant, system or tool (or given as `type` / `from`).")
    content: str | SkipJsonSchema[None] = _optional("The turn's text (may be empty on a turn that calls tools).")
    tool_calls: list[dict[str, Any]] | SkipJsonSchema[None] = _optional(
        "The turn's tool calls: OpenAI's {id, function: {name, arguments}} or {name, arguments}."
    )
    tool_call_id: str | SkipJsonSchema[None] = _optional("A tool turn: the id of the call it answers.")


TripleList = Annotated[list[str], Field(min_length=3, max_length=3)]

#: Field name -> its type, for the fields whose shape greval normalises; every other input is text.
#: (Optional fields are left out of the JSON schema's types as null: LangServe's playground cannot draw
#: ``anyOf [..., null]``; None is still accepted, and means "not given".)
_SHAPES: dict[str, Any] = {
    "chunks": list[str | ChunkIn],
    "triples": list[TripleIn | TripleList],
    "conversation": list[TurnIn],
}


def declared_inputs(spec: BaseSpec) -> dict[str, bool]:
    """The record fields a spec reads -> whether each is required (judge and pipeline specs declare them;
    computed ones name their fields in their parameters)."""
    inputs = getattr(spec, "inputs", None)
    if isinstance(inputs, dict):
        return {name: bool(getattr(i, "required", True)) for name, i in inputs.items()}
    return dict.fromkeys(spec.required_inputs(), True)


def input_model(spec: BaseSpec, dependencies: Sequence[BaseSpec] = (), closed: bool = False) -> type[BaseModel]:
    """The pydantic model of a record ``spec`` judges: its declared inputs (and those of the metrics it depends
    on, which are judged first), required where any of them requires the field; an optional ``id``; any other
    field allowed. Title: ``<SpecName>Input``.

    ``closed``: unknown fields are refused, and the record's other fields go in ``extra_fields`` (an object).
    LangServe hands a runnable only the fields a model declares, so a served route needs this form: a field
    dropped silently would change the record's content hash."""
    fields: dict[str, bool] = {}
    for s in [*dependencies, spec]:
        for name, required in declared_inputs(s).items():
            fields[name] = fields.get(name, False) or required
    title = "".join(w.capitalize() for w in spec.name.split("_")) + "Input"
    definitions: dict[str, Any] = {
        "id": (str | _NULL, _optional("The record's id [a hash of its content].")),
    }
    for name, required in fields.items():
        kind = _SHAPES.get(name, str)
        if required:
            definitions[name] = (kind, Field(description=f"Read by {spec.name} (required)."))
        else:
            definitions[name] = (
                kind | _NULL,
                _optional(f"Read by {spec.name} (optional)."),
            )
    if closed:
        definitions[EXTRA_FIELDS] = (
            dict[str, Any] | _NULL,
            _optional("The record's other fields (part of its content, as in a dataset row)."),
        )
    config = _FORBID if closed else _ALLOW
    model: type[BaseModel] = create_model(title, __config__=config, __doc__=spec.description, **definitions)
    return model


def record_fields(value: Any) -> dict[str, Any]:
    """A validated input (model or mapping) back to plain record fields, unset ones dropped: the content hash
    is then the one the same row gets in a dataset file."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json", exclude_none=True)
    if not isinstance(value, dict):
        raise TypeError("a record must be an object of fields")
    fields = {k: _plain(v) for k, v in value.items() if v is not None and k != EXTRA_FIELDS}
    extra = value.get(EXTRA_FIELDS)
    if isinstance(extra, dict):
        for k, v in extra.items():
            if k in fields:
                raise ValueError(f"{EXTRA_FIELDS}.{k}: also given as a field of its own")
            if v is not None:
                fields[k] = _plain(v)
    return fields


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    return value

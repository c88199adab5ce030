"""The judge model: a ``provider:model`` string plus parameters, turned into a LangChain chat model.

The judge's identity (provider, model, temperature, max tokens, samples) is part of every verdict's key,
so changing any of them re-judges, and nothing else (not the server address, not the API key) does.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from greval.errors import UserError, option
from greval.llm.gguf import LocalJudgeError, model_identity, resolve_local_model
from greval.llm.openai_chat import OpenAIChat
from greval.llm.retry import redact, register_secret

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from greval.llm.openai_chat import ChatModel

DEFAULT_TIMEOUT = 120.0

#: How a message reaches the user: any callable taking the text, plain (``print``, a logger's ``info``,
#: ``list.append``; the command line passes its console's ``print``).
Notify = Callable[[str], object]

#: Providers of the embedded llama.cpp judge (greval.llm.local): served by greval itself, identified by the
#: model file's content (greval.llm.gguf).
LOCAL_PROVIDERS = ("gguf", "local")


class JudgeConfig(BaseModel):
    """Which model judges and with which parameters."""

    model_config = ConfigDict(frozen=True)

    provider: str = Field(description="'openai' (and OpenAI-compatible servers), 'gguf', or a LangChain provider.")
    model: str
    temperature: float | None = 0.0
    max_tokens: int | None = None
    samples: int = Field(1, ge=1, le=20)
    seed: int | None = None
    reason_chars: int | None = Field(
        None, gt=0, description="A cap on each reason's length, sent as the schema's maxLength (local judges)."
    )
    # Not part of the identity:
    base_url: str | None = Field(None, exclude=True)
    timeout: float = Field(DEFAULT_TIMEOUT, exclude=True)
    identity_override: str | None = Field(None, exclude=True)

    @classmethod
    def parse(cls, ref: str, **params: Any) -> JudgeConfig:
        """``openai:gpt-4o-mini``, ``local``, ``gguf:/path/model.gguf``, ``anthropic:claude-…``; bare names mean
        openai. Every judge name ``--judge`` takes gives the same judge here (the same identity, so the same
        stored verdicts): a local model is identified by its content (hashed once) and its answers are capped at
        :data:`LOCAL_MAX_TOKENS` unless ``max_tokens`` says otherwise. Nothing is started here: :func:`greval.run`
        serves a local judge while it needs one."""
        if is_local_ref(ref):
            # Small local models sometimes loop inside their reason until the context is full; a cap keeps a
            # bad answer to seconds (it is then retried as unparsable) instead of minutes.
            params["max_tokens"] = params.get("max_tokens") or LOCAL_MAX_TOKENS
            params["reason_chars"] = params.get("reason_chars") or LOCAL_REASON_CHARS
        if ref == "local":
            provider, model = "local", "default"
        elif ":" in ref and not ref.startswith(("http://", "https://")):
            provider, _, model = ref.partition(":")
        else:
            provider, model = "openai", ref
        if not model:
            raise UserError(f"{option('judge')} {ref!r}: give a model, e.g. openai:gpt-4o-mini")
        clean = {k: v for k, v in params.items() if v is not None}
        cfg = cls(provider=provider.lower(), model=model, **clean)
        return cfg.with_local_identity() if cfg.is_local else cfg

    @property
    def is_local(self) -> bool:
        """The embedded llama.cpp judge (``local``, ``gguf:PATH``): greval serves it (greval.llm.local)."""
        return self.provider in LOCAL_PROVIDERS

    def with_local_identity(self) -> JudgeConfig:
        """A local judge identified by its model file's content (not its path or port)."""
        try:
            path = resolve_local_model("local" if self.provider == "local" else f"gguf:{self.model}")
            return self.model_copy(update={"identity_override": model_identity(path)})
        except LocalJudgeError as exc:
            raise UserError(str(exc)) from None

    @property
    def identity(self) -> dict[str, Any]:
        ident = self.model_dump(mode="json")
        if self.reason_chars is None:
            del ident["reason_chars"]  # absent, as before it existed: every other judge keeps its key
        if self.identity_override:
            ident["model"] = self.identity_override
        return ident

    @property
    def key(self) -> str:
        """Short hash of the identity; part of every verdict's key."""
        return _config_key(self)

    @property
    def label(self) -> str:
        """Short human-readable name, used as the Argilla suggestion agent."""
        return self.identity_override or f"{self.provider}:{self.model}"


@lru_cache(maxsize=256)
def _config_key(cfg: JudgeConfig) -> str:
    # Asked several times per stored verdict; a frozen config hashes by its fields, so caching is safe.
    return _digest(json.dumps(cfg.identity, sort_keys=True, separators=(",", ":")))


@lru_cache(maxsize=256)
def _digest(blob: str) -> str:
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def register_model_secrets(model: Any) -> None:
    """Register every secret field of a chat model (``api_key`` and the like, kept as ``SecretStr``) so that
    no error text greval prints, logs or stores can contain it (see :func:`greval.llm.retry.redact`)."""
    fields = getattr(type(model), "model_fields", None)
    if not isinstance(fields, dict):
        return
    for name in fields:
        value = getattr(model, name, None)
        if isinstance(value, SecretStr):
            register_secret(value.get_secret_value())


def openai_chat(cfg: JudgeConfig, api_key: str | None = None) -> OpenAIChat:
    """The judge of an OpenAI-compatible provider (``openai``, the embedded local judge) as greval builds it:
    its settings, with no LangChain until a call needs it (greval.llm.openai_chat)."""
    if cfg.is_local and cfg.base_url is None:
        raise UserError(
            f"the local judge {cfg.label} is not running: greval.run serves it for a run; elsewhere serve it "
            "with greval.llm.local.judge_session, or give base_url of a running one (greval local-judge serve)"
        )
    base_url = cfg.base_url or os.environ.get("OPENAI_BASE_URL") or None
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
        if base_url is None:
            raise UserError(
                f"no API key: set OPENAI_API_KEY, or point {option('base_url')} at an OpenAI-compatible server"
            )
        key = "not-needed"
    return OpenAIChat(
        model=cfg.model,
        api_key=SecretStr(key),
        base_url=base_url,
        timeout=cfg.timeout,
        temperature=cfg.temperature,
        max_completion_tokens=cfg.max_tokens,
        seed=cfg.seed,
        reason_chars=cfg.reason_chars,
    )


def judge_model(cfg: JudgeConfig, api_key: str | None = None) -> ChatModel:
    """What a run, a served metric or a Ray shard judges with: :func:`openai_chat` for an OpenAI-compatible
    provider (LangChain imported only when a call needs it), else :func:`make_chat_model`'s LangChain model."""
    if cfg.provider in ("openai", *LOCAL_PROVIDERS):
        return openai_chat(cfg, api_key)
    return make_chat_model(cfg, api_key)


def make_chat_model(cfg: JudgeConfig, api_key: str | None = None) -> BaseChatModel:
    """Build the LangChain chat model. One instance serves a whole run: it owns one shared HTTP client."""
    if cfg.provider in ("openai", *LOCAL_PROVIDERS):
        return openai_chat(cfg, api_key).langchain()
    try:
        from langchain.chat_models import init_chat_model  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise UserError(
            f"provider {cfg.provider!r} needs the 'langchain' package and langchain-{cfg.provider}; "
            f"install them, or use openai:MODEL with {option('base_url')} for OpenAI-compatible servers"
        ) from None
    params: dict[str, Any] = {"temperature": cfg.temperature, "timeout": cfg.timeout, "max_retries": 0}
    if cfg.max_tokens is not None:
        params["max_tokens"] = cfg.max_tokens
    try:
        model: BaseChatModel = init_chat_model(cfg.model, model_provider=cfg.provider, **params)
    except (ImportError, ValueError) as exc:
        raise UserError(f"{option('judge')} {cfg.provider}:{cfg.model}: {redact(str(exc))}") from None
    register_model_secrets(model)
    return model


# ------------------------------------------------------------------ which judge (from the command line)
#: The local judge's answer cap unless ``max_tokens`` says otherwise. The bundled SmolLM2's complete answers were
#: at most 94 tokens over ~100 quick-start judgements (4 stores, 2026-11-26), while 4-7 of each 30 loop inside
#: their reason until the cap and are asked three times (a re-ask at temperature 0 often comes back complete: 7 of
#: 30 stayed cut off in a quick start that asked once, 2 in those that asked three times; 2026-11-29): at 200
#: every complete answer still fits twice over and a looping one costs half. A larger model of one's own
#: (``gguf:``) may need ``--max-tokens`` raised; a cut-off is stored as ``truncated`` with that advice.
LOCAL_MAX_TOKENS = 200

#: The local judge's cap on each reason, in characters: llama.cpp turns the schema's ``maxLength`` into its
#: grammar, so a reason that loops is closed there and the answer completes. The bundled SmolLM2's reasons were
#: 11-239 characters in the quick start except those that loop (2026-11-29). The quick start's 30 judgements with
#: it: 30 calls and none cut off, against 38-41 calls and 3-4 cut off without, in 0.51x the time
#: (scripts/bench_reason_cap.py, 3 paired rounds, the same day).
LOCAL_REASON_CHARS = 300


def local_concurrency() -> int:
    """Calls in flight for the embedded judge: its parallel slots (more would only queue and time out)."""
    try:
        return max(1, int(os.environ.get("GREVAL_LLAMA_PARALLEL", "2")))
    except ValueError:
        return 2


def is_local_ref(ref: str) -> bool:
    """Whether a --judge reference names the embedded llama.cpp judge (``local`` or ``gguf:…``)."""
    return ref == "local" or ref.startswith(("gguf:", "local:"))


def resolve_judge(ref: str, **params: Any) -> JudgeConfig:
    """The judge's configuration and identity, without starting anything: :meth:`JudgeConfig.parse` (the
    command line's name for it)."""
    return JudgeConfig.parse(ref, **params)


class SpecJudge(Protocol):
    """What a spec's judge block offers as defaults (``greval.spec.JudgeDefaults``; llm/ reads no spec, so
    only its shape is named here)."""

    @property
    def temperature(self) -> float | None: ...

    @property
    def max_tokens(self) -> int | None: ...

    @property
    def samples(self) -> int: ...


class JudgeChoice(BaseModel):
    """The judge as the user chose it (``--judge`` and its parameter flags), before any default: what is left
    unset is decided by the spec's judge block (:meth:`with_defaults`), then by :class:`JudgeConfig`'s defaults.
    Built once from the flags and handed down whole, instead of seven parameters through every command."""

    model_config = ConfigDict(frozen=True)

    ref: str | None = Field(None, description="provider:model, 'local' or gguf:PATH; None: the spec's or default.")
    base_url: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    timeout: float = DEFAULT_TIMEOUT
    samples: int | None = None
    seed: int | None = None

    def with_defaults(self, defaults: SpecJudge) -> JudgeChoice:
        """The flags first; a spec's judge block for the parameters they leave unset."""
        return self.model_copy(
            update={
                "temperature": self.temperature if self.temperature is not None else defaults.temperature,
                "max_tokens": self.max_tokens or defaults.max_tokens,
                "samples": self.samples or defaults.samples,
            }
        )

    def params(self) -> dict[str, Any]:
        """The keyword arguments of :func:`resolve_judge` (everything but the reference; None means unset)."""
        return self.model_dump(exclude={"ref"})


def default_judge(notify: Notify) -> str:
    """The configured judge, else OpenAI when a key is set, else the embedded local judge (said through
    ``notify``, see :data:`Notify`)."""
    if os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"):
        return "openai:gpt-4o-mini"
    notify(
        f"no judge configured (no {option('judge')}, GREVAL_JUDGE or OPENAI_API_KEY): using the "
        "embedded local judge, a tiny model that is NOT a judge to trust — it only lets the loop run "
        "offline."
    )
    return "local"

"""The test server's state: its knobs (`ServerConfig`), the scripted fault rules, the stats and the request log.

Rules are posted to ``/_admin/script``. The first match with ``times`` left wins; ``match`` is a substring, or a
regex with ``"regex": true``, of all message contents joined; ``probability`` draws are keyed by seed, rule,
prompt and attempt so they do not depend on request interleaving::

    {"match": "c17", "times": 1, "action": {"type": "fault", "status": 429, "retry_after": 2}}
    actions: respond{content|text}, fault{status, retry_after, body, message, code, error_type, param,
             echo_auth}, timeout{seconds}, malformed, invalid, drop_ids{ids}, extra_ids{ids}, latency{seconds},
             length (the answer cut in half, finish_reason "length", as when max_tokens runs out),
             content_filter (no content, finish_reason "content_filter")

``respond.text`` is sent verbatim as the content, or as the tool-call arguments when the request forces a tool.

``fault`` answers ``status`` with an OpenAI-style error body ``{"error": {"message", "type", "param",
"code"}}``: the defaults for the status (400 invalid request, 401 bad key, 403, 404 unknown model, 413,
429, 500, 503), each field overridable (``message``, ``code``, ``error_type``, ``param``), or ``body``, sent
verbatim as the JSON body. ``echo_auth: true`` appends the request's ``Authorization`` header to the error
message (the body's ``error.message``, else a top-level ``authorization`` field), as some proxies do;
``echo_auth: "token"`` echoes the credential alone, without its ``Bearer`` scheme::

    {"match": "Question 3", "action": {"type": "fault", "status": 400, "body": {"error": {
        "message": "This model's maximum context length is 8192 tokens …",
        "type": "invalid_request_error", "code": "context_length_exceeded"}}}}
    {"action": {"type": "fault", "status": 401, "echo_auth": true}}
"""

from __future__ import annotations

import hashlib
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "ACTION_TYPES",
    "CACHE_KEY_WORDS",
    "FINISH",
    "LOGPROBS_MODES",
    "MAX_CACHED_PREFIXES",
    "MAX_LOGGED_REQUESTS",
    "Rule",
    "ServerConfig",
    "State",
    "count",
    "parse_rule",
]

MAX_LOGGED_REQUESTS: Final = 10_000
MAX_CACHED_PREFIXES: Final = 1_000
CACHE_KEY_WORDS: Final = 32


@dataclass
class ServerConfig:
    """Knobs changeable at runtime via POST /_admin/config."""

    latency: float = 0.0
    json_schema: bool = True
    tools: bool = True
    seed: int = 0
    logprobs: str = "null"  # on | null | reject (see greval.testing.openai.logprobs)
    prefix_cache: bool = False  # report cached prompt tokens (State.cached_words); off: always 0


LOGPROBS_MODES: Final = ("on", "null", "reject")


@dataclass
class Rule:
    """One scripted rule: which prompts it matches, how often it may fire, and its action."""

    index: int
    match: str | None
    pattern: re.Pattern[str] | None
    times: int | None
    probability: float | None
    action: dict[str, Any]
    seen: dict[bytes, int] = field(default_factory=dict)

    def fires(self, text: str, digest: bytes, seed: int) -> bool:
        """Whether the rule decides this request (``digest``: the prompt's); a firing uses up one of ``times``."""
        if self.times is not None and self.times <= 0:
            return False
        if self.pattern is not None:
            if not self.pattern.search(text):
                return False
        elif self.match is not None and self.match not in text:
            return False
        if self.probability is not None and not self._drawn(digest, seed, self.probability):
            return False
        if self.times is not None:
            self.times -= 1
        return True

    def _drawn(self, digest: bytes, seed: int, probability: float) -> bool:
        # A draw keyed by (seed, rule, prompt, attempt) instead of one shared RNG stream, so
        # the outcome for an item does not depend on how concurrent requests interleave,
        # while a retry of the same prompt still gets a fresh draw.
        attempt = self.seen.get(digest, 0)
        self.seen[digest] = attempt + 1
        key = digest + f"|{seed}|{self.index}|{attempt}".encode()
        draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
        return draw < probability


ACTION_TYPES: Final = frozenset(
    {
        "respond",
        "fault",
        "timeout",
        "malformed",
        "invalid",
        "drop_ids",
        "extra_ids",
        "latency",
        "length",
        "content_filter",
    }
)
#: Actions that end the answer with another finish reason than "stop" / "tool_calls".
FINISH: Final = {"length": "length", "content_filter": "content_filter"}


def parse_rule(index: int, raw: Any) -> Rule:
    """One posted rule, checked (ValueError, TypeError or re.error names what is wrong)."""
    if not isinstance(raw, dict):
        raise ValueError(f"rule {index} must be an object")
    action = raw.get("action")
    if not isinstance(action, dict) or action.get("type") not in ACTION_TYPES:
        raise ValueError(f"rule {index}: action.type must be one of {sorted(ACTION_TYPES)}")
    match = raw.get("match")
    if match is not None and not isinstance(match, str):
        raise ValueError(f"rule {index}: match must be a string or null")
    pattern = re.compile(match) if match is not None and raw.get("regex") else None
    times = raw.get("times")
    probability = raw.get("probability")
    return Rule(
        index=index,
        match=match,
        pattern=pattern,
        times=None if times is None else int(times),
        probability=None if probability is None else float(probability),
        action=action,
    )


class State:
    """All mutable server state; handlers mutate it only between awaits, so no locks are needed."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.rules: list[Rule] = []
        self.log: deque[dict[str, Any]] = deque(maxlen=MAX_LOGGED_REQUESTS)
        # The headers and query string of each logged request, in the same order (lets tests compare two
        # clients' requests entirely, not only their bodies).
        self.meta_log: deque[dict[str, Any]] = deque(maxlen=MAX_LOGGED_REQUESTS)
        # The prefix cache the server models: the words of the last prompt under each key (see cached_words).
        self.prefixes: dict[str, list[str]] = {}
        self.completion_counter = 0
        self.in_flight = 0
        self.epoch = 0
        self.reset_stats()

    def reset_stats(self) -> None:
        """Start a new epoch; requests still running from before do not leak into the new counts."""
        self.epoch += 1
        self.total = 0
        self.by_status: dict[str, int] = {}
        self.by_rule: dict[str, int] = {}
        self.by_mode: dict[str, int] = {}
        self.max_in_flight = self.in_flight

    def stats(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_status": dict(self.by_status),
            "by_rule": dict(self.by_rule),
            "by_mode": dict(self.by_mode),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "rules_remaining": [r.times for r in self.rules],
        }

    def cached_words(self, words: list[str]) -> int:
        """How many leading words of this prompt a prefix cache would hold: those it shares with the last
        prompt that began with the same ``CACHE_KEY_WORDS`` words (OpenAI routes a request to a cache by a hash
        of its prompt's start). Every shared word counts; real providers count whole blocks past a minimum
        (OpenAI: 128 tokens past the first 1,024). The prompt is remembered for the next one."""
        key = hashlib.blake2b(" ".join(words[:CACHE_KEY_WORDS]).encode(), digest_size=16).hexdigest()
        before = self.prefixes.pop(key, None)
        if len(self.prefixes) >= MAX_CACHED_PREFIXES:
            self.prefixes.pop(next(iter(self.prefixes)))
        self.prefixes[key] = words
        if before is None:
            return 0
        shared = 0
        for a, b in zip(before, words, strict=False):
            if a != b:
                break
            shared += 1
        return shared

    def action_for(self, prompt: str, digest: bytes) -> dict[str, Any]:
        """The action of the first rule that fires for this prompt (counted in ``by_rule``), else ``{}``."""
        for rule in self.rules:
            if rule.fires(prompt, digest, self.config.seed):
                count(self.by_rule, str(rule.index))
                return rule.action
        return {}


def count(counter: dict[str, int], key: str) -> None:
    counter[key] = counter.get(key, 0) + 1

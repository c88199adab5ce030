"""The local OpenAI-compatible server, exercised over real HTTP by the clients greval uses."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any, Literal

import openai
import pydantic
import pytest
from langchain_core.exceptions import OutputParserException
from langchain_openai import ChatOpenAI
from openai.types.chat import ChatCompletion
from pydantic import BaseModel, Field

from greval.testing.openai_server import OpenAIServer, generate_instance, tokenize

# Not the langchain default (gpt-3.5-turbo): with that name `method="json_schema"` is silently
# rewritten to function calling.
MODEL = "gpt-4o-mini"
Method = Literal["json_schema", "function_calling", "json_mode"]
METHODS: tuple[Method, ...] = ("json_schema", "function_calling", "json_mode")


class Claim(BaseModel):
    id: str
    verdict: Literal["supported", "unsupported", "partial"]
    reason: str


class Verdicts(BaseModel):
    claims: list[Claim]
    score: float = Field(ge=0, le=1)
    label: int | None = Field(default=None, ge=1, le=5)


@pytest.fixture(scope="module")
def srv() -> Iterator[OpenAIServer]:
    with OpenAIServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _clean(srv: OpenAIServer) -> Iterator[None]:
    srv.reset()
    yield
    srv.configure(latency=0.0, json_schema=True, tools=True, seed=0, logprobs="null", prefix_cache=False)


def _llm(srv: OpenAIServer, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(model=MODEL, base_url=srv.base_url, api_key="test", max_retries=0, **kwargs)


def _client(srv: OpenAIServer, **kwargs: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0, **kwargs)


def _create(srv: OpenAIServer, **kwargs: Any) -> ChatCompletion:
    """Untyped pass-through: the tests send raw dict payloads the SDK's TypedDicts do not model."""
    completions: Any = _client(srv).chat.completions
    result: ChatCompletion = completions.create(**kwargs)
    return result


def _prompt(method: Method, body: str) -> str:
    """JSON mode carries no schema in the request; greval puts it in a fenced block."""
    if method != "json_mode":
        return body
    return f"{body}\nAnswer with JSON matching:\n```json\n{json.dumps(Verdicts.model_json_schema())}\n```"


def _structured(srv: OpenAIServer, method: Method, body: str) -> dict[str, Any]:
    chain = _llm(srv).with_structured_output(Verdicts, method=method, include_raw=True)
    result: Any = chain.invoke(_prompt(method, body))
    assert isinstance(result, dict)
    return result


def _json_schema_format() -> dict[str, Any]:
    return {
        "type": "json_schema",
        "json_schema": {"name": "Verdicts", "schema": Verdicts.model_json_schema(), "strict": False},
    }


# ---------------------------------------------------------------- structured output


@pytest.mark.parametrize("method", METHODS)
def test_langchain_structured_output_is_schema_valid(srv: OpenAIServer, method: Method) -> None:
    result = _structured(srv, method, "Judge the claims.\nItem ids: c1, c2, c3")
    assert result["parsing_error"] is None
    parsed = result["parsed"]
    assert isinstance(parsed, Verdicts)
    assert [c.id for c in parsed.claims] == ["c1", "c2", "c3"]
    assert all(c.reason.endswith(".") and " " in c.reason for c in parsed.claims)
    mode = {"json_schema": "json_schema", "function_calling": "tools", "json_mode": "json_object"}[method]
    assert srv.stats()["by_mode"] == {mode: 1}


def test_answers_repeat_for_same_prompt_and_vary_across_prompts(srv: OpenAIServer) -> None:
    first = _structured(srv, "json_schema", "Item ids: a, b\nquestion 1")["parsed"]
    again = _structured(srv, "json_schema", "Item ids: a, b\nquestion 1")["parsed"]
    assert first == again
    others = [_structured(srv, "json_schema", f"Item ids: a, b\nquestion {i}")["parsed"] for i in range(2, 8)]
    assert len({o.model_dump_json() for o in [first, *others]}) > 1


def test_seed_changes_answers(srv: OpenAIServer) -> None:
    before = [_structured(srv, "json_schema", f"Item ids: x, y\nq{i}")["parsed"] for i in range(4)]
    srv.configure(seed=7)
    after = [_structured(srv, "json_schema", f"Item ids: x, y\nq{i}")["parsed"] for i in range(4)]
    assert before != after


def test_last_item_ids_line_wins(srv: OpenAIServer) -> None:
    result = _structured(srv, "function_calling", "Item ids: old1, old2\nexample\nItem ids: n1,n2 , n3,")
    assert [c.id for c in result["parsed"].claims] == ["n1", "n2", "n3"]


def test_json_mode_without_schema_returns_empty_object(srv: OpenAIServer) -> None:
    resp = _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": "reply in json"}],
        response_format={"type": "json_object"},
    )
    assert json.loads(resp.choices[0].message.content or "") == {}


def test_openai_sdk_json_schema_n_choices_and_usage(srv: OpenAIServer) -> None:
    resp = _create(
        srv,
        model="my-model",
        messages=[
            {"role": "system", "content": "You judge."},
            {"role": "user", "content": "Item ids: q1\nfour words here"},
        ],
        response_format=_json_schema_format(),
        n=3,
    )
    assert resp.model == "my-model" and resp.object == "chat.completion" and resp.id
    assert len(resp.choices) == 3
    answers = [Verdicts.model_validate_json(c.message.content or "") for c in resp.choices]
    assert all([c.id for c in a.claims] == ["q1"] for a in answers)
    assert len({a.model_dump_json() for a in answers}) > 1
    assert resp.usage is not None
    assert resp.usage.prompt_tokens == 8  # words across all messages
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens > 8


def test_cached_prompt_tokens_model_a_prefix_cache(srv: OpenAIServer) -> None:
    """usage.prompt_tokens_details.cached_tokens: the leading words a request shares with the last one that
    began with the same 32 words (none for the first, none after a reset), when the ``prefix_cache`` knob is
    on; LangChain reads it as ``input_token_details.cache_read``."""
    steps = " ".join(f"step{i}" for i in range(40))
    system = {"role": "system", "content": f"You judge chunks by these steps: {steps}"}  # 46 words

    def ask(user: str, first: dict[str, str] = system) -> Any:
        return _create(srv, model=MODEL, messages=[first, {"role": "user", "content": user}])

    def cached(resp: Any) -> int:
        assert resp.usage is not None and resp.usage.prompt_tokens_details is not None
        return int(resp.usage.prompt_tokens_details.cached_tokens)

    assert cached(ask("Question: what is one? Chunk: one.")) == 0
    assert cached(ask("Question: what is two? Chunk: two.")) == 0  # off by default: a repeated request is alike
    srv.configure(prefix_cache=True)
    assert cached(ask("Question: what is one? Chunk: one.")) == 0
    assert cached(ask("Question: what is two? Chunk: two.")) == 46 + 3  # the system message, "Question: what is"
    assert cached(ask("Question: what is two?", {"role": "system", "content": "You judge answers."})) == 0
    msg = _llm(srv).invoke([("system", system["content"]), ("user", "Question: what is three? Chunk: 3.")])
    assert (msg.usage_metadata or {}).get("input_token_details", {}).get("cache_read") == 49
    srv.reset()
    assert cached(ask("Question: what is two? Chunk: two.")) == 0
    assert cached(ask("Question: what is two? Chunk: two.")) == 52  # the same request again: all of it


def test_openai_sdk_tool_call_shape(srv: OpenAIServer) -> None:
    tool = {"type": "function", "function": {"name": "grade", "parameters": Verdicts.model_json_schema()}}
    resp = _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": "Item ids: t1, t2"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "grade"}},
    )
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "grade" and call.id
    assert [c.id for c in Verdicts.model_validate_json(call.function.arguments).claims] == ["t1", "t2"]


def test_plain_text_models_and_streaming(srv: OpenAIServer) -> None:
    assert _llm(srv).invoke("hello").content == "OK"
    assert "".join(str(chunk.content) for chunk in _llm(srv).stream("hello")) == "OK"
    assert [m.id for m in _client(srv).models.list()] == ["greval-test"]


def test_generate_instance_schema_features() -> None:
    schema = {
        "$defs": {
            "Kind": {"enum": ["a", "b"]},
            "Pair": {"type": "object", "properties": {"k": {"$ref": "#/$defs/Kind"}}},
        },
        "type": "object",
        "properties": {
            "kind": {"$ref": "#/$defs/Kind"},
            "fixed": {"const": 3},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 2, "maximum": 4}]},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "flags": {"type": "array", "items": {"type": "boolean"}},
            "pairs": {"type": "array", "items": {"$ref": "#/$defs/Pair"}, "minItems": 3},
            "word": {"type": "string", "maxLength": 4},
            "typed": {"type": ["null", "string"]},
        },
    }
    for i in range(30):
        value = generate_instance(schema, f"prompt {i}")
        assert value == generate_instance(schema, f"prompt {i}")
        assert value["kind"] in ("a", "b") and value["fixed"] == 3
        assert 2 <= value["maybe"] <= 4 and 0 < value["ratio"] < 1
        assert len(value["flags"]) == 2 and all(isinstance(f, bool) for f in value["flags"])
        assert len(value["pairs"]) == 3 and all(p["k"] in ("a", "b") for p in value["pairs"])
        assert len(value["word"]) <= 4 and isinstance(value["typed"], str)


# ---------------------------------------------------------------- scripted rules


def test_respond_content_in_every_mode_and_raw_text(srv: OpenAIServer) -> None:
    canned = {"claims": [{"id": "z", "verdict": "partial", "reason": "Scripted."}], "score": 0.5}
    srv.script([{"match": "CANNED", "action": {"type": "respond", "content": canned}}])
    for method in METHODS:
        assert _structured(srv, method, "CANNED please")["parsed"] == Verdicts.model_validate(canned)
    srv.script([{"match": "RAW", "action": {"type": "respond", "text": "raw words"}}])
    assert _llm(srv).invoke("RAW").content == "raw words"
    assert srv.stats()["by_rule"] == {"0": 3, "1": 1}


def test_drop_and_extra_ids(srv: OpenAIServer) -> None:
    srv.script(
        [
            {"match": "DROP", "times": 1, "action": {"type": "drop_ids", "ids": ["c2"]}},
            {"match": "EXTRA", "action": {"type": "extra_ids", "ids": ["c9"]}},
        ]
    )
    dropped = _structured(srv, "json_schema", "DROP\nItem ids: c1, c2, c3")["parsed"]
    assert [c.id for c in dropped.claims] == ["c1", "c3"]
    assert [c.id for c in _structured(srv, "json_schema", "DROP\nItem ids: c1, c2, c3")["parsed"].claims] == [
        "c1",
        "c2",
        "c3",
    ]  # times=1 is used up
    extra = _structured(srv, "function_calling", "EXTRA\nItem ids: c1")["parsed"]
    assert [c.id for c in extra.claims] == ["c1", "c9"]


def test_regex_match_and_rule_order(srv: OpenAIServer) -> None:
    srv.script(
        [
            {"match": r"item-\d+-fail", "regex": True, "action": {"type": "fault", "status": 500}},
            {"match": None, "action": {"type": "respond", "text": "fallback"}},
        ]
    )
    with pytest.raises(openai.InternalServerError):
        _llm(srv).invoke("item-42-fail")
    assert _llm(srv).invoke("item-x-fail").content == "fallback"
    stats = srv.stats()
    assert stats["by_rule"] == {"0": 1, "1": 1}
    assert stats["by_status"] == {"500": 1, "200": 1}


def test_rate_limit_with_retry_after_is_visible(srv: OpenAIServer) -> None:
    srv.script([{"match": "LIMIT", "times": 1, "action": {"type": "fault", "status": 429, "retry_after": 7}}])
    with pytest.raises(openai.RateLimitError) as info:
        _llm(srv).invoke("LIMIT")
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.code == "rate_limit_exceeded"
    assert _llm(srv).invoke("LIMIT").content == "OK"  # times=1


def test_server_errors(srv: OpenAIServer) -> None:
    srv.script([{"match": "BOOM", "action": {"type": "fault", "status": 503}}])
    with pytest.raises(openai.InternalServerError) as info:
        _create(srv, model=MODEL, messages=[{"role": "user", "content": "BOOM"}])
    assert info.value.status_code == 503


def test_timeout_action(srv: OpenAIServer) -> None:
    srv.script([{"match": "SLOW", "action": {"type": "timeout", "seconds": 1.2}}])
    start = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        _llm(srv, timeout=0.3).invoke("SLOW")
    assert time.monotonic() - start < 1.0
    # The server still finishes its sleep; wait so later tests see no stray in-flight request.
    while srv.stats()["in_flight"] and time.monotonic() - start < 5:
        time.sleep(0.05)
    assert srv.stats()["in_flight"] == 0


def test_malformed_is_a_parsing_error_in_every_mode(srv: OpenAIServer) -> None:
    srv.script([{"match": "BAD", "action": {"type": "malformed"}}])
    # json_schema: the openai SDK parses inside the call, so it raises instead of filling parsing_error.
    with pytest.raises(pydantic.ValidationError):
        _structured(srv, "json_schema", "BAD")
    # function calling: unparsable arguments become `invalid_tool_calls` and `parsed` is None.
    tools = _structured(srv, "function_calling", "BAD")
    assert tools["parsed"] is None and tools["raw"].invalid_tool_calls
    json_mode = _structured(srv, "json_mode", "BAD")
    assert isinstance(json_mode["parsing_error"], OutputParserException)
    resp = _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": "BAD"}],
        response_format=_json_schema_format(),
    )
    with pytest.raises(json.JSONDecodeError):
        json.loads(resp.choices[0].message.content or "")


def test_invalid_is_valid_json_violating_schema(srv: OpenAIServer) -> None:
    srv.script([{"match": "WRONG", "action": {"type": "invalid"}}])
    resp = _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": "WRONG\nItem ids: c1"}],
        response_format=_json_schema_format(),
    )
    data = json.loads(resp.choices[0].message.content or "")
    with pytest.raises(pydantic.ValidationError):
        Verdicts.model_validate(data)
    assert isinstance(_structured(srv, "json_mode", "WRONG")["parsing_error"], OutputParserException)


def test_probability_is_deterministic(srv: OpenAIServer) -> None:
    def failing() -> list[int]:
        srv.reset()
        srv.script([{"match": "P-", "probability": 0.5, "action": {"type": "fault", "status": 500}}])
        out = []
        for i in range(24):
            try:
                _llm(srv).invoke(f"P-{i}")
            except openai.InternalServerError:
                out.append(i)
        return out

    first = failing()
    assert 3 < len(first) < 21
    assert failing() == first


# ---------------------------------------------------------------- capabilities, latency, concurrency


def test_json_schema_disabled_gives_bad_request(srv: OpenAIServer) -> None:
    srv.configure(json_schema=False)
    # langchain recognises the real OpenAI wording and warns before re-raising.
    with pytest.raises(openai.BadRequestError) as info, pytest.warns(UserWarning, match="structured output"):
        _structured(srv, "json_schema", "anything")
    assert info.value.param == "response_format"
    assert "json_schema" in info.value.message
    assert isinstance(_structured(srv, "function_calling", "Item ids: a")["parsed"], Verdicts)
    srv.configure(tools=False)
    with pytest.raises(openai.BadRequestError) as tools_info:
        _structured(srv, "function_calling", "anything")
    assert tools_info.value.param == "tools"
    assert isinstance(_structured(srv, "json_mode", "Item ids: a")["parsed"], Verdicts)


def test_cli_flags_no_json_schema() -> None:
    with OpenAIServer(json_schema=False, latency=0.0) as other:
        with pytest.raises(openai.BadRequestError), pytest.warns(UserWarning):
            _structured(other, "json_schema", "x")
        assert other.stats()["by_status"] == {"400": 1}


def test_latency_default_and_per_rule(srv: OpenAIServer) -> None:
    srv.configure(latency=0.4)
    start = time.monotonic()
    _llm(srv).invoke("wait")
    assert 0.35 < time.monotonic() - start < 2.0
    srv.script([{"match": "FAST", "action": {"type": "latency", "seconds": 0}}])
    start = time.monotonic()
    _llm(srv).invoke("FAST")
    assert time.monotonic() - start < 0.3


def test_concurrency(srv: OpenAIServer) -> None:
    srv.configure(latency=0.3)

    async def run() -> float:
        client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="test", max_retries=0)
        start = time.monotonic()
        await asyncio.gather(
            *(
                client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"c{i}"}])
                for i in range(50)
            )
        )
        await client.close()
        return time.monotonic() - start

    elapsed = asyncio.run(run())
    assert elapsed < 5.0  # serial would be 15 s
    stats = srv.stats()
    assert stats["total"] == 50 and stats["by_status"] == {"200": 50}
    assert stats["max_in_flight"] >= 20 and stats["in_flight"] == 0


def test_requests_log_and_reset(srv: OpenAIServer) -> None:
    _structured(srv, "function_calling", "logged one")
    bodies = srv.requests()
    assert len(bodies) == 1
    assert bodies[0]["tool_choice"] == {"type": "function", "function": {"name": "Verdicts"}}
    assert bodies[0]["parallel_tool_calls"] is False
    srv.reset()
    assert srv.requests() == [] and srv.stats()["total"] == 0


# ---------------------------------------------------------------- token log-probabilities
def _lp_request(srv: OpenAIServer, prompt: str = "Item ids: t1, t2, t3\nwhich claims hold?", **kw: Any) -> Any:
    return _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        response_format=_json_schema_format(),
        **kw,
    )


def test_logprobs_are_off_by_default_and_the_answer_is_unchanged_when_not_asked(srv: OpenAIServer) -> None:
    before = _lp_request(srv).model_dump(exclude={"id", "created"})
    assert before["choices"][0]["logprobs"] is None
    assert _lp_request(srv, logprobs=True, top_logprobs=3).choices[0].logprobs is None  # default "null"
    srv.configure(logprobs="on")
    after = _lp_request(srv).model_dump(exclude={"id", "created"})
    assert after == before  # not asked: the same answer, no logprobs


def test_logprobs_cover_the_content_and_list_the_schemas_alternatives(srv: OpenAIServer) -> None:
    srv.configure(logprobs="on")
    resp = _lp_request(srv, logprobs=True, top_logprobs=5)
    choice = resp.choices[0]
    content = choice.message.content or ""
    assert choice.logprobs is not None and choice.logprobs.content
    tokens = choice.logprobs.content
    assert "".join(t.token for t in tokens) == content
    assert all(bytes(t.bytes or []) == t.token.encode() for t in tokens)
    assert all(t.logprob <= 0 and len(t.top_logprobs) <= 5 for t in tokens)
    assert all(t.token in {a.token for a in t.top_logprobs} for t in tokens)  # k=5 covers every alternative here
    answer = Verdicts.model_validate_json(content)
    labels = {"supported", "unsupported", "partial"}
    at_labels = [t for t in tokens if t.token in labels and {a.token for a in t.top_logprobs} == labels]
    assert [t.token for t in at_labels] == [c.verdict for c in answer.claims]
    for t in at_labels:
        probs = {a.token: math.exp(a.logprob) for a in t.top_logprobs}
        assert 0.34 <= probs[t.token] <= 0.99 and sum(probs.values()) <= 1 + 1e-9
        assert math.exp(t.logprob) == pytest.approx(probs[t.token])
    assert len({round(t.logprob, 9) for t in at_labels}) == len(at_labels)  # confidences vary across items
    if answer.label is not None:  # the integer 1..5: its first token lists the other values
        [at_value] = [t for t in tokens if t.token == str(answer.label) and len(t.top_logprobs) == 5]
        assert {a.token for a in at_value.top_logprobs} == {"1", "2", "3", "4", "5"}
    again = _lp_request(srv, logprobs=True, top_logprobs=5)
    assert again.choices[0].logprobs == choice.logprobs  # deterministic per prompt and choice
    no_top = _lp_request(srv, logprobs=True).choices[0].logprobs
    assert no_top is not None and no_top.content and all(t.top_logprobs == [] for t in no_top.content)
    assert [t.logprob for t in no_top.content] == [t.logprob for t in tokens]


def test_a_label_spelled_by_several_tokens_multiplies_back_to_its_probability(srv: OpenAIServer) -> None:
    srv.configure(logprobs="on")
    srv.script([{"match": "grade", "action": {"type": "respond", "content": {"label": "not quite"}}}])
    schema = {"type": "object", "properties": {"label": {"enum": ["not at all", "not quite", "fully"]}}}
    resp = _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": "grade it"}],
        response_format={"type": "json_schema", "json_schema": {"name": "g", "schema": schema}},
        logprobs=True,
        top_logprobs=5,
    )
    assert resp.choices[0].logprobs is not None and resp.choices[0].logprobs.content
    got = resp.choices[0].logprobs.content
    assert [t.token for t in got] == tokenize('{"label": "not quite"}')
    i = [t.token for t in got].index("not")
    # "not" starts two labels: its probability is theirs together, and the chain rule gives back the label's.
    heads = {a.token: math.exp(a.logprob) for a in got[i].top_logprobs}
    assert set(heads) == {"not", "fully"} and sum(heads.values()) <= 1
    chain = math.exp(sum(t.logprob for t in got[i : i + 3]))  # "not", " ", "quite"
    assert 0.34 <= chain <= 0.99 and chain <= heads["not"] + 1e-12


def test_tool_calls_and_streams_carry_no_content_logprobs(srv: OpenAIServer) -> None:
    srv.configure(logprobs="on")
    tool = {"type": "function", "function": {"name": "grade", "parameters": Verdicts.model_json_schema()}}
    resp = _create(
        srv,
        model=MODEL,
        messages=[{"role": "user", "content": "Item ids: t1"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "grade"}},
        logprobs=True,
        top_logprobs=2,
    )
    lp = resp.choices[0].logprobs
    assert lp is not None and lp.content is None  # OpenAI gives the arguments none
    chunks = list(
        _client(srv).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True, logprobs=True
        )
    )
    assert all(c.choices[0].logprobs is None for c in chunks if c.choices)


def test_logprobs_can_be_refused_like_a_model_without_them(srv: OpenAIServer) -> None:
    srv.configure(logprobs="reject")
    with pytest.raises(openai.BadRequestError) as info:
        _lp_request(srv, logprobs=True)
    assert info.value.param == "logprobs" and info.value.code == "unsupported_parameter"
    assert _lp_request(srv).choices[0].message.content  # not asked: answered
    with pytest.raises(RuntimeError, match="logprobs must be one of"):
        srv.configure(logprobs="sometimes")
    with OpenAIServer(logprobs="on") as other:
        assert other.configure()["logprobs"] == "on"


# ------------------------------------------------------------------ without aiohttp (greval without [testing])
#: Prepended to a child interpreter's code: every import of aiohttp then fails as a missing package's does
#: (ModuleNotFoundError, name "aiohttp"); this environment has aiohttp installed, so its absence is simulated.
NO_AIOHTTP = "import sys; sys.modules['aiohttp'] = None\n"
HINT = "pip install 'greval[testing]'"


def test_without_aiohttp_what_needs_it_names_the_extra_and_the_rest_works() -> None:
    probe = NO_AIOHTTP + textwrap.dedent(
        """
        from greval.testing import OpenAIServer, ServerConfig, generate_instance
        print(generate_instance({"enum": ["only"]}, "p"), ServerConfig().seed)
        for needs in ("build_app", "OpenAIServer()"):
            try:
                exec("from greval.testing import build_app" if needs == "build_app" else needs)
            except ModuleNotFoundError as exc:
                print(needs, exc.name, exc)
        """
    )
    res = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == "only 0"  # the instance generator and the config need no aiohttp
    assert [line.split(" ", 2)[:2] for line in lines[1:]] == [["build_app", "aiohttp"], ["OpenAIServer()", "aiohttp"]]
    assert all(line.endswith(HINT) for line in lines[1:]), lines


def test_without_aiohttp_the_server_command_says_so_in_one_line() -> None:
    """``python -m greval.testing.openai_server`` (what OpenAIServer runs): one line on stderr, exit 2."""
    run = "import runpy; sys.argv[1:] = ['--port', '0']\n"
    run += "runpy.run_module('greval.testing.openai_server', run_name='__main__')"
    res = subprocess.run([sys.executable, "-c", NO_AIOHTTP + run], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stdout == "" and len(res.stderr.splitlines()) == 1, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.strip().endswith(HINT)

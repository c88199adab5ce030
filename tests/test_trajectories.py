"""Trajectories as data (issue 45): an agent's steps read from OpenAI-style message lists, LangChain messages,
plain JSONL steps and bare tool calls (greval.dataset.records), and from traces — LangSmith runs recorded by
LangChain's own tracer, Langfuse observations, OpenInference spans of an instrumented toy agent in a real Phoenix
(greval.traces); bad input as one line or one error verdict while the run goes on; the judged trajectory specs
end to end through the local OpenAI-compatible test server, per step and per record."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from greval.cli import main
from greval.dataset.records import Record, normalise_trajectory
from greval.errors import UserError
from greval.judge.prompt import render_inputs
from greval.spec import Spec, resolve_specs
from greval.spec.schema import spec_json_schema
from greval.store.results import item_rows, record_rows
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.traces.assemble import step_spans
from greval.traces.detect import open_data
from greval.traces.source import TraceRows

ROOT = Path(__file__).resolve().parents[1]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}

#: An OpenAI chat completion's messages: two calls in one assistant message (parallel), their results (tool
#: messages name only the call), a second assistant message with text and a call, the final answer.
OPENAI = [
    {"role": "system", "content": "You plan trips."},
    {"role": "user", "content": "Weather in Paris and Lyon, then book the warmer one?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}},
    ]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "24 C"},
    {"role": "assistant", "content": "Lyon is warmer; booking it.", "tool_calls": [
        {"id": "call_3", "type": "function", "function": {"name": "book",
                                                          "arguments": '{"city": "Lyon", "nights": 2}'}},
    ]},
    {"role": "tool", "tool_call_id": "call_3", "content": "Booked: Hotel Rhone, 2 nights."},
    {"role": "assistant", "content": "Lyon (24 C) is warmer: Hotel Rhone is booked for 2 nights."},
]  # fmt: skip


def shape(steps: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(s["id"], s["kind"], s["turn"], s.get("name"), s.get("call_id")) for s in steps]


# ------------------------------------------------------------------------------------------ normalising
def test_an_openai_message_list_becomes_ordered_steps() -> None:
    rec = Record.from_mapping({"id": "r1", "trajectory": OPENAI})
    steps = rec.data["trajectory"]
    assert shape(steps) == [
        ("s1", "system", 1, None, None),
        ("s2", "user", 2, None, None),
        ("s3", "tool_call", 3, "get_weather", "call_1"),  # the parallel calls share their message's turn
        ("s4", "tool_call", 3, "get_weather", "call_2"),
        ("s5", "tool_result", 4, "get_weather", "call_1"),  # the tool's name from the call it answers
        ("s6", "tool_result", 5, "get_weather", "call_2"),
        ("s7", "assistant", 6, None, None),
        ("s8", "tool_call", 6, "book", "call_3"),
        ("s9", "tool_result", 7, "book", "call_3"),
        ("s10", "final_answer", 8, None, None),  # the last assistant message is the final answer
    ]
    assert steps[2]["arguments"] == {"city": "Paris"} and steps[7]["arguments"] == {"city": "Lyon", "nights": 2}
    assert steps[9]["content"] == "Lyon (24 C) is warmer: Hotel Rhone is booked for 2 nights."
    # the agent's own steps are what `target: {each: steps}` judges
    assert [s["id"] for s in rec.items("steps")] == ["s3", "s4", "s7", "s8", "s10"]
    # normalising a normalised trajectory changes nothing: a stored record reads back as it was
    assert normalise_trajectory(steps, "again") == steps
    assert Record.from_mapping({"id": "r1", "trajectory": steps}).hash == rec.hash


def test_langchain_messages_plain_steps_bare_calls_and_json_text_read_alike() -> None:
    """The same trajectory as LangChain message dicts (type human / ai / tool, ``tool_calls`` {name, args, id}),
    as plain JSONL steps (kind aliases: thought, action, observation, final), and inside {"messages": …} as a
    CSV cell's JSON text: the same kinds, names, arguments and contents."""
    langchain = [
        {"type": "human", "content": "Weather in Paris?"},
        {"type": "ai", "content": "", "tool_calls": [{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}]},
        {"type": "tool", "content": "18 C", "tool_call_id": "c1", "name": "get_weather"},
        {"type": "ai", "content": "18 C in Paris."},
    ]
    plain = [
        {"kind": "user", "content": "Weather in Paris?"},
        {"kind": "action", "tool": "get_weather", "input": {"city": "Paris"}, "call_id": "c1"},
        {"kind": "observation", "name": "get_weather", "output": "18 C", "call_id": "c1"},
        {"kind": "final", "text": "18 C in Paris."},
    ]
    cell = json.dumps({"messages": langchain})
    want = ["user", "tool_call", "tool_result", "final_answer"]
    for given in (langchain, plain, cell):
        steps = Record.from_mapping({"trajectory": given}).data["trajectory"]
        assert [s["kind"] for s in steps] == want
        call = (steps[1]["name"], steps[1]["arguments"], steps[1]["call_id"])
        assert call == ("get_weather", {"city": "Paris"}, "c1")
        assert (steps[2]["content"], steps[3]["content"]) == ("18 C", "18 C in Paris.")
    # a reference as bare tool calls (OpenAI's or LangChain's shape): tool calls only, no final answer
    bare = [{"id": "call_9", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"name": "book", "args": {"city": "Paris"}}]  # fmt: skip
    ref = Record.from_mapping({"expected_trajectory": bare}).data["expected_trajectory"]
    assert shape(ref) == [("s1", "tool_call", 1, "get_weather", "call_9"), ("s2", "tool_call", 2, "book", None)]
    # a tool result given as an object is its JSON text
    obj = normalise_trajectory([{"kind": "tool_result", "output": {"temp": 18, "unit": "C"}}], "t")
    assert obj[0]["content"] == '{"temp": 18, "unit": "C"}'
    # a trajectory written out as text (not JSON) stays text, as it was read before trajectories were data
    log = "Thought: look it up\nAction: get_weather(Paris)\nObservation: 18 C"
    assert Record.from_mapping({"trajectory": log}).data["trajectory"] == log


def test_step_ids_are_the_steps_own_else_their_place_and_stay_put() -> None:
    given = [
        {"id": "u-1", "role": "user", "content": "Hi"},
        {"id": "m-2", "role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "c1", "function": {"name": "f", "arguments": "{}"}}]},  # two steps: neither takes m-2
        {"id": "m-3", "role": "tool", "tool_call_id": "c1", "content": "x"},
        {"step_id": "done", "kind": "final_answer", "content": "Bye", "latency_ms": 40},
    ]  # fmt: skip
    steps = normalise_trajectory(given, "t")
    assert [s["id"] for s in steps] == ["u-1", "s2", "s3", "m-3", "done"]
    assert steps[1]["metadata"] == {} if "metadata" in steps[1] else True
    assert steps[4]["metadata"] == {"latency_ms": 40}  # keys greval does not read are kept, not dropped
    assert normalise_trajectory(steps, "t") == steps
    spec = resolve_specs(["step_usefulness"], with_dependencies=False)[0]
    assert isinstance(spec, Spec)
    shown = render_inputs(spec, {"trajectory": steps}, None, ["s2", "s3", "done"])
    assert shown.startswith("## Trajectory (What the agent did: its messages, tool calls with their results")
    assert "\n[u-1] step 1, user: Hi\n[s2] assistant: Looking.\n[s3] tool call f({}) [c1]\n" in shown
    assert "[m-3] step 4, tool result (f, c1): x\n[done] step 5, final answer: Bye" in shown
    assert shown.rstrip().endswith("Item ids: s2, s3, done")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"steps": 3}', "trajectory must be a list of messages, steps or tool calls"),
        (["hi"], "trajectory: item 1 must be an object (a message, a step or a tool call), got str"),
        ([{"role": "robot", "content": "x"}], "trajectory: item 1 is neither a message (role user, assistant"),
        ([{"kind": "dance"}], "trajectory: item 1 is neither a message"),
        ([{"role": "assistant", "content": ""}], "trajectory: item 1 (assistant) has no content and no tool call"),
        ([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}],
         "trajectory: item 1, tool call 1: a tool call without a name"),
        ([{"id": "a", "role": "user", "content": "x"}, {"id": "a", "role": "assistant", "content": "y"}],
         "two trajectory steps have the id 'a'"),
    ],
)  # fmt: skip
def test_a_trajectory_that_cannot_be_read_is_one_line(bad: Any, message: str) -> None:
    with pytest.raises(UserError) as err:
        Record.from_mapping({"trajectory": bad}, where="data.jsonl: record 3")
    assert str(err.value).startswith("data.jsonl: record 3: ") and message in str(err.value), str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------ bad input
def run_cli(args: list[str]) -> Any:
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_bad_trajectories_are_one_line_each_and_the_run_goes_on(tmp_path: Path) -> None:
    """Arguments that are not JSON, a trajectory without a final answer, a reference calling a tool the agent
    never had: a note each when the file is read, an error verdict where a metric cannot score the record, and
    every other record scored; the run exits 0."""
    ok = {"id": "ok", "trajectory": OPENAI, "tools": [WEATHER, "book"],
          "expected_trajectory": [{"name": "get_weather", "args": {"city": "Lyon"}},
                                  {"name": "get_weather", "args": {"city": "Paris"}},
                                  {"name": "book", "args": {"city": "Lyon", "nights": 2}}]}  # fmt: skip
    broken = {**ok, "id": "not-json", "trajectory": [OPENAI[1], {"role": "assistant", "tool_calls": [
        {"id": "x", "function": {"name": "get_weather", "arguments": "{city: Paris"}}]}, OPENAI[-1]]}  # fmt: skip
    unfinished = {**ok, "id": "unfinished", "trajectory": OPENAI[:5]}
    unknown = {**ok, "id": "unknown-tool", "expected_trajectory": [{"name": "refund", "args": {}}]}
    data = tmp_path / "agents.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in (ok, broken, unfinished, unknown)), encoding="utf-8")
    store = tmp_path / "store.sqlite"
    res = run_cli(["run", str(data), "-s", "tool_call_f1", "-s", "tool_call_validity", "-s", "trajectory_strict_match",
                   "--store", str(store)])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = " ".join(res.output.split())
    assert (
        f"{data}: 1 trajectory(ies) end without a final answer (the last step is not an assistant message): "
        "record 3 (unfinished); judged as they are"
    ) in out
    assert (
        f"{data}: 1 tool call(s) have arguments that are not JSON, kept as text (the trajectory metrics count such a "
        "call invalid or give its record an error verdict): record 2 step s2 (get_weather): not JSON (Expecting "
        "property name enclosed in double quotes at character 1)"
    ) in out
    with Store(store) as st:
        rows = {(r["spec"], r["record_id"], r["item_id"]): r for r in item_rows(st)}
    assert rows["tool_call_f1", "ok", ""]["score"] == 1.0
    # strict against a list of calls: the two calls of one assistant message match in either order
    assert rows["trajectory_strict_match", "ok", ""]["score"] == 1.0
    assert rows["tool_call_f1", "not-json", ""]["error"] == (
        "trajectory step s2: the arguments of get_weather are not JSON (Expecting property name enclosed in double "
        "quotes at character 1)"
    )
    assert rows["tool_call_validity", "not-json", "step:s2"]["label"] == "invalid"  # validity scores it, invalid
    assert rows["tool_call_validity", "unfinished", ""]["score"] == 1.0  # its two calls are valid
    assert rows["tool_call_f1", "unknown-tool", ""]["error"] == (
        "expected_trajectory step s1 calls 'refund', a tool the agent never had (tools: get_weather, book)"
    )
    assert rows["tool_call_f1", "unfinished", ""]["status"] == "ok"


# ------------------------------------------------------------------------------------------ trace sources
def records_of(path: Path) -> tuple[list[Record], list[str]]:
    rows = open_data(path, None, None, None)
    assert isinstance(rows, TraceRows), f"{path.name} was not recognised as a trace export"
    return [r.record() for r in rows], rows.notes


def langchain_agent_runs(llm: OpenAIServer) -> list[dict[str, Any]]:
    """A LangChain tool-calling agent (ChatOpenAI with a bound tool, against the test server, which answers a
    request offering tools with a call to the first) recorded by LangChain's own tracer and serialised by
    langsmith's JSON encoder, as the SDK sends runs to LangSmith (see tests/fixtures/traces/README.md)."""
    from langchain_core.messages import BaseMessage, HumanMessage
    from langchain_core.runnables import RunnableConfig, RunnableLambda
    from langchain_core.tools import tool
    from langchain_core.tracers.run_collector import RunCollectorCallbackHandler
    from langchain_core.tracers.schemas import Run
    from langchain_openai import ChatOpenAI
    from langsmith._internal._serde import dumps_json

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"18 C and cloudy in {city}"

    model = ChatOpenAI(model="agent-test", base_url=llm.base_url, api_key="sk-test", max_retries=0)  # type: ignore[arg-type]

    def agent(question: str, config: RunnableConfig) -> str:
        msgs: list[BaseMessage] = [HumanMessage(question)]
        ai = model.bind_tools([get_weather]).invoke(msgs, config=config)
        msgs.append(ai)
        msgs += [get_weather.invoke(call, config=config) for call in ai.tool_calls]
        return str(model.invoke(msgs, config=config).content)

    collector = RunCollectorCallbackHandler()
    RunnableLambda(agent, name="weather-agent").invoke("Weather in Paris?", config={"callbacks": [collector]})

    def rows(run: Run) -> list[dict[str, Any]]:
        row = run.model_dump(exclude={"child_runs", "serialized", "dangerously_allow_filesystem", "attachments"})
        return [json.loads(dumps_json(row)), *(r for child in run.child_runs for r in rows(child))]

    return rows(collector.traced_runs[0])


def test_langsmith_runs_of_a_langchain_agent_become_a_trajectory(llm: OpenAIServer, tmp_path: Path) -> None:
    runs = langchain_agent_runs(llm)
    assert [r["run_type"] for r in runs] == ["chain", "llm", "tool", "llm"]
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    [rec], notes = records_of(path)
    steps = rec.data["trajectory"]
    assert [s["kind"] for s in steps] == ["user", "tool_call", "tool_result", "final_answer"]
    call, result = steps[1], steps[2]
    assert call["name"] == "get_weather" and set(call["arguments"]) == {"city"}
    assert call["call_id"] == result["call_id"] == runs[2]["extra"]["tool_call_id"]  # the call its result answers
    assert result["content"] == f"18 C and cloudy in {call['arguments']['city']}"
    assert steps[0]["content"] == "Weather in Paris?" and steps[3]["content"] == rec.data["answer"]
    assert [s["metadata"]["span_id"] for s in steps[1:]] == [runs[1]["id"], runs[2]["id"], runs[3]["id"]]
    assert [t["function"]["name"] for t in rec.data["tools"]] == ["get_weather"]  # what the LLM run was offered
    assert not any("mapped to no field" in n for n in notes), notes  # the tool run is read


LANGFUSE = [
    {"id": "t-1", "traceId": "lf-1", "type": "SPAN", "name": "agent", "startTime": "2026-11-26T10:00:00Z",
     "endTime": "2026-11-26T10:00:05Z", "input": {"question": "Weather in Paris?"}, "output": "18 C in Paris."},
    {"id": "g-1", "traceId": "lf-1", "parentObservationId": "t-1", "type": "GENERATION", "name": "plan",
     "startTime": "2026-11-26T10:00:01Z", "input": {"messages": [{"role": "user", "content": "Weather in Paris?"}],
     "tools": [WEATHER]}, "output": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_a", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
     "usageDetails": {"input": 20, "output": 8, "total": 28}},
    {"id": "x-1", "traceId": "lf-1", "parentObservationId": "t-1", "type": "TOOL", "name": "get_weather",
     "startTime": "2026-11-26T10:00:02Z", "input": {"city": "Paris"}, "output": "18 C"},
    {"id": "g-2", "traceId": "lf-1", "parentObservationId": "t-1", "type": "GENERATION", "name": "answer",
     "startTime": "2026-11-26T10:00:03Z", "output": {"role": "assistant", "content": "18 C in Paris."},
     "usageDetails": {"input": 30, "output": 6, "total": 36}},
]  # fmt: skip


def test_langfuse_observations_of_an_agent_become_a_trajectory(tmp_path: Path) -> None:
    """Langfuse's observation shape (its public API's Observation: GENERATION output as an OpenAI message with
    tool_calls, a TOOL observation with the call's input and output), written by hand from that field list."""
    path = tmp_path / "observations.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in LANGFUSE), encoding="utf-8")
    [rec], _ = records_of(path)
    steps = rec.data["trajectory"]
    assert shape(steps) == [
        ("s1", "user", 0, None, None),
        ("s2", "tool_call", 2, "get_weather", "call_a"),
        ("s3", "tool_result", 3, "get_weather", None),  # paired with its call by name (no call id on the tool)
        ("s4", "final_answer", 4, None, None),
    ]
    assert steps[1]["arguments"] == {"city": "Paris"} and steps[2]["content"] == "18 C"
    assert rec.data["tools"] == [WEATHER]


def test_a_tool_span_no_llm_span_asked_for_is_its_own_call_and_a_trace_without_an_answer_is_said(
    tmp_path: Path,
) -> None:
    """An agent framework that records its tool steps but not its LLM's tool calls: each tool span is a call and
    its result; a trace that ends on a tool result has no final answer, said in one note."""
    tools_only = [o for o in LANGFUSE if o["type"] != "GENERATION"]
    tools_only[0] = {**tools_only[0], "output": None}
    path = tmp_path / "observations.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in tools_only), encoding="utf-8")
    [rec], notes = records_of(path)
    assert [(s["kind"], s.get("name")) for s in rec.data["trajectory"]] == [
        ("user", None), ("tool_call", "get_weather"), ("tool_result", "get_weather"),
    ]  # fmt: skip
    assert rec.data["trajectory"][1]["arguments"] == {"city": "Paris"}
    assert any(
        "1 of 1 trace(s) have no final answer in its trajectory (it ends on a tool call or a tool result): lf-1" in n
        for n in notes
    ), notes


# --------------------------------------------------------------------------- OpenInference in a real Phoenix
TOY_AGENT = '''
"""A toy agent: the openai SDK instrumented by OpenInference, two tools, spans to Phoenix over OTLP/HTTP."""
import json, sys
import openai
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.semconv.resource import ResourceAttributes
from openinference.semconv.trace import OpenInferenceSpanKindValues as K, SpanAttributes as A
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

phoenix, project, llm = sys.argv[1:4]
provider = TracerProvider(resource=Resource({ResourceAttributes.PROJECT_NAME: project}))
provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=phoenix + "/v1/traces")))
OpenAIInstrumentor().instrument(tracer_provider=provider)
tracer = provider.get_tracer("toy-agent")
client = openai.OpenAI(base_url=llm, api_key="sk-toy-agent", max_retries=0)
TOOLS = {"get_weather": lambda a: f"18 C in {a.get('city')}", "get_time": lambda a: "10:00"}
SCHEMAS = [{"type": "function", "function": {"name": name, "description": name, "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}} for name in TOOLS]
for question in ["Weather in Paris?", "Time in Oslo?"]:
    with tracer.start_as_current_span("agent") as root:
        root.set_attribute(A.OPENINFERENCE_SPAN_KIND, K.AGENT.value)
        root.set_attribute(A.INPUT_VALUE, question)
        msgs = [{"role": "user", "content": question}]
        reply = client.chat.completions.create(model="toy", messages=msgs, tools=SCHEMAS).choices[0].message
        msgs.append(reply.model_dump(exclude_none=True))
        for call in reply.tool_calls or []:
            with tracer.start_as_current_span(call.function.name) as span:
                span.set_attribute(A.OPENINFERENCE_SPAN_KIND, K.TOOL.value)
                span.set_attribute(A.TOOL_NAME, call.function.name)
                span.set_attribute("tool.id", call.id)
                span.set_attribute(A.INPUT_VALUE, call.function.arguments)
                out = TOOLS[call.function.name](json.loads(call.function.arguments))
                span.set_attribute(A.OUTPUT_VALUE, out)
            msgs.append({"role": "tool", "tool_call_id": call.id, "content": out})
        answer = client.chat.completions.create(model="toy", messages=msgs).choices[0].message.content
        root.set_attribute(A.OUTPUT_VALUE, answer)
        ctx = root.get_span_context()
        print(json.dumps({"trace_id": f"{ctx.trace_id:032x}", "question": question, "answer": answer}))
provider.force_flush()
'''


@pytest.fixture(scope="module")
def phoenix() -> Iterator[Any]:
    from greval.testing.phoenix import PhoenixServer

    with PhoenixServer() as px:
        yield px


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("phoenix") is None, reason="pip install 'greval[phoenix]'")
def test_an_openinference_agent_in_phoenix_is_read_as_trajectories_and_judged_per_step(
    phoenix: Any, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """A toy agent instrumented by OpenInference (its own process) traced into a real Phoenix: each trace is a
    trajectory (the question, the LLM span's tool call, the TOOL span's result, the final answer) with the tools
    its LLM span was offered; a run judges its steps and scores its calls against the schemas."""
    openai_server.reset()
    script = tmp_path / "toy_agent.py"
    script.write_text(TOY_AGENT, encoding="utf-8")
    emitted = subprocess.run(
        [sys.executable, str(script), phoenix.url, "agents", openai_server.base_url],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    traces = [json.loads(line) for line in emitted.stdout.splitlines()]
    address = f"phoenix://{phoenix.url.removeprefix('http://')}/agents"
    rows = open_data(address, None, None, None)
    recs = {r.id: r.record() for r in rows}
    assert set(recs) == {t["trace_id"] for t in traces}
    for t in traces:
        rec = recs[t["trace_id"]]
        steps = rec.data["trajectory"]
        assert [s["kind"] for s in steps] == ["user", "tool_call", "tool_result", "final_answer"], steps
        assert steps[0]["content"] == t["question"] and steps[3]["content"] == t["answer"]
        assert steps[1]["name"] == "get_weather" and steps[2]["name"] == "get_weather"  # the first tool offered
        assert steps[2]["content"] == f"18 C in {steps[1]['arguments']['city']}"
        assert steps[1]["call_id"] == steps[2]["call_id"]
        assert [tool["function"]["name"] for tool in rec.data["tools"]] == ["get_weather", "get_time"]
    store = tmp_path / "store.sqlite"
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "greval", "run", address, "-s", "step_usefulness", "-s", "tool_call_validity",
         "--store", str(store), "--judge", "openai:judge-test", "--base-url", openai_server.base_url, "--quiet"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    with Store(store) as st:
        got = {(r["spec"], r["record_id"], r["item_id"]) for r in item_rows(st) if r["status"] == "ok"}
    for t in traces:  # the agent's steps judged (its call and its final answer), the call checked
        tid = t["trace_id"]
        assert {i for s, r, i in got if s == "step_usefulness" and r == tid} == {"s2", "s4"}
        assert {i for s, r, i in got if s == "tool_call_validity" and r == tid} == {"", "step:s2"}
    assert ": 10 span annotation(s) written, 0 already there" in done.stdout + done.stderr, done.stdout
    first = check_annotations_in_phoenix(phoenix, store, traces)

    # a re-run (in this process: no start-up to pay) writes nothing: no annotation added or rewritten
    again = CliRunner().invoke(main, done.args[3:], env={"OPENAI_API_KEY": "sk-test"}, catch_exceptions=False)
    assert again.exit_code == 0 and ": 0 span annotation(s) written, 10 already there" in again.output, again.output
    assert check_annotations_in_phoenix(phoenix, store, traces) == first


def check_annotations_in_phoenix(phoenix: Any, store: Path, traces: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Read back from Phoenix's REST API: each trajectory's verdicts on its root (agent) span, each step verdict
    on its step's span — the call's on the TOOL span that ran it, the final answer's on the LLM span that wrote
    it — once each, as stored; their (id, updated_at)."""
    from phoenix.client import Client

    client = Client(base_url=phoenix.url)
    spans = [dict(s) for s in client.spans.get_spans(project_identifier="agents", limit=1000)]
    with Store(store) as st:
        items = item_rows(st)
        specs = {k: st.any_spec(k) for k in {r["spec_key"] for r in items}}
    records = {(r["spec"], r["record_id"]): r for r in record_rows(items, specs)}
    wanted: dict[tuple[str, str, str], tuple[Any, ...]] = {}  # (span, metric, identifier) -> (label, score, why)
    for t in traces:
        mine = sorted((s for s in spans if s["context"]["trace_id"] == t["trace_id"]), key=lambda s: s["start_time"])
        root = next(s["context"]["span_id"] for s in mine if not s.get("parent_id"))
        tool = next(s["context"]["span_id"] for s in mine if s["span_kind"] == "TOOL")
        answer = [s["context"]["span_id"] for s in mine if s["span_kind"] == "LLM"][-1]
        for spec in ("step_usefulness", "tool_call_validity"):
            rec = records[spec, t["trace_id"]]
            wanted[root, spec, "greval"] = (rec["label"], rec["score"])
        place = {"s2": tool, "s4": answer, "step:s2": tool}
        for r in items:
            if r["record_id"] == t["trace_id"] and r["item_id"]:
                step = r["item_id"].removeprefix("step:")
                wanted[place[r["item_id"]], r["spec"], f"greval:step:{step}"] = (r["label"], r["score"], r["reason"])
    got = client.spans.get_span_annotations(
        span_ids=sorted({k[0] for k in wanted}), project_identifier="agents",
        include_annotation_names=["step_usefulness", "tool_call_validity"],
    )  # fmt: skip
    have: dict[tuple[str, str, str], tuple[Any, ...]] = {}
    for a in map(dict, got):
        key = (a["span_id"], a["name"], a["identifier"])
        assert key not in have, f"two annotations {key}"
        res = a["result"] or {}
        have[key] = (res.get("label"), res.get("score"), res.get("explanation"))
        if a["identifier"] == "greval":  # a record's verdict: its label and score (its explanation, its counts)
            have[key] = have[key][:2]
    assert have == wanted
    return sorted((a["id"], a["updated_at"]) for a in map(dict, got))


def test_each_step_goes_back_to_its_own_span() -> None:
    """Where step verdicts go in a trace: a call to the tool span that ran it (by call id, else the first
    pending call of its name, as the trajectory paired them), a call no tool span ran to the LLM span that
    asked for it (such calls share it: their annotations' identifiers name the step), a message to its LLM
    span, the user's step nowhere."""
    raw = [
        {"kind": "user", "content": "Weather in Paris and Lyon?", "turn": 0},
        {"kind": "tool_call", "name": "get_weather", "arguments": {"city": "Paris"}, "call_id": "a", "turn": 1,
         "span_id": "llm1"},
        {"kind": "tool_call", "name": "get_weather", "arguments": {"city": "Lyon"}, "turn": 1, "span_id": "llm1"},
        {"kind": "tool_call", "name": "log", "arguments": {}, "turn": 1, "span_id": "llm1"},
        {"kind": "tool_result", "name": "get_weather", "content": "18 C", "call_id": "a", "turn": 2,
         "span_id": "tool-paris"},
        {"kind": "tool_result", "name": "get_weather", "content": "24 C", "turn": 3, "span_id": "tool-lyon"},
        {"kind": "assistant", "content": "Lyon.", "turn": 4, "span_id": "llm2"},
    ]  # fmt: skip
    steps = normalise_trajectory(raw, "trajectory")
    assert step_spans(steps) == {"s2": "tool-paris", "s3": "tool-lyon", "s4": "llm1", "s7": "llm2"}


# -------------------------------------------------------------------------------------- judged end to end
def step_verdicts(labels: dict[str, str]) -> dict[str, Any]:
    return {"verdicts": [{"id": s, "reason": f"why {s} is {lab}", "label": lab} for s, lab in labels.items()]}


def test_the_judged_trajectory_specs_run_end_to_end(llm: OpenAIServer, tmp_path: Path) -> None:
    """`greval run` with the shipped judged trajectory specs on a JSONL file: step_usefulness asks one verdict per
    agent step of each trajectory (tool results and the user's steps are shown, not judged) in one call; the
    record metrics one verdict per trajectory, each prompt showing the steps."""
    llm.script(
        [
            {
                "match": "Item ids: s3, s4, s7, s8, s10",
                "action": {"type": "respond", "content": step_verdicts(
                    {"s3": "Useful", "s4": "Useful", "s7": "Useful", "s8": "Useful", "s10": "Harmful"})},
            },
        ]
    )  # fmt: skip
    rows = [
        {"id": "trip", "trajectory": OPENAI, "tools": [WEATHER], "task": "Book the warmer city.",
         "plan": "1. Get both weathers. 2. Book the warmer city."},
        {"id": "short", "trajectory": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]},
        {"id": "silent", "trajectory": [{"role": "user", "content": "Anyone?"}]},
    ]  # fmt: skip
    data = tmp_path / "agents.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = tmp_path / "store.sqlite"
    record_specs = ["agent_task_completion", "plan_adherence", "tool_argument_correctness", "final_answer_faithfulness"]
    args = ["run", str(data), "-s", "step_usefulness", *(a for s in record_specs for a in ("-s", s)),
            "--store", str(store), "--judge", "openai:judge-test", "--base-url", llm.base_url]  # fmt: skip
    res = run_cli(args)
    assert res.exit_code == 0, res.output
    with Store(store) as st:
        items = item_rows(st)
        specs = {k: st.any_spec(k) for k in {r["spec_key"] for r in items}}
    ok = {(r["spec"], r["record_id"], r["item_id"]): r for r in items if r["status"] == "ok"}
    steps = {(rid, i): r["label"] for (s, rid, i), r in ok.items() if s == "step_usefulness" and i}
    assert steps == {("trip", "s3"): "Useful", ("trip", "s4"): "Useful", ("trip", "s7"): "Useful",
                     ("trip", "s8"): "Useful", ("trip", "s10"): "Harmful", ("short", "s2"): ok[
                         "step_usefulness", "short", "s2"]["label"]}  # fmt: skip
    per_record = {(r["spec"], r["record_id"]): r for r in record_rows(items, specs)}
    assert per_record["step_usefulness", "trip"]["score"] == pytest.approx(4 / 5)  # the share of Useful steps
    assert per_record["step_usefulness", "trip"]["units"] == 5
    silent = per_record["step_usefulness", "silent"]
    assert (silent["status"], silent["error"]) == ("skipped", "missing required input: trajectory (no agent step)")
    for spec in record_specs:
        assert {rid for (s, rid, i) in ok if s == spec and i == ""} == {"trip", "short", "silent"}, spec
    prompts = [r["messages"][-1]["content"] for r in llm.requests()]
    per_step = [p for p in prompts if "Item ids: s3, s4, s7, s8, s10" in p]
    assert len(per_step) == 1  # every step of a trajectory judged in one call
    assert '[s3] tool call get_weather({"city":"Paris"}) [call_1]' in per_step[0]
    assert "[s5] tool result (get_weather, call_1): 18 C" in per_step[0]
    plan = [p for p in prompts if "## Plan (The plan the agent was given" in p]
    assert len(plan) == 1 and "[s10] final answer: Lyon (24 C) is warmer" in plan[0]
    tools = [p for p in prompts if "## Tools (The tools the agent had" in p]
    assert len(tools) == 1 and '"name": "get_weather"' in tools[0]
    system = next(r["messages"][0]["content"] for r in llm.requests() if "Item ids: s3" in r["messages"][-1]["content"])
    assert "Judge each agent step separately" in system
    assert "judge only the agent's steps whose ids are listed" in system


def test_the_trajectory_specs_lint_clean() -> None:
    """Each shipped trajectory spec: every label described, no lint finding (greval spec lint)."""
    files = [ROOT / "metric_specs" / f"{n}.yaml" for n in (
        "agent_task_completion", "step_usefulness", "plan_adherence", "tool_argument_correctness",
        "final_answer_faithfulness", "computed_trajectory")]  # fmt: skip
    res = run_cli(["spec", "lint", *map(str, files)])
    assert res.exit_code == 0, res.output
    assert re.search(rf"{len(files)} file\(s\): 0 error\(s\), 0 warning\(s\)", res.output), res.output
    schema = spec_json_schema()  # what an editor checks them against
    for f in files:
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
        for one in data.get("specs", [data]):
            jsonschema.validate(one, schema)


# -------------------------------------------------------------------------- a trajectory's label by a rule
RULED = {  # trajectory -> (the judge's step labels, a person's), steps s2 (the call) and s4 (the answer)
    "t0": ({"s2": "Useful", "s4": "Useful"}, {"s2": "Useful", "s4": "Useful"}),
    "t1": ({"s2": "Harmful", "s4": "Useful"}, {"s2": "Harmful", "s4": "Redundant"}),
    "t2": ({"s2": "Useful", "s4": "Redundant"}, {"s2": "Harmful", "s4": "Useful"}),
    "t3": ({"s2": "Harmful", "s4": "Harmful"}, {"s2": "Useful", "s4": "Harmful"}),
    "t4": ({"s2": "Redundant", "s4": "Harmful"}, {"s2": "Redundant", "s4": "Redundant"}),
}


def ruled_trajectory(rid: str) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    return [{"role": "user", "content": f"Trip {rid}: weather in Oslo?"},
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "5 C"},
            {"role": "assistant", "content": "5 C."}]  # fmt: skip


def test_a_trajectory_label_by_a_rule_over_its_step_labels(llm: OpenAIServer, tmp_path: Path) -> None:
    """``target.record_label`` (any step Harmful -> bad, else good): declared on a stored version it re-judges
    nothing; the run's summary counts the trajectories by it, the results carry it, and ``greval agreement
    --level record`` compares the judge's with each person's, both by the rule from the same steps' labels."""
    llm.script([{"match": f"Trip {rid}:", "action": {"type": "respond", "text": json.dumps(step_verdicts(judged))}}
                for rid, (judged, _) in RULED.items()])  # fmt: skip
    data = tmp_path / "agents.jsonl"
    data.write_text("".join(json.dumps({"id": r, "trajectory": ruled_trajectory(r)}) + "\n" for r in RULED))
    spec = yaml.safe_load((ROOT / "metric_specs" / "step_usefulness.yaml").read_text(encoding="utf-8"))
    spec["target"]["record_label"] = {"rule": "any", "labels": ["Harmful"], "then": "bad", "otherwise": "good"}
    ruled = tmp_path / "ruled.yaml"
    ruled.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    store = tmp_path / "store.sqlite"
    base = ["run", str(data), "--store", str(store), "--judge", "openai:judge-test", "--base-url", llm.base_url]
    assert run_cli([*base, "-s", "step_usefulness"]).exit_code == 0
    res = run_cli([*base, "-s", str(ruled)])
    assert res.exit_code == 0 and ", 0 judgement(s) to make" in res.output, res.output  # the same version
    bad = lambda labels: any(lab == "Harmful" for lab in labels.values())  # noqa: E731
    judge = {rid: "bad" if bad(j) else "good" for rid, (j, _) in RULED.items()}
    counts = Counter(judge.values())
    said = f"step_usefulness: records by its rule (any item Harmful → bad, else good): bad {counts['bad']}, good "
    assert said + str(counts["good"]) in " ".join(res.output.split()), res.output
    with Store(store) as st:
        items = item_rows(st)
        rows = record_rows(items, {k: st.any_spec(k) for k in {r["spec_key"] for r in items}})
        assert {r["record_id"]: r["label"] for r in rows} == judge
        hashes = {r["record_id"]: r["record_hash"] for r in rows}
        st.put_human_labels([
            {"spec_name": "step_usefulness", "record_id": rid, "record_hash": hashes[rid], "item_id": sid,
             "annotator": "ann", "label": lab, "status": "submitted"}
            for rid, (_, person) in RULED.items() for sid, lab in person.items()
        ])  # fmt: skip
    report = tmp_path / "agreement.json"
    res = run_cli(["agreement", "--store", str(store), "--spec", "step_usefulness", "--level", "record",
                   "--bootstrap", "0", "--json", str(report)])  # fmt: skip
    assert res.exit_code == 0, res.output
    human = {rid: "bad" if bad(p) else "good" for rid, (_, p) in RULED.items()}
    pairs = [(human[r], judge[r]) for r in RULED]
    metrics = json.loads(report.read_text())["metrics"]
    assert metrics["accuracy"]["value"] == pytest.approx(sum(h == j for h, j in pairs) / len(pairs))
    kappa = cohen_kappa_score([h for h, _ in pairs], [j for _, j in pairs])
    assert 0 < kappa < 1 and metrics["cohen_kappa"]["value"] == pytest.approx(kappa)
    spec["target"]["record_label"]["labels"] = ["Awful"]
    ruled.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    res = run_cli([*base, "-s", str(ruled)])
    assert res.exit_code == 2 and "ruled.yaml: target.record_label.labels: 'Awful' is not a scale label" in res.output


# ------------------------------------------------------------------------------------------ system × group
def agent_row(
    rid: str, agent: str, task: str, calls: list[tuple[str, str]], want: list[tuple[str, str]]
) -> dict[str, Any]:
    """One trajectory of an agent (``calls``: tool name, city) with its reference (``want``)."""
    steps: list[dict[str, Any]] = [{"role": "user", "content": f"{task} please."}]
    for n, (name, city) in enumerate(calls, 1):
        call = {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": json.dumps({"city": city})}}
        steps += [
            {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": "ok"},
        ]
    steps.append({"role": "assistant", "content": "Done."})
    reference = [{"name": name, "arguments": {"city": city}} for name, city in want]
    return {"id": rid, "agent": agent, "task_type": task, "trajectory": steps, "expected_trajectory": reference}


def test_agents_system_by_group_table_is_the_same_figures_as_pandas(tmp_path: Path) -> None:
    """Issue 45's "system × group tables for agents": two agents (the system column) over two kinds of task (the
    group column), scored by tool-call F1 and the strict trajectory match; the report's system × group cells
    (JSON; the page draws them) equal pandas' group means over the records' own rows, computed here independently."""
    want = [("get_weather", "Paris"), ("get_time", "Paris")]
    rows = []
    for i in range(12):
        agent, task = ("v1", "v2")[i % 2], ("weather", "time")[(i // 2) % 2]
        calls = want if (i % 3) else [*want[:1], ("get_weather", "Lyon")]  # every third agent run is half right
        if agent == "v2" and task == "time":
            calls = list(reversed(calls))  # v2 reorders its calls on time tasks: strict match fails
        rows.append(agent_row(f"t{i}", agent, task, calls, want))
    data = tmp_path / "agents.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store, out = tmp_path / "s.sqlite", tmp_path / "out"
    res = run_cli(["run", str(data), "-s", "tool_call_f1", "-s", "trajectory_strict_match", "--store", str(store)])
    assert res.exit_code == 0, res.output
    args = ["report", "--store", str(store), "-o", str(out), "--system-column", "agent", "--group-column", "task_type"]
    res = run_cli([*args, "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    tables = {t["metric"]: t for t in rep["groups"]}
    assert set(tables) == {"tool_call_f1", "trajectory_strict_match"}
    from greval import load_results

    recs = load_results(store, level="record")
    frame = recs.merge(pd.DataFrame(rows).rename(columns={"id": "record_id"}), on="record_id", how="left")
    page = (out / "index.html").read_text(encoding="utf-8")
    for metric, table in tables.items():
        sub = frame[(frame["spec"] == metric) & frame["status"].isin(["ok", "partial"])]
        expect = sub.groupby(["agent", "task_type"]).agg(n=("score", "size"), mean=("score", "mean"))
        got = {(c["system"], c["group"]): c for c in table["cells"]}
        assert set(got) == set(expect.index) and len(got) == 4
        for key, row in expect.iterrows():
            assert got[key]["stats"]["n"] == row["n"] == 3
            assert got[key]["stats"]["mean"]["mean"] == pytest.approx(row["mean"], abs=1e-12)
        assert f'alt="{metric} heatmap by system and task_type"' in page
    strict = {(c["system"], c["group"]): c["stats"]["mean"]["mean"] for c in tables["trajectory_strict_match"]["cells"]}
    assert strict["v2", "time"] == 0.0 and strict["v1", "time"] > 0  # the reordering shows where it happened

"""The trajectory metrics (greval.judge.computed.trajectory): LangChain agentevals' match modes compared with
agentevals itself on a table of hand-made cases, precision / recall / F1 of tool calls, the first wrong step,
tool-call validity against JSON schemas, and bad input as one error verdict per record."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from greval.judge.computed.trajectory import json_contains, json_equal
from greval.spec.computed import ArgMatch
from greval.types import ErrorKind, JudgeResult
from tests.judge.computed.conftest import computed_judge, computed_score, spec

MODES = ("strict", "unordered", "subset", "superset")


# --------------------------------------------------------------------------------- OpenAI-style messages
def call(tool_name: str, /, **args: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": tool_name, "arguments": json.dumps(args)}}


def asst(*calls: dict[str, Any], content: str = "") -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = list(calls)
    return msg


USER = {"role": "user", "content": "Plan my trip to Paris."}
FINAL = {"role": "assistant", "content": "Done: here is your trip."}


def tool(content: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "content": content}


def run_of(*turns: list[dict[str, Any]] | dict[str, Any]) -> list[dict[str, Any]]:
    """A trajectory: the user's message, each assistant message (a list of calls, or a message) with a tool
    message per call, the final answer."""
    out: list[dict[str, Any]] = [USER]
    for t in turns:
        if isinstance(t, list):
            out += [asst(*t), *[tool() for _ in t]]
        else:
            out.append(t)
    return [*out, FINAL]


def same_city(agent: dict[str, Any], ref: dict[str, Any]) -> bool:
    """A user's matcher (imported by greval as tests.judge.computed.test_trajectory:same_city)."""
    return str(agent.get("city", "")).strip().lower() == str(ref.get("city", "")).strip().lower()


def near(agent: dict[str, Any], ref: dict[str, Any]) -> bool:
    """An independent numeric-tolerance matcher (flat arguments): what greval's abs_tol 0.001 means."""
    return agent.keys() == ref.keys() and all(
        math.isclose(agent[k], ref[k], abs_tol=0.001) if isinstance(ref[k], float) else agent[k] == ref[k] for k in ref
    )


A, B, C = call("search", q="hotels"), call("book", hotel="Lune", nights=2), call("weather", city="Paris")

#: (case, agent's trajectory, reference, greval params, agentevals' (tool_args_match_mode, overrides), modes
#: compared). Each case sits on some mode's edge; the comment says which.
CASES: list[tuple[str, list[Any], list[Any], dict[str, Any], tuple[str, Any], tuple[str, ...]]] = [
    # every mode holds
    ("identical", run_of([A], [B]), run_of([A], [B]), {}, ("exact", None), MODES),
    # strict fails on order across messages; the set modes do not look at order
    ("reordered across messages", run_of([B], [A]), run_of([A], [B]), {}, ("exact", None), MODES),
    # the calls of one assistant message match in any order, even in strict
    ("reordered within one message", run_of([B, A]), run_of([A, B]), {}, ("exact", None), MODES),
    # strict compares messages: one message of two calls is not two messages of one
    ("one message vs two", run_of([A, B]), run_of([A], [B]), {}, ("exact", None), MODES),
    # a call made twice must be expected twice: only superset holds
    ("duplicate call by the agent", run_of([A], [A]), run_of([A]), {}, ("exact", None), MODES),
    # the reference expects it twice: the agent's one call is a subset, not a superset
    ("duplicate call in the reference", run_of([A]), run_of([A], [A]), {}, ("exact", None), MODES),
    # duplicate tool, different arguments, swapped: each call paired once, by its arguments
    (
        "duplicate tool, swapped arguments",
        run_of([call("search", q="b")], [call("search", q="a")]),
        run_of([call("search", q="a")], [call("search", q="b")]),
        {},
        ("exact", None),
        MODES,
    ),
    # an extra call: superset holds, subset and unordered do not
    ("one call more", run_of([A], [C], [B]), run_of([A], [B]), {}, ("exact", None), MODES),
    # a call missing: subset holds, superset does not
    ("one call fewer", run_of([A]), run_of([A], [B]), {}, ("exact", None), MODES),
    # nested JSON arguments with keys in another order are the same arguments
    (
        "nested arguments, other key order",
        run_of([call("plan", trip={"to": "Paris", "legs": [{"by": "train", "h": 2}], "pax": 2})]),
        run_of([call("plan", trip={"pax": 2, "legs": [{"h": 2, "by": "train"}], "to": "Paris"})]),
        {},
        ("exact", None),
        MODES,
    ),
    # one value deep inside differs: no mode matches
    (
        "nested arguments, a deep value differs",
        run_of([call("plan", trip={"legs": [{"by": "train", "h": 2}]})]),
        run_of([call("plan", trip={"legs": [{"by": "train", "h": 3}]})]),
        {},
        ("exact", None),
        MODES,
    ),
    # lists are ordered
    (
        "nested list in another order",
        run_of([call("fetch", ids=[1, 2])]),
        run_of([call("fetch", ids=[2, 1])]),
        {},
        ("exact", None),
        MODES,
    ),
    # the same arguments to another tool are another call
    (
        "other tool, same arguments",
        run_of([call("find", q="x")]),
        run_of([call("search", q="x")]),
        {},
        ("exact", None),
        MODES,
    ),
    # no call on either side: everything holds
    ("no calls at all", run_of(), run_of(), {}, ("exact", None), MODES),
    # the agent calls nothing: the empty set is a subset; nothing else holds
    ("the agent calls nothing", run_of(), run_of([A]), {}, ("exact", None), MODES),
    # an extra assistant message (no call) breaks strict's message-by-message comparison only
    (
        "an extra assistant message",
        run_of(asst(content="Let me think."), [A]),
        run_of([A]),
        {},
        ("exact", None),
        MODES,
    ),
    # arguments ignored: names alone
    (
        "arguments ignored",
        run_of([call("search", q="x")], [B]),
        run_of([call("search", q="y")], [B]),
        {"arguments": "ignore"},
        ("ignore", None),
        MODES,
    ),
    # one tool's arguments ignored, the other's exact
    (
        "per-tool override",
        run_of([call("search", q="x")], [call("book", hotel="Lune", nights=3)]),
        run_of([call("search", q="y")], [call("book", hotel="Lune", nights=2)]),
        {"per_tool": {"search": "ignore"}},
        ("exact", {"search": "ignore"}),
        MODES,
    ),
    (
        "per-tool override, the other tool matches",
        run_of([call("search", q="x")], [B]),
        run_of([call("search", q="y")], [B]),
        {"per_tool": {"search": "ignore"}},
        ("exact", {"search": "ignore"}),
        MODES,
    ),
    # a numeric tolerance (an independent matcher for agentevals)
    (
        "numbers within the tolerance",
        run_of([call("geo", lat=48.8566, name="Paris")]),
        run_of([call("geo", lat=48.857, name="Paris")]),
        {"arguments": {"match": "exact", "abs_tol": 0.001}},
        ("exact", {"geo": near}),
        MODES,
    ),
    (
        "numbers beyond the tolerance",
        run_of([call("geo", lat=48.85, name="Paris")]),
        run_of([call("geo", lat=48.857, name="Paris")]),
        {"arguments": {"match": "exact", "abs_tol": 0.001}},
        ("exact", {"geo": near}),
        MODES,
    ),
    # a user's function by import path (the same function given to agentevals)
    (
        "a user's function",
        run_of([call("weather", city=" PARIS ")], [call("weather", city="Lyon")]),
        run_of([call("weather", city="paris")], [call("weather", city="lyon")]),
        {"arguments": {"match": "function", "function": "tests.judge.computed.test_trajectory:same_city"}},
        ("exact", {"weather": same_city}),
        MODES,
    ),
    # the agent passes more arguments than the reference names: json_subset is agentevals' "superset" argument
    # mode where agentevals calls it as greval does (strict, superset; see the deviations below for the others)
    (
        "more arguments than the reference (json_subset)",
        run_of([call("weather", city="Paris", units="C")]),
        run_of([call("weather", city="Paris")]),
        {"arguments": "json_subset"},
        ("superset", None),
        ("strict", "superset"),
    ),
    (
        "fewer arguments than the reference (json_subset)",
        run_of([call("weather", city="Paris")]),
        run_of([call("weather", city="Paris", units="C")]),
        {"arguments": "json_subset"},
        ("superset", None),
        ("strict", "superset"),
    ),
]


def greval_match(mode: str, agent: Any, ref: Any, params: dict[str, Any]) -> float | None:
    res = computed_judge(
        spec("trajectory_match", {"mode": mode, **params}), {"trajectory": agent, "expected_trajectory": ref}
    )
    return computed_score(res)


@pytest.mark.parametrize(("case", "agent", "ref", "params", "theirs", "modes"), CASES, ids=[c[0] for c in CASES])
def test_the_match_modes_give_agentevals_figures(
    case: str, agent: Any, ref: Any, params: dict[str, Any], theirs: tuple[str, Any], modes: tuple[str, ...]
) -> None:
    """agentevals (LangChain's, installed from PyPI: the independent implementation) and greval, mode by mode."""
    match = pytest.importorskip("agentevals.trajectory.match", reason="pip install 'greval[test]'")
    args_mode, overrides = theirs
    got, want = {}, {}
    for mode in modes:
        evaluator = match.create_trajectory_match_evaluator(
            trajectory_match_mode=mode, tool_args_match_mode=args_mode, tool_args_match_overrides=overrides
        )
        want[mode] = 1.0 if evaluator(outputs=agent, reference_outputs=ref)["score"] else 0.0
        got[mode] = greval_match(mode, agent, ref, params)
    assert got == want


def test_the_table_covers_every_modes_edge() -> None:
    """Not vacuous: across the table, every mode both matches and fails, and the cases with duplicate calls,
    reordered calls and nested arguments are there."""
    match = pytest.importorskip("agentevals.trajectory.match", reason="pip install 'greval[test]'")
    seen: dict[str, set[bool]] = {m: set() for m in MODES}
    for _, agent, ref, _, (args_mode, overrides), modes in CASES:
        for mode in modes:
            ev = match.create_trajectory_match_evaluator(
                trajectory_match_mode=mode, tool_args_match_mode=args_mode, tool_args_match_overrides=overrides
            )
            seen[mode].add(bool(ev(outputs=agent, reference_outputs=ref)["score"]))
    assert all(v == {True, False} for v in seen.values()), seen
    names = " ".join(c[0] for c in CASES)
    assert "duplicate" in names and "reordered" in names and "nested" in names


#: Where greval's figure differs from agentevals' on purpose: (case, agent, reference, params, mode, agentevals'
#: figure, greval's figure, why).
DEVIATIONS: list[tuple[str, Any, Any, dict[str, Any], str, str, float, float]] = [
    (
        # agentevals' unordered checks both directions with the matcher's arguments swapped in the second one
        # (matcher(reference's, agent's)), so an asymmetric matcher must hold both ways; greval always asks
        # whether the agent's arguments match the reference's
        "json_subset, unordered",
        run_of([call("weather", city="Paris", units="C")]),
        run_of([call("weather", city="Paris")]),
        {"arguments": "json_subset"},
        "unordered",
        "superset",
        0.0,
        1.0,
    ),
    (
        # the same swap in subset mode
        "json_subset, subset",
        run_of([call("weather", city="Paris", units="C")]),
        run_of([call("weather", city="Paris")]),
        {"arguments": "json_subset"},
        "subset",
        "superset",
        0.0,
        1.0,
    ),
    (
        # agentevals pairs greedily: the reference's first call takes the agent's first call it matches (the
        # one the second reference call needed) and the second finds none; a one-to-one pairing exists and
        # greval's maximum matching finds it
        "greedy pairing misses a pairing that exists",
        run_of([call("f", x=1, y=2)], [call("f", x=1)]),
        run_of([call("f", x=1)], [call("f", x=1, y=2)]),
        {"arguments": "json_subset"},
        "superset",
        "superset",
        0.0,
        1.0,
    ),
    (
        # JSON values: true is not 1 (agentevals compares with Python's ==, where True == 1)
        "true is not 1",
        run_of([call("set", flag=True)]),
        run_of([call("set", flag=1)]),
        {},
        "strict",
        "exact",
        1.0,
        0.0,
    ),
    (
        # json_subset reaches into nested objects; agentevals' superset mode compares a top-level key's value whole
        "json_subset is recursive",
        run_of([call("plan", trip={"to": "Paris", "pax": 2})]),
        run_of([call("plan", trip={"to": "Paris"})]),
        {"arguments": "json_subset"},
        "superset",
        "superset",
        0.0,
        1.0,
    ),
]


@pytest.mark.parametrize(
    ("case", "agent", "ref", "params", "mode", "args_mode", "theirs", "ours"),
    DEVIATIONS,
    ids=[d[0] for d in DEVIATIONS],
)
def test_where_greval_differs_from_agentevals_on_purpose(
    case: str, agent: Any, ref: Any, params: dict[str, Any], mode: str, args_mode: str, theirs: float, ours: float
) -> None:
    """Each deviation measured on both sides: agentevals' figure as written, greval's as written (docs/agents.md)."""
    match = pytest.importorskip("agentevals.trajectory.match", reason="pip install 'greval[test]'")
    ev = match.create_trajectory_match_evaluator(trajectory_match_mode=mode, tool_args_match_mode=args_mode)
    assert (1.0 if ev(outputs=agent, reference_outputs=ref)["score"] else 0.0) == theirs
    assert greval_match(mode, agent, ref, params) == ours


def test_strict_on_a_reference_of_tool_calls_compares_the_calls_alone() -> None:
    """A reference given as a bare list of tool calls (no messages): strict's `compare: auto` compares the calls in
    order (the calls of one assistant message in any order among themselves); `compare: messages` would compare
    the agent's seven messages with the reference's three."""
    agent = run_of([A, B], [C])  # 7 messages: user, [A, B], 2 results, [C], 1 result, final answer
    bare = [{"name": "book", "arguments": {"hotel": "Lune", "nights": 2}}, {"name": "search", "args": {"q": "hotels"}},
            {"name": "weather", "arguments": json.dumps({"city": "Paris"})}]  # fmt: skip
    res = computed_judge(spec("trajectory_match"), {"trajectory": agent, "expected_trajectory": bare})
    assert computed_score(res) == 1.0 and res.outputs["compare"] == "tool_calls"
    assert res.outputs["pairs"] == [["s3", "s1"], ["s2", "s2"], ["s6", "s3"]]  # (agent's step, reference's step)
    swapped = computed_judge(spec("trajectory_match"), {"trajectory": agent, "expected_trajectory": bare[::-1]})
    assert computed_score(swapped) == 0.0
    assert swapped.verdicts[0].reason == (
        'strict (tool_calls): no match: step s3: book({"hotel": "Lune", "nights": 2}) where the reference\'s call '
        '1 is weather({"city": "Paris"})'
    )
    messages = computed_judge(
        spec("trajectory_match", {"compare": "messages"}), {"trajectory": agent, "expected_trajectory": bare}
    )
    assert computed_score(messages) == 0.0
    assert "the agent's trajectory has 7 messages, the reference's 3" in (messages.verdicts[0].reason or "")


# ------------------------------------------------------------------------------------------- matchers
def test_the_argument_matchers_by_hand() -> None:
    exact, tol = ArgMatch(), ArgMatch(abs_tol=0.01)
    assert json_equal({"a": [1, {"b": 2.0}]}, {"a": [1.0, {"b": 2}]}, exact)  # JSON numbers: 2 and 2.0
    assert not json_equal({"a": True}, {"a": 1}, exact) and not json_equal({"a": 0}, {"a": False}, exact)
    assert not json_equal({"a": 1, "b": 2}, {"a": 1}, exact) and not json_equal(["x"], "x", exact)
    assert json_equal({"p": 1.004}, {"p": 1.0}, tol) and not json_equal({"p": 1.02}, {"p": 1.0}, tol)
    assert not json_equal({"p": "1.0"}, {"p": 1.0}, tol)  # text is not a number
    sub = ArgMatch(match="json_subset")
    assert json_contains({"q": {"x": 1, "y": 2}, "z": 3}, {"q": {"x": 1}}, sub)
    assert not json_contains({"q": {"x": 1}}, {"q": {"x": 1, "y": 2}}, sub)
    assert json_contains({"l": [{"a": 1, "b": 2}]}, {"l": [{"a": 1}]}, sub)  # lists item by item
    assert not json_contains({"l": [{"a": 1}, {"a": 2}]}, {"l": [{"a": 1}]}, sub)  # of the same length


def test_keys_compare_only_the_named_arguments() -> None:
    agent = run_of([call("search", q="hotels", page=2, opts={"lang": "fr", "n": 5})])
    ref = run_of([call("search", q="hotels", page=1, opts={"lang": "fr", "n": 9})])
    params = {"arguments": {"match": "exact", "keys": ["q", "opts.lang"]}}
    assert greval_match("strict", agent, ref, params) == 1.0
    assert greval_match("strict", agent, ref, {"arguments": {"match": "exact", "keys": ["q", "opts.n"]}}) == 0.0
    missing = run_of([call("search", page=2)])  # a key absent on one side only: no match; on both: a match
    assert greval_match("strict", missing, ref, params) == 0.0
    assert greval_match("strict", missing, missing, params) == 1.0


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"arguments": {"match": "function"}}, "params.arguments.function: give `function` exactly when"),
        (
            {"arguments": {"match": "function", "function": "no_such_module_x:f"}},
            "params.arguments.function: cannot import 'no_such_module_x'",
        ),
        ({"arguments": {"match": "function", "function": "json:no_such"}}, "'json' has no 'no_such'"),
        (
            {"arguments": {"match": "function", "function": "json.decoder"}},
            "params.arguments.function: must be module:function (e.g. my_matchers:same_city)",
        ),
        ({"per_tool": {"x": {"match": "ignore", "abs_tol": 1}}}, "params.per_tool.x.match: abs_tol, rel_tol and keys"),
        ({"mode": "sorted"}, "params.mode: Input should be 'strict', 'unordered', 'subset' or 'superset'"),
        ({"argument": "exact"}, "params.argument: unknown field 'argument' (did you mean 'arguments'?)"),
        ({"arguments": "fuzzy"}, "params.arguments.match: Input should be 'exact', 'json_subset'"),
    ],
)
def test_a_wrong_parameter_is_one_line_naming_it(params: dict[str, Any], message: str) -> None:
    from greval.errors import SpecError

    with pytest.raises(SpecError) as err:
        spec("trajectory_match", params)
    assert message in str(err.value) and "\n" not in str(err.value).strip(), str(err.value)


def test_a_users_function_is_part_of_the_identity_and_its_failure_an_error_verdict() -> None:
    fn = {"arguments": {"match": "function", "function": "tests.judge.computed.test_trajectory:boom"}}
    s = spec("trajectory_match", fn)
    assert "tests.judge.computed.test_trajectory:boom=" in s.computed_identity()
    assert "unknown" not in s.computed_identity()  # the module's source hash
    res = computed_judge(s, {"trajectory": run_of([A]), "expected_trajectory": run_of([A])})
    assert res.verdicts[0].status == "error" and res.verdicts[0].error_kind is ErrorKind.INVALID_INPUT
    assert res.verdicts[0].error == "argument matcher tests.judge.computed.test_trajectory:boom raised KeyError: 'x'"


def boom(agent: dict[str, Any], ref: dict[str, Any]) -> bool:
    return bool(agent["x"])


# ------------------------------------------------------------------------------------ precision / recall
def test_precision_recall_and_f1_of_tool_calls_by_hand() -> None:
    """Agent: search, search, book, weather; reference: search, book, flights. Each call is matched once: search
    and book match (2), the second search and weather do not, flights is missing. P = 2/4, R = 2/3,
    F1 = 2·2 / (4 + 3) = 4/7."""
    agent = run_of([A], [A], [B], [C])
    ref = run_of([A], [B], [call("flights", to="Paris")])
    res = computed_judge(spec("tool_call_f1"), {"trajectory": agent, "expected_trajectory": ref})
    assert computed_score(res) == pytest.approx(4 / 7)
    assert (res.outputs["precision"], res.outputs["recall"]) == (0.5, pytest.approx(2 / 3))
    assert res.outputs["unmatched_reference"] == ["s6"] and res.outputs["units"] == 1
    assert [(v.item_id, v.label) for v in res.verdicts[1:]] == [
        ("step:s2", "matched"), ("step:s4", "unexpected"), ("step:s6", "matched"), ("step:s8", "unexpected"),
    ]  # fmt: skip
    assert (
        res.verdicts[0].reason
        == "2 of the agent's 4 call(s) match 2 of the reference's 3: precision 0.500, recall 0.667, f1 0.571"
    )
    recall = computed_judge(
        spec("tool_call_f1", {"score": "recall"}), {"trajectory": agent, "expected_trajectory": ref}
    )
    assert computed_score(recall) == pytest.approx(2 / 3) and recall.outputs["units"] == 3  # pooled by reference calls
    none = computed_judge(
        spec("tool_call_f1", {"score": "precision"}), {"trajectory": run_of(), "expected_trajectory": ref}
    )
    assert computed_score(none) is None and none.outputs["units"] == 0 and none.outputs["f1"] == 0.0
    both = computed_judge(spec("tool_call_f1"), {"trajectory": run_of(), "expected_trajectory": run_of()})
    assert computed_score(both) == 1.0 and both.verdicts[0].reason == "no call expected and none made"


# ---------------------------------------------------------------------------------------- first wrong step
def test_the_first_wrong_step() -> None:
    ref = run_of([A], [B], [C])
    ok = computed_judge(spec("first_wrong_step"), {"trajectory": run_of([A], [B], [C]), "expected_trajectory": ref})
    assert computed_score(ok) == 1.0 and ok.outputs["first_wrong_step"] is None and ok.outputs["progress"] == 1.0
    # search, weather, book: the second call (step s4) is the first wrong one; one call right before it
    res = computed_judge(spec("first_wrong_step"), {"trajectory": run_of([A], [C], [B]), "expected_trajectory": ref})
    assert computed_score(res) == 0.0 and res.verdicts[0].label == "wrong step"
    assert (res.outputs["first_wrong_step"], res.outputs["first_wrong_call"], res.outputs["correct_calls"]) == (
        "s4",
        2,
        1,
    )
    assert res.outputs["progress"] == pytest.approx(1 / 3)
    assert [(v.item_id, v.label) for v in res.verdicts[1:]] == [("step:s4", "first wrong")]
    assert res.verdicts[1].reason == (
        'step s4: weather({"city": "Paris"}) where the reference\'s call 2 is book({"hotel": "Lune", "nights": 2})'
    )
    # stopped short: no wrong step of the agent's, the reference's third call never made
    short = computed_judge(spec("first_wrong_step"), {"trajectory": run_of([A], [B]), "expected_trajectory": ref})
    assert computed_score(short) == 0.0 and len(short.verdicts) == 1
    assert (short.outputs["first_wrong_step"], short.outputs["first_wrong_call"]) == (None, 3)
    assert short.verdicts[0].reason == (
        'the agent stopped after 2 right call(s); the reference\'s call 3 is weather({"city": "Paris"})'
    )
    # one call too many
    more = computed_judge(
        spec("first_wrong_step"), {"trajectory": run_of([A], [B], [C], [A]), "expected_trajectory": ref}
    )
    assert (
        more.outputs["first_wrong_step"] == "s8"
        and "is one call more than the reference's 3" in more.verdicts[0].reason
    )
    # two calls of one message in the other order than the reference's: not wrong
    par = computed_judge(spec("first_wrong_step"), {"trajectory": run_of([B, A], [C]), "expected_trajectory": ref})
    assert computed_score(par) == 1.0


# ------------------------------------------------------------------------------------------- validity
TOOLS = [
    {"type": "function", "function": {"name": "weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
        "required": ["city"], "additionalProperties": False}}},
    {"name": "search", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}},
    "now",  # a tool named, without a schema
]  # fmt: skip


def test_tool_call_validity_against_the_tools_json_schemas() -> None:
    agent = [
        USER,
        asst(call("weather", city="Paris", days=2), call("weather", city=7), call("weather", town="Paris")),
        asst(call("search"), call("now", anything=True), call("translate", text="hi")),
        asst({"type": "function", "function": {"name": "weather", "arguments": "{city: Paris}"}}),
        asst(call("weather", city="Lyon", days=0)),
        FINAL,
    ]
    res = computed_judge(spec("tool_call_validity"), {"trajectory": agent, "tools": TOOLS})
    assert computed_score(res) == pytest.approx(2 / 8) and res.outputs["units"] == 8
    reasons = {v.item_id: (v.label, v.reason) for v in res.verdicts[1:]}
    assert reasons == {
        "step:s2": ("valid", 'weather({"city": "Paris", "days": 2}): a known tool, valid arguments'),
        "step:s3": ("invalid", 'weather({"city": 7}): arguments.city: 7 is not of type \'string\''),
        "step:s4": ("invalid", 'weather({"town": "Paris"}): arguments: \'city\' is a required property'),
        "step:s5": ("invalid", "search({}): arguments: 'q' is a required property"),
        "step:s6": ("valid", 'now({"anything": true}): a known tool (no schema given)'),
        "step:s7": ("invalid", "translate({\"text\": \"hi\"}): unknown tool 'translate' (the agent's tools: weather, "
                               "search, now)"),
        "step:s8": ("invalid", "weather({city: Paris}): its arguments are not JSON (Expecting property name enclosed "
                               "in double quotes at character 1)"),
        "step:s9": ("invalid", 'weather({"city": "Lyon", "days": 0}): arguments.days: 0 is less than the minimum of 1'),
    }  # fmt: skip
    # the tools as a mapping name -> schema, and as JSON text (a CSV cell)
    as_map = {"weather": TOOLS[0]["function"]["parameters"], "search": TOOLS[1]["input_schema"], "now": None}  # type: ignore[index]
    for tools in (as_map, json.dumps(TOOLS)):
        again = computed_judge(spec("tool_call_validity"), {"trajectory": agent, "tools": tools})
        assert [v.label for v in again.verdicts[1:]] == [v.label for v in res.verdicts[1:]]


def test_a_broken_schema_is_the_records_error_and_no_tools_skips_it() -> None:
    bad = [{"name": "weather", "parameters": {"type": "objekt"}}]
    res = computed_judge(spec("tool_call_validity"), {"trajectory": run_of([C]), "tools": bad})
    assert res.verdicts[0].status == "error"
    assert (res.verdicts[0].error or "").startswith("tools: the parameters of 'weather' are not a valid JSON Schema: ")
    skipped = computed_judge(spec("tool_call_validity"), {"trajectory": run_of([C])})
    assert not skipped.verdicts and skipped.error == "missing required input: tools"


# ----------------------------------------------------------------------------------------- bad input
def error_of(res: JudgeResult) -> str:
    assert len(res.verdicts) == 1 and res.verdicts[0].status == "error", res
    assert res.verdicts[0].error_kind is ErrorKind.INVALID_INPUT
    return res.verdicts[0].error or ""


def test_arguments_that_are_not_json_are_the_records_error_where_they_are_compared() -> None:
    broken = [USER, asst({"type": "function", "function": {"name": "search", "arguments": "q=hotels"}}), tool(), FINAL]
    data = {"trajectory": broken, "expected_trajectory": run_of([A])}
    for metric in ("trajectory_match", "tool_call_f1", "first_wrong_step"):
        assert error_of(computed_judge(spec(metric), data)) == (
            "trajectory step s2: the arguments of search are not JSON (Expecting value at character 0)"
        )
    ignored = computed_judge(spec("trajectory_match", {"per_tool": {"search": "ignore"}}), data)
    assert computed_score(ignored) == 1.0  # compared by name only: its arguments are not read


def test_a_reference_calling_a_tool_the_agent_never_had_is_the_records_error() -> None:
    data = {"trajectory": run_of([A]), "expected_trajectory": run_of([A], [call("refund", id=3)]), "tools": TOOLS}
    assert error_of(computed_judge(spec("tool_call_f1"), data)) == (
        "expected_trajectory step s4 calls 'refund', a tool the agent never had (tools: weather, search, now)"
    )
    fine = computed_judge(spec("tool_call_f1"), {**data, "expected_trajectory": run_of([A])})
    assert computed_score(fine) == 1.0


def test_a_trajectory_kept_as_text_is_the_records_error() -> None:
    res = computed_judge(spec("tool_call_f1"), {"trajectory": "called search, then book", "expected_trajectory": [A]})
    assert error_of(res) == "trajectory must be a list of messages, steps or tool calls"


def test_a_reference_that_is_not_a_trajectory_is_the_records_error() -> None:
    res = computed_judge(spec("trajectory_match"), {"trajectory": run_of([A]), "reference_calls": [{"args": {}}]})
    assert res.error == "missing required input: expected_trajectory"  # the default field is absent: skipped
    odd = computed_judge(
        spec("trajectory_match", {"reference": "reference_calls"}),
        {"trajectory": run_of([A]), "reference_calls": [{"args": {}}]},
    )
    assert error_of(odd).startswith("reference_calls: item 1 is neither a message")

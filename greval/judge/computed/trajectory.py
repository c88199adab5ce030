"""An agent's tool calls scored without a model: against a reference trajectory (LangChain agentevals' match
modes, precision / recall / F1, the first wrong step) and against the tools' JSON schemas.

Both trajectories are read through :func:`greval.dataset.records.normalise_trajectory` (the one reader; a
trajectory a record already holds comes back unchanged). A reference call and an agent's call match when the
tool names are equal and the arguments match by the spec's :class:`~greval.spec.computed.ArgMatch` (always
called as ``match(agent's arguments, reference's arguments)``). Calls are paired one to one by a maximum
matching, so a call made twice must be expected twice, and a pairing is found whenever one exists (agentevals
pairs greedily, first come first served, which with a lenient matcher can miss one; with ``exact`` and
``ignore`` both find the same).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from greval.dataset.records import normalise_trajectory
from greval.errors import DataError
from greval.judge.computed.common import ComputeError, library, record_verdict, short, units_of
from greval.spec.computed import (
    ArgMatch,
    FirstWrongStepParams,
    ToolCallF1Params,
    ToolCallValidityParams,
    TrajectoryMatchParams,
    TrajectoryParams,
    load_function,
)
from greval.types import ErrorKind, ItemVerdict

__all__ = [
    "Call",
    "first_wrong_step",
    "json_contains",
    "json_equal",
    "max_pairing",
    "tool_call_f1",
    "tool_call_validity",
    "trajectory_match",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call of a trajectory: its step, tool, arguments (text when they are not JSON) and turn (the calls
    of one assistant message share it)."""

    step: str
    name: str
    arguments: Any
    turn: int
    error: str | None = None

    def text(self) -> str:
        """``name({...})`` for reasons."""
        args = self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, ensure_ascii=False)
        return short(f"{self.name}({args})", 120)


def read_steps(data: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    """A record field as trajectory steps; what cannot be read is the record's error."""
    try:
        return normalise_trajectory(data.get(field), field)
    except DataError as exc:
        raise ComputeError(str(exc)) from None


def calls_of(steps: Sequence[Mapping[str, Any]]) -> list[Call]:
    return [
        Call(str(s["id"]), str(s["name"]), s.get("arguments"), int(s.get("turn") or 0), s.get("arguments_error"))
        for s in steps
        if s.get("kind") == "tool_call"
    ]


# ------------------------------------------------------------------------------------------- matchers
def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _close(a: float, b: float, m: ArgMatch) -> bool:
    return a == b or math.isclose(a, b, rel_tol=m.rel_tol, abs_tol=m.abs_tol)


def json_equal(agent: Any, ref: Any, m: ArgMatch) -> bool:
    """The same JSON value: objects key by key, lists item by item, ``true`` never ``1``; numbers within the
    tolerances (``1`` and ``1.0`` are the same number)."""
    if _number(agent) and _number(ref):
        return _close(float(agent), float(ref), m)
    if isinstance(agent, Mapping) and isinstance(ref, Mapping):
        return agent.keys() == ref.keys() and all(json_equal(agent[k], ref[k], m) for k in ref)
    if isinstance(agent, list) and isinstance(ref, list):
        return len(agent) == len(ref) and all(json_equal(a, r, m) for a, r in zip(agent, ref, strict=True))
    if _number(agent) or _number(ref) or isinstance(agent, bool) != isinstance(ref, bool):
        return False
    return bool(type(agent) is type(ref) and agent == ref)


def json_contains(agent: Any, ref: Any, m: ArgMatch) -> bool:
    """The reference's value is contained in the agent's: every key of a reference object is in the agent's with
    a contained value (more keys are allowed), lists item by item; other values as :func:`json_equal`."""
    if isinstance(agent, Mapping) and isinstance(ref, Mapping):
        return all(k in agent and json_contains(agent[k], v, m) for k, v in ref.items())
    if isinstance(agent, list) and isinstance(ref, list):
        return len(agent) == len(ref) and all(json_contains(a, r, m) for a, r in zip(agent, ref, strict=True))
    return json_equal(agent, ref, m)


_ABSENT: Any = object()


def _at(value: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


Matcher = Callable[[Any, Any], bool]


def _matcher(m: ArgMatch) -> Matcher:
    """``m`` as a function of (agent's arguments, reference's arguments)."""
    if m.match == "ignore":
        return lambda a, r: True
    if m.match == "function":
        fn = _user_function(str(m.function))

        def call(a: Any, r: Any) -> bool:
            try:
                return bool(fn(a, r))
            except Exception as exc:  # the user's code: its failure is the record's error, said
                raise ComputeError(f"argument matcher {m.function} raised {type(exc).__name__}: {exc}") from None

        return call
    compare = json_equal if m.match == "exact" else json_contains
    if m.keys:
        keys = list(m.keys)
        return lambda a, r: all(_keys_match(_at(a, k), _at(r, k), m, compare) for k in keys)
    return lambda a, r: compare(a, r, m)


def _keys_match(a: Any, r: Any, m: ArgMatch, compare: Callable[[Any, Any, ArgMatch], bool]) -> bool:
    if a is _ABSENT or r is _ABSENT:
        return a is r
    return compare(a, r, m)


def _user_function(path: str) -> Any:
    try:
        return load_function(path)
    except (ImportError, AttributeError, TypeError) as exc:
        raise ComputeError(f"argument matcher {path}: {exc}", ErrorKind.UNKNOWN) from None


class Matching:
    """Whether an agent's call matches a reference call, by the spec's matchers (per tool where it says)."""

    def __init__(self, p: TrajectoryParams) -> None:
        self.default = _matcher(p.arguments)
        self.ignore_default = p.arguments.match == "ignore"
        self.per_tool = {name: (_matcher(m), m.match == "ignore") for name, m in p.per_tool.items()}

    def ignores(self, name: str) -> bool:
        return self.per_tool[name][1] if name in self.per_tool else self.ignore_default

    def __call__(self, agent: Call, ref: Call) -> bool:
        if agent.name != ref.name:
            return False
        fn = self.per_tool[ref.name][0] if ref.name in self.per_tool else self.default
        return fn(agent.arguments, ref.arguments)


def max_pairing(agent: Sequence[Call], ref: Sequence[Call], same: Callable[[Call, Call], bool]) -> dict[int, int]:
    """A maximum one-to-one pairing of reference calls with agent calls they match: reference index -> agent
    index (augmenting paths; each reference call tries the agent's calls in order, so with an exact matcher it
    pairs as a greedy first-come pass would)."""
    ok = [[j for j, a in enumerate(agent) if same(a, r)] for r in ref]
    owner: dict[int, int] = {}  # agent index -> reference index

    def place(i: int, seen: set[int]) -> bool:
        for j in ok[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or place(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(ref)):
        place(i, set())
    return {i: j for j, i in owner.items()}


# ------------------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Pair:
    """The agent's and the reference's steps and calls of one record, and how calls match."""

    steps: list[dict[str, Any]]
    ref_steps: list[dict[str, Any]]
    agent: list[Call]
    ref: list[Call]
    same: Matching


def tool_names(value: Any) -> list[str] | None:
    """The names of the tools a record lists (names, tool definitions, or a mapping name -> schema)."""
    if value is None:
        return None
    return list(tool_schemas(value, "tools"))


def read_pair(p: TrajectoryParams, data: Mapping[str, Any]) -> Pair:
    """Both trajectories of a record; a reference calling a tool the agent did not have, and arguments that are
    not JSON where they are compared, are the record's error (one line saying which step)."""
    steps, ref_steps = read_steps(data, p.field), read_steps(data, p.reference)
    agent, ref = calls_of(steps), calls_of(ref_steps)
    same = Matching(p)
    had = tool_names(data.get(p.tools)) if data.get(p.tools) not in (None, "", []) else None
    if had is not None:
        for c in ref:
            if c.name not in had:
                shown = ", ".join(had[:8]) + (" …" if len(had) > 8 else "")
                raise ComputeError(
                    f"{p.reference} step {c.step} calls {c.name!r}, a tool the agent never had ({p.tools}: {shown})"
                )
    for field, calls in ((p.field, agent), (p.reference, ref)):
        for c in calls:
            if c.error and not same.ignores(c.name):
                raise ComputeError(f"{field} step {c.step}: the arguments of {c.name} are {c.error}")
    return Pair(steps, ref_steps, agent, ref, same)


# ---------------------------------------------------------------------------------------- strict order
@dataclass(frozen=True)
class Wrong:
    """Where the agent's calls first leave the reference's: ``agent`` (index of its call) or, when it stopped
    short, ``missing`` (index of the reference call it never made); ``correct``: its calls right before it."""

    correct: int
    agent: int | None = None
    missing: int | None = None
    expected: int | None = None  # a reference call the wrong one could have been


def batches(calls: Sequence[Call]) -> list[list[int]]:
    """Indexes of consecutive calls sharing a turn (one assistant message's calls)."""
    out: list[list[int]] = []
    for i, c in enumerate(calls):
        if out and calls[out[-1][-1]].turn == c.turn:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def first_wrong(agent: Sequence[Call], ref: Sequence[Call], same: Callable[[Call, Call], bool]) -> Wrong | None:
    """The agent's calls against the reference's in order, the calls of one assistant message in any order
    among themselves (against as many reference calls at that place); None when they are the same."""
    pos = 0
    for batch in batches(agent):
        window = list(range(pos, min(pos + len(batch), len(ref))))
        pairing = max_pairing([agent[j] for j in batch], [ref[i] for i in window], same)
        paired = set(pairing.values())
        if len(paired) < len(batch):
            bad = next(k for k in range(len(batch)) if k not in paired)
            left = [window[i] for i in range(len(window)) if i not in pairing]
            return Wrong(
                correct=pos + sum(1 for k in paired if k < bad), agent=batch[bad], expected=min(left, default=None)
            )
        pos += len(batch)
    return Wrong(correct=pos, missing=pos) if pos < len(ref) else None


def _wrong_reason(w: Wrong, pair: Pair) -> str:
    if w.agent is None:
        assert w.missing is not None
        miss = pair.ref[w.missing]
        return (
            f"the agent stopped after {w.correct} right call(s); the reference's call {w.missing + 1} is {miss.text()}"
        )
    c = pair.agent[w.agent]
    if w.expected is None:
        return f"step {c.step}: {c.text()} is one call more than the reference's {len(pair.ref)}"
    return f"step {c.step}: {c.text()} where the reference's call {w.expected + 1} is {pair.ref[w.expected].text()}"


Message = tuple[str, list[Call] | None]


def messages_of(steps: Sequence[Mapping[str, Any]], calls: Sequence[Call]) -> list[Message]:
    """Steps as the chat messages they were (agentevals compares messages): an assistant message with its tool
    calls (or None), a tool message per result, user and system messages as themselves."""
    by_step = {c.step: c for c in calls}
    roles = {"tool_result": "tool", "user": "user", "system": "system"}
    out: list[Message] = []
    turn: Any = None
    for s in steps:
        role = roles.get(str(s.get("kind")), "assistant")
        if role == "assistant" and out and out[-1][0] == "assistant" and s.get("turn") == turn:
            last = out[-1][1]
        else:
            out.append((role, None))
            last = None
        turn = s.get("turn")
        if s.get("kind") == "tool_call":
            out[-1] = ("assistant", [*(last or []), by_step[str(s["id"])]])
    return out


def _same_calls(calls: Sequence[Call], ref: Sequence[Call], same: Callable[[Call, Call], bool]) -> bool:
    """The same number of calls, every one matched once."""
    return len(calls) == len(ref) and len(max_pairing(calls, ref, same)) == len(ref)


def strict_messages(pair: Pair) -> str | None:
    """agentevals' strict match: the same number of messages, each of the same role, with tool calls where the
    reference's has them, the same number, each matched once (in any order within a message); None when all
    hold, else why not."""
    mine, theirs = messages_of(pair.steps, pair.agent), messages_of(pair.ref_steps, pair.ref)
    if len(mine) != len(theirs):
        return f"the agent's trajectory has {len(mine)} messages, the reference's {len(theirs)}"
    for n, ((role, calls), (ref_role, ref_calls)) in enumerate(zip(mine, theirs, strict=True), start=1):
        if role != ref_role:
            return f"message {n} is the agent's {role} message where the reference has a {ref_role} message"
        if (calls is None) != (ref_calls is None):
            return f"message {n}: " + ("the agent calls tools, the reference does not" if calls else
                                       "the reference calls tools, the agent does not")  # fmt: skip
        if calls is not None and ref_calls is not None and not _same_calls(calls, ref_calls, pair.same):
            got = ", ".join(c.text() for c in calls)
            return f"message {n}: the agent calls {got}; the reference {', '.join(c.text() for c in ref_calls)}"
    return None


# -------------------------------------------------------------------------------------------- metrics
def _pair_lists(pair: Pair, pairing: Mapping[int, int]) -> dict[str, Any]:
    used = set(pairing.values())
    return {
        "agent_calls": len(pair.agent),
        "reference_calls": len(pair.ref),
        "matched": len(pairing),
        "pairs": [[pair.agent[j].step, pair.ref[i].step] for i, j in sorted(pairing.items())],
        "unmatched_agent": [c.step for j, c in enumerate(pair.agent) if j not in used],
        "unmatched_reference": [c.step for i, c in enumerate(pair.ref) if i not in pairing],
    }


def _set_reason(p: TrajectoryMatchParams, pair: Pair, pairing: Mapping[int, int]) -> str | None:
    """Why an unordered / subset / superset match fails (None when it holds)."""
    missing = [c for i, c in enumerate(pair.ref) if i not in pairing]
    extra = [c for j, c in enumerate(pair.agent) if j not in set(pairing.values())]
    if p.mode in ("unordered", "superset") and missing:
        return f"the reference's {missing[0].text()} (step {missing[0].step}) has no call of the agent's to match" + (
            f", nor {len(missing) - 1} more" if len(missing) > 1 else ""
        )
    if p.mode in ("unordered", "subset") and extra:
        return f"the agent's {extra[0].text()} (step {extra[0].step}) matches no call of the reference's" + (
            f", nor {len(extra) - 1} more" if len(extra) > 1 else ""
        )
    return None


def trajectory_match(p: TrajectoryMatchParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """1 when the agent's calls match the reference's in the spec's mode, else 0, with why not."""
    pair = read_pair(p, data)
    pairing = max_pairing(pair.agent, pair.ref, pair.same)
    outputs: dict[str, Any] = {"mode": p.mode, **_pair_lists(pair, pairing)}
    if p.mode == "strict":
        compare = p.compare
        if compare == "auto":
            compare = "tool_calls" if all(s["kind"] == "tool_call" for s in pair.ref_steps) else "messages"
        outputs["compare"] = compare
        if compare == "messages":
            why = strict_messages(pair)
        else:
            wrong = first_wrong(pair.agent, pair.ref, pair.same)
            why = None if wrong is None else _wrong_reason(wrong, pair)
    else:
        why = _set_reason(p, pair, pairing)
    done = f"{p.mode}" + (f" ({outputs['compare']})" if p.mode == "strict" else "")
    m, r, a = len(pairing), len(pair.ref), len(pair.agent)
    counts = f"{m} of the reference's {r} call(s) paired with {m} of the agent's {a}"
    reason = f"{done}: match; {counts}" if why is None else f"{done}: no match: {why}"
    outputs["units"] = 1
    return [record_verdict(1.0 if why is None else 0.0, reason, "match" if why is None else "no match")], outputs


def tool_call_f1(p: ToolCallF1Params, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Precision (matched / agent's calls), recall (matched / reference's calls) and F1 (2 matched / both),
    each call matched once; one item verdict per agent call (matched or unexpected)."""
    pair = read_pair(p, data)
    pairing = max_pairing(pair.agent, pair.ref, pair.same)
    m, a, r = len(pairing), len(pair.agent), len(pair.ref)
    figures = {
        "precision": m / a if a else None,
        "recall": m / r if r else None,
        "f1": 2 * m / (a + r) if a + r else 1.0,
    }
    score = figures[p.score]
    units = {"precision": a, "recall": r, "f1": 1}[p.score]
    by_agent = {j: i for i, j in pairing.items()}
    items = [
        ItemVerdict(
            item_id=f"step:{c.step}",
            label="matched" if j in by_agent else "unexpected",
            score=1.0 if j in by_agent else 0.0,
            reason=f"{c.text()} = the reference's step {pair.ref[by_agent[j]].step}"
            if j in by_agent
            else f"{c.text()} matches no reference call left unmatched",
        )
        for j, c in enumerate(pair.agent)
    ]
    shown = ", ".join(f"{k} {v:.3f}" if v is not None else f"{k} —" for k, v in figures.items())
    reason = f"{m} of the agent's {a} call(s) match {m} of the reference's {r}: {shown}"
    if a + r == 0:
        reason = "no call expected and none made"
    outputs = {**figures, **_pair_lists(pair, pairing), "units": units_of(score, units)}
    return [record_verdict(score, reason), *items], outputs


def first_wrong_step(p: FirstWrongStepParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """The agent's first step whose call leaves the reference's order (or where it stopped short): the record
    scores 1 with none, else 0; the wrong step gets an item verdict saying what the reference does there."""
    pair = read_pair(p, data)
    wrong = first_wrong(pair.agent, pair.ref, pair.same)
    r = len(pair.ref)
    outputs: dict[str, Any] = {"agent_calls": len(pair.agent), "reference_calls": r, "units": 1}
    if wrong is None:
        outputs |= {
            "first_wrong_step": None,
            "first_wrong_call": None,
            "correct_calls": r,
            "progress": 1.0 if r else None,
        }
        reason = f"every call as the reference's ({r}), in order"
        return [record_verdict(1.0, reason, "no wrong step")], outputs
    why = _wrong_reason(wrong, pair)
    step = pair.agent[wrong.agent].step if wrong.agent is not None else None
    outputs |= {
        "first_wrong_step": step,
        "first_wrong_call": (wrong.agent if wrong.agent is not None else wrong.correct) + 1,
        "correct_calls": wrong.correct,
        "progress": wrong.correct / r if r else None,
    }
    verdicts = [record_verdict(0.0, why, "wrong step")]
    if step is not None:
        verdicts.append(ItemVerdict(item_id=f"step:{step}", label="first wrong", score=0.0, reason=why))
    return verdicts, outputs


# ------------------------------------------------------------------------------------------ validity
def _json(value: Any) -> Any:
    """JSON text of an object or a list parsed (tools are often given, and traced, as JSON text)."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value.tolist() if hasattr(value, "tolist") else value


def _tool_entry(tool: Any) -> tuple[str, Any] | None:
    """(name, parameters schema or None) of one tool definition, in the shapes tools are listed in."""
    tool = _json(tool)
    if isinstance(tool, str):
        return tool, None
    if not isinstance(tool, Mapping):
        return None
    for key in ("function", "tool", "json_schema"):  # OpenAI's {type, function}; OpenInference's tool.json_schema
        inner = _json(tool.get(key))
        if isinstance(inner, Mapping) and inner.get("name"):
            return _tool_entry(inner)
    if not tool.get("name"):
        return None
    schema = next((tool[k] for k in ("parameters", "input_schema", "inputSchema", "args_schema") if k in tool), None)
    return str(tool["name"]), _json(schema)


def tool_schemas(value: Any, field: str) -> dict[str, Any]:
    """Tool name -> its parameters' JSON schema (None when none is given), from a record's tools field."""
    value = _json(value)
    if isinstance(value, Mapping) and "name" not in value and "function" not in value:
        return {str(k): _json(v) for k, v in value.items()}
    items = value if isinstance(value, list) else [value]
    out: dict[str, Any] = {}
    for n, tool in enumerate(items, start=1):
        entry = _tool_entry(tool)
        if entry is None:
            raise ComputeError(f"{field}[{n - 1}]: not a tool (a name, or an object with a name and parameters)")
        out[entry[0]] = entry[1]
    return out


def _validator(name: str, schema: Any, field: str) -> Any:
    """A JSON Schema validator of a tool's parameters (its ``$schema`` draft, else 2020-12)."""
    if schema is None:
        return None
    js: Any = library("jsonschema", "jsonschema")
    if not isinstance(schema, Mapping | bool):
        raise ComputeError(f"{field}: the parameters of {name!r} are not a JSON Schema (got {type(schema).__name__})")
    cls = js.validators.validator_for(schema, default=js.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except js.exceptions.SchemaError as exc:
        raise ComputeError(f"{field}: the parameters of {name!r} are not a valid JSON Schema: {exc.message}") from None
    return cls(schema)


def _call_problem(c: Call, schemas: Mapping[str, Any], validators: Mapping[str, Any]) -> str | None:
    """Why a call is invalid, or None."""
    if c.name not in schemas:
        shown = ", ".join(list(schemas)[:8]) + (" …" if len(schemas) > 8 else "")
        return f"unknown tool {c.name!r} (the agent's tools: {shown})"
    if c.error:
        return f"its arguments are {c.error}"
    check = validators.get(c.name)
    if check is None:
        return None
    js: Any = library("jsonschema", "jsonschema")
    error = js.exceptions.best_match(check.iter_errors(c.arguments))
    if error is None:
        return None
    where = "arguments" + "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{where}: {short(error.message, 160)}"


def tool_call_validity(p: ToolCallValidityParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Share of the agent's calls naming one of its tools with arguments valid against the tool's JSON schema
    (a tool given without a schema: its name is checked); one item verdict per call."""
    calls = calls_of(read_steps(data, p.field))
    schemas = tool_schemas(data.get(p.tools), p.tools)
    validators = {name: _validator(name, s, p.tools) for name, s in schemas.items() if s is not None}
    items = []
    for c in calls:
        problem = _call_problem(c, schemas, validators)
        unchecked = c.name in schemas and schemas[c.name] is None
        reason = problem or (f"{c.text()}: a known tool" + (" (no schema given)" if unchecked else ", valid arguments"))
        items.append(
            ItemVerdict(
                item_id=f"step:{c.step}",
                label="invalid" if problem else "valid",
                score=0.0 if problem else 1.0,
                reason=reason if not problem else f"{c.text()}: {problem}",
            )
        )
    valid = sum(1 for v in items if v.label == "valid")
    score = valid / len(calls) if calls else None
    reason = f"{valid} of {len(calls)} tool call(s) valid" if calls else "no tool call"
    outputs = {"calls": len(calls), "valid": valid, "invalid": [v.item_id for v in items if v.label != "valid"]}
    outputs["units"] = units_of(score, len(calls))
    return [record_verdict(score, reason), *items], outputs

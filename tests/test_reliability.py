"""Reliability: flip rates under item / label reordering on scripted answers whose flips are counted by hand,
reproducibility from the store, panel agreement across two servers, and probability-weighted scores from a
server that returns log-probabilities."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from click.testing import CliRunner

from greval.cli import main
from greval.dataset.records import Record
from greval.quality.reliability import parse_panel, permute_items, permute_scale, sample_records, weighted_value, wilson
from greval.spec import CategoricalScale, Spec, ValueScale, parse_spec
from greval.testing.openai_server import OpenAIServer

ITEM_SPEC: dict[str, Any] = {
    "name": "chunk_support",
    "description": "Whether each retrieved chunk helps answer the question.",
    "steps": ["Read the question and each chunk.", "Answer yes if the chunk helps answer the question, else no."],
    "inputs": ["question", "chunks"],
    "target": {"each": "chunks"},
    "scale": {
        "kind": "categorical",
        "labels": {
            "yes": "The chunk states a fact that answers the question.",
            "no": "The chunk does not help answer the question.",
        },
    },
}
RECORD_SPEC: dict[str, Any] = {
    "name": "support",
    "description": "Whether the answer is right for the question.",
    "steps": ["Read the question and the answer.", "Say yes if the answer is right, else no."],
    "inputs": ["question", "answer"],
    "scale": {
        "kind": "categorical",
        "labels": {"yes": "The answer is right for the question.", "no": "The answer is wrong or missing."},
    },
}
VALUE_SPEC: dict[str, Any] = {
    "name": "quality",
    "description": "How good the answer is for the question.",
    "steps": ["Read the question and the answer.", "Rate the answer from 1 to 5."],
    "inputs": ["question", "answer"],
    "scale": {
        "kind": "value",
        "min": 1,
        "max": 5,
        "ranges": {"1-2": "The answer is wrong or empty.", "3": "The answer is partly right.", "4-5": "It is right."},
    },
}


def _verdicts(**labels: str) -> dict[str, Any]:
    return {
        "type": "respond",
        "content": {"verdicts": [{"id": i, "reason": "r", "label": lab} for i, lab in labels.items()]},
    }


def _write(tmp_path: Path, spec: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    sp = tmp_path / f"{spec['name']}.yaml"
    sp.write_text(yaml.safe_dump(spec, sort_keys=False))
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    return sp, data


# ------------------------------------------------------------------------------------------- units
def test_permutations_keep_meaning_and_change_hashes() -> None:
    rec = Record.from_mapping({"id": "r", "question": "q", "chunks": ["a", "b", "c"]})
    rev = permute_items(rec, "chunks")
    assert [c["id"] for c in rev.items("chunks")] == ["c3", "c2", "c1"]
    assert rev.id == rec.id and rev.hash != rec.hash
    shuf = permute_items(rec, "chunks", "shuffle", seed=3)
    assert shuf.items("chunks") != rec.items("chunks")
    assert permute_items(rec, "chunks", "shuffle", seed=3) == shuf  # seeded: reproducible

    ordered = parse_spec({**RECORD_SPEC, "scale": {**RECORD_SPEC["scale"], "ordered": True}})
    assert isinstance(ordered, Spec)
    twin = permute_scale(ordered)
    assert isinstance(twin.scale, CategoricalScale)
    assert twin.scale.names == ["no", "yes"] and twin.hash != ordered.hash and twin.name == ordered.name
    assert twin.scale.scores() == {"no": 0.0, "yes": 1.0}  # the original scores, made explicit

    items = parse_spec(ITEM_SPEC)
    assert isinstance(items, Spec)
    twin = permute_scale(items)
    assert twin.positive_labels == ["yes"]  # the default positive label survives the reordering

    value = parse_spec(VALUE_SPEC)
    assert isinstance(value, Spec)
    vt = permute_scale(value)
    assert isinstance(vt.scale, ValueScale)
    assert [r.text for r in vt.scale.ranges] == ["4-5", "3", "1-2"]


def test_sampling_is_seeded_and_keeps_file_order() -> None:
    recs = [Record.from_mapping({"id": str(i), "answer": f"a{i}"}) for i in range(10)]
    a = sample_records(recs, 4, seed=1)
    assert a == sample_records(recs, 4, seed=1)
    assert [int(r.id) for r in a] == sorted(int(r.id) for r in a)
    assert len(a) == 4 and sample_records(recs, 50, 0) == recs


def test_wilson_and_weighted_value() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and hi is not None and 0.25 < hi < 0.35
    assert wilson(0, 0) == (None, None)
    content = [
        {"token": t, "logprob": 0.0, "top_logprobs": []} for t in ['{"', "reason", '":"', "ok", '","', "value", '":']
    ]
    content.append(
        {
            "token": "4",
            "logprob": math.log(0.6),
            "top_logprobs": [
                {"token": "4", "logprob": math.log(0.6)},
                {"token": "3", "logprob": math.log(0.3)},
                {"token": "5", "logprob": math.log(0.05)},
                {"token": "x", "logprob": math.log(0.05)},
            ],
        }
    )
    score, mass = weighted_value({"content": content}, 1, 5)  # type: ignore[misc]
    assert score == pytest.approx((4 * 0.6 + 3 * 0.3 + 5 * 0.05) / 0.95)
    assert mass == pytest.approx(0.95)
    assert weighted_value(None, 1, 5) is None
    assert weighted_value({"content": content[:5]}, 1, 5) is None


def test_parse_panel() -> None:
    assert parse_panel("openai:a") == ("openai:a", None)
    assert parse_panel("openai:b@http://h:1/v1") == ("openai:b", "http://h:1/v1")


# ---------------------------------------------------------------------------------- flips, by hand
ROWS = [
    {"id": "A", "question": "qa", "chunks": ["apple", "banana", "cherry"]},
    {"id": "B", "question": "qb", "chunks": ["dog", "emu", "fox"]},
    {"id": "C", "question": "qc", "chunks": ["kiwi"]},
]


def _script_order_dependent(llm: OpenAIServer) -> None:
    llm.script(
        [
            # A with the labels listed no-first: every chunk "no" (2 flips vs yes, yes, no).
            {
                "match": r'- "no": [^\n]*\n- "yes"[\s\S]*\[c1\] apple',
                "regex": True,
                "action": _verdicts(c1="no", c2="no", c3="no"),
            },
            # A in file order: yes, yes, no; reversed: c1 flips to no (1 flip).
            {"match": "[c1] apple\n\n[c2] banana", "action": _verdicts(c1="yes", c2="yes", c3="no")},
            {"match": "[c3] cherry\n\n[c2] banana", "action": _verdicts(c1="no", c2="yes", c3="no")},
            # B and C answer the same whatever the order (0 flips).
            {"match": "[c1] dog", "action": _verdicts(c1="yes", c2="no", c3="no")},
            {"match": "[c3] fox", "action": _verdicts(c1="yes", c2="no", c3="no")},
            {"match": "[c1] kiwi", "action": _verdicts(c1="yes")},
        ]
    )


def test_flip_rates_match_the_hand_count_and_are_reproducible(llm: OpenAIServer, tmp_path: Path) -> None:
    _script_order_dependent(llm)
    sp, data = _write(tmp_path, ITEM_SPEC, ROWS)
    store = tmp_path / "rel.sqlite"
    args = ["reliability", "--spec", str(sp), "--data", str(data), "--store", str(store)]
    args += ["--judge", "openai:j", "--base-url", llm.base_url]
    res = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "r1.json")])
    assert res.exit_code == 0, res.output
    rep = json.loads((tmp_path / "r1.json").read_text())
    flips = {f["perturbation"]: f for f in rep["flips"]}
    # Item order: A and B have 3 chunks each (C has one and is skipped): 6 pairs, 1 flip (A/c1).
    assert (flips["items"]["n"], flips["items"]["flips"], flips["items"]["records"]) == (6, 1, 2)
    assert flips["items"]["rate"] == pytest.approx(1 / 6)
    assert flips["items"]["unit"] == "chunks"
    # Label order: all 7 chunks; A/c1 and A/c2 flip to "no".
    assert (flips["scale"]["n"], flips["scale"]["flips"]) == (7, 2)
    assert flips["scale"]["rate"] == pytest.approx(2 / 7)
    assert any("1 record(s) with < 2 chunks skipped" in n for n in rep["notes"])
    assert "0.167" in res.output and "0.286" in res.output
    assert "not requested (--logprobs)" in res.output
    calls = len(llm.requests())
    assert calls == 3 + 2 + 3  # base, permuted items (A, B), permuted labels

    # Same store, same command: no call, the same report.
    again = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "r2.json")])
    assert again.exit_code == 0, again.output
    assert len(llm.requests()) == calls
    assert json.loads((tmp_path / "r2.json").read_text()) == rep


def test_only_one_perturbation_and_shuffle(llm: OpenAIServer, tmp_path: Path) -> None:
    sp, data = _write(tmp_path, RECORD_SPEC, [{"id": "x", "question": "q", "answer": "a"}])
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--perturb",
            "items",
            "--order",
            "shuffle",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "reads no chunks or triples" in res.output
    bad = CliRunner().invoke(main, ["reliability", "-s", "nope_metric", "--data", str(data), "--judge", "openai:j"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


# ------------------------------------------------------------------------------------------- panel
@pytest.fixture()
def second_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


def _labels_by_answer(srv: OpenAIServer, labels: dict[str, str]) -> None:
    srv.script(
        [
            {"match": f"## Answer\n{a}", "action": {"type": "respond", "content": {"reason": "r", "label": lab}}}
            for a, lab in labels.items()
        ]
    )


def test_panel_agreement_between_two_judges(llm: OpenAIServer, second_server: OpenAIServer, tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "question": f"q{i}", "answer": f"A{i}"} for i in range(1, 5)]
    sp, data = _write(tmp_path, RECORD_SPEC, rows)
    _labels_by_answer(llm, {"A1": "yes", "A2": "yes", "A3": "no", "A4": "no"})
    _labels_by_answer(second_server, {"A1": "yes", "A2": "no", "A3": "no", "A4": "no"})
    out = tmp_path / "p.json"
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--perturb",
            "scale",
            "--judge",
            "openai:first",
            "--base-url",
            llm.base_url,
            "--panel",
            f"openai:second@{second_server.base_url}",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    [pair] = rep["panel"]
    assert (pair["a"], pair["b"], pair["n"]) == ("openai:first", "openai:second", 4)
    # 3 of 4 agree; chance agreement 0.5·0.25 + 0.5·0.75 = 0.5, so κ = (0.75 − 0.5) / 0.5 = 0.5.
    assert pair["metrics"]["accuracy"] == pytest.approx(0.75)
    assert pair["metrics"]["cohen_kappa"] == pytest.approx(0.5)
    assert "panel agreement" in res.output
    assert len(second_server.requests()) == 4


# ---------------------------------------------------------------------------------------- logprobs
class _LogprobServer:
    """A minimal chat-completions server that answers one fixed JSON verdict with token log-probabilities."""

    def __init__(self, tokens: list[tuple[str, dict[str, float]]]) -> None:
        self.tokens = tokens
        self.bodies: list[dict[str, Any]] = []
        self.loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.bodies.append(body)
        text = "".join(t for t, _ in self.tokens)
        logprobs = None
        if body.get("logprobs"):
            logprobs = {
                "content": [
                    {
                        "token": t,
                        "logprob": math.log(max(top.values())) if top else 0.0,
                        "bytes": None,
                        "top_logprobs": [{"token": k, "logprob": math.log(p), "bytes": None} for k, p in top.items()],
                    }
                    for t, top in self.tokens
                ]
            }
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "m"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "logprobs": logprobs,
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def test_probability_weighted_score_from_logprobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    tokens: list[tuple[str, dict[str, float]]] = [
        ('{"', {}),
        ("reason", {}),
        ('":"', {}),
        ("ok", {}),
        ('","', {}),
        ("value", {}),
        ('":', {}),
    ]
    tokens += [("4", {"4": 0.6, "3": 0.3, "5": 0.1}), ("}", {})]
    srv = _LogprobServer(tokens)
    try:
        rows = [{"id": "r1", "question": "q", "answer": "a"}, {"id": "r2", "question": "q2", "answer": "b"}]
        sp, data = _write(tmp_path, VALUE_SPEC, rows)
        out = tmp_path / "lp.json"
        res = CliRunner().invoke(
            main,
            [
                "reliability",
                "-s",
                str(sp),
                "--data",
                str(data),
                "--store",
                str(tmp_path / "s.sqlite"),
                "--logprobs",
                "--top-logprobs",
                "3",
                "--judge",
                "openai:lp",
                "--base-url",
                srv.base_url,
                "--json",
                str(out),
            ],
        )
        assert res.exit_code == 0, res.output
        lp = json.loads(out.read_text())["logprobs"]
        assert (lp["requested"], lp["usable"]) == (2, 2)
        assert lp["mean_value"] == 4
        assert lp["mean_weighted"] == pytest.approx(4 * 0.6 + 3 * 0.3 + 5 * 0.1)
        assert lp["scores"] == {"r1": pytest.approx(3.8), "r2": pytest.approx(3.8)}
        assert "probability-weighted score (G-Eval): 2 of 2" in res.output
        asked = [b for b in srv.bodies if b.get("logprobs")]
        assert len(asked) == 2 and all(b["top_logprobs"] == 3 for b in asked)
    finally:
        srv.close()


def test_logprobs_not_available_is_said_plainly(llm: OpenAIServer, tmp_path: Path) -> None:
    sp, data = _write(tmp_path, VALUE_SPEC, [{"id": "r1", "question": "q", "answer": "a"}])
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--logprobs",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "not available from this model/server" in res.output
    item = dict(ITEM_SPEC, name="items_value", scale=VALUE_SPEC["scale"])
    sp2 = tmp_path / "items_value.yaml"
    sp2.write_text(yaml.safe_dump(item))
    res = CliRunner().invoke(
        main,
        [
            "reliability",
            "-s",
            str(sp2),
            "--data",
            str(data),
            "--store",
            str(tmp_path / "s.sqlite"),
            "--logprobs",
            "--perturb",
            "items",
            "--judge",
            "openai:j",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 0, res.output
    assert "record-level value scales only" in res.output

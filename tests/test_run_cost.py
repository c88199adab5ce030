"""Prompt, cached prompt and completion tokens, and what a run cost (issue 35): ``greval run``'s summary and
``greval results runs`` over HTTP against the test server (its ``prefix_cache`` knob reports cached prompt
tokens as OpenAI does), priced by greval's table with the user's file over it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.errors import UserError
from greval.llm.prices import DEFAULT_PRICES, Price, RunCost, cost_text, load_prices, price_for, run_cost
from greval.store.store import Store
from greval.testing.openai.protocol import prompt_text
from greval.testing.openai.rules import CACHE_KEY_WORDS
from greval.testing.openai_server import OpenAIServer

PRICE = Price(input=2.0, cached_input=0.5, output=8.0)


def test_the_cost_formula_prices_cached_prompt_tokens_apart() -> None:
    # 1,000 prompt tokens of which 600 cached, 200 completion tokens: 400·2 + 600·0.5 + 200·8 = 2,700 per 1M
    assert PRICE.cost(1_000, 600, 200) == pytest.approx(2_700 / 1e6)
    assert Price(input=2.0, output=8.0).cost(1_000, 600, 200) == pytest.approx(3_600 / 1e6)  # no cached price
    assert PRICE.cost(100, 500, 0) == pytest.approx(100 * 0.5 / 1e6)  # never more cached than sent


def test_a_judge_is_priced_by_its_name_then_its_model_then_as_a_dated_snapshot() -> None:
    table = {**DEFAULT_PRICES, "openai:gpt-4o-mini": PRICE}
    assert price_for("openai:gpt-4o-mini", table) is PRICE
    assert price_for("azure:gpt-4o-mini", table) is DEFAULT_PRICES["gpt-4o-mini"]
    assert price_for("openai:gpt-4o-mini-2024-07-18", table) is DEFAULT_PRICES["gpt-4o-mini"]  # not gpt-4o
    assert price_for("openai:gpt-4.1-mini-2025-04-14", table) is DEFAULT_PRICES["gpt-4.1-mini"]
    assert price_for("anthropic:claude-haiku-4-5-20251001", table) is DEFAULT_PRICES["claude-haiku-4-5"]
    assert price_for("openai:gpt-4o-audio-preview", table) is None  # another model, maybe another price
    assert price_for("local:smollm2", table) is None
    metrics = [
        {"judge": "openai:gpt-4o-mini", "tokens_in": 1_000, "tokens_cached": 600, "tokens_out": 200},
        {"judge": "local:smollm2", "tokens_in": 50, "tokens_cached": 0, "tokens_out": 5},
        {"judge": "openai:nothing-spent", "tokens_in": 0, "tokens_out": 0},
    ]
    cost = run_cost(metrics, table)
    assert cost.usd == pytest.approx(2_700 / 1e6) and cost.unpriced == ["local:smollm2"]
    assert cost_text(cost) == "$0.002700 (no price: local:smollm2)"
    assert cost_text(RunCost(usd=0.0123)) == "$0.0123" and cost_text(RunCost(usd=1234.5)) == "$1,234.50"
    assert cost_text(RunCost()) == "—" and cost_text(run_cost([], table)) == "$0"  # nothing spent
    assert run_cost(metrics[1:], table).usd is None  # tokens spent, none priced


def test_a_price_table_file_adds_and_overrides_and_a_bad_one_is_one_line(tmp_path: Path) -> None:
    good = tmp_path / "prices.yaml"
    good.write_text("# USD per 1M tokens\njudge-test: {input: 1.5, output: 6}\ngpt-4o: {input: 9, output: 9}\n")
    table = load_prices(good)
    assert table["judge-test"] == Price(input=1.5, output=6.0) and table["gpt-4o"].input == 9
    assert table["gpt-4o-mini"] == DEFAULT_PRICES["gpt-4o-mini"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("judge-test: {input: -1, output: 6}\n")
    with pytest.raises(UserError, match=r"bad.yaml: judge-test.input: Input should be greater than or equal to 0"):
        load_prices(bad)
    bad.write_text("judge-test: {input: 1, output: 6, cached: 2}\n")
    with pytest.raises(UserError, match=r"bad.yaml: judge-test.cached: Extra inputs are not permitted"):
        load_prices(bad)
    bad.write_text("- judge-test\n")
    with pytest.raises(UserError, match="maps model names to"):
        load_prices(bad)


def _records(path: Path, n: int) -> None:
    rows = [
        {"id": f"r{i}", "question": f"Which passage explains item {i}?", "answer": f"Passage {i}.",
         "expected_answer": f"Passage {i}.", "chunks": [f"Passage about item {i}.", f"Another one on {i}."]}
        for i in range(n)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _server_cached(bodies: list[dict[str, Any]]) -> int:
    """What the test server reported as cached, recomputed from its request log (its rule: the leading words
    a prompt shares with the last one that began with the same words)."""
    last: dict[str, list[str]] = {}
    total = 0
    for body in bodies:
        words = prompt_text(body["messages"]).split()
        key = " ".join(words[:CACHE_KEY_WORDS])
        before = last.get(key, [])
        shared = 0
        for a, b in zip(before, words, strict=False):
            if a != b:
                break
            shared += 1
        total += shared
        last[key] = words
    return total


def test_run_summary_and_results_runs_show_tokens_cached_tokens_and_the_cost(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, store, prices = tmp_path / "d.jsonl", tmp_path / "s.sqlite", tmp_path / "prices.yaml"
    _records(data, 6)
    prices.write_text("judge-test: {input: 100, cached_input: 10, output: 1000}\n")
    monkeypatch.setenv("GREVAL_PRICES", str(prices))
    llm.configure(prefix_cache=True)
    args = ["run", str(data), "-s", "answer_alignment", "-s", "chunk_evaluation", "--store", str(store)]
    args += ["--judge", "openai:judge-test", "--base-url", llm.base_url, "--quiet", "-c", "1"]
    res = CliRunner().invoke(main, args, env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.output
    with Store(store) as st:
        [run] = st.runs()
    summary = json.loads(run["summary"])
    t_in, t_cached, t_out = (
        sum(m[k] for m in summary["metrics"]) for k in ("tokens_in", "tokens_cached", "tokens_out")
    )
    assert t_cached == _server_cached(llm.requests()) and 0 < t_cached < t_in and t_out > 0
    expected = ((t_in - t_cached) * 100 + t_cached * 10 + t_out * 1000) / 1e6
    shown = cost_text(RunCost(usd=expected))
    said = " ".join(res.output.split())  # lines wrapped at the terminal's width
    assert f"cost of this run's calls: {shown} (prices from {prices} over greval's list)" in said
    for m in summary["metrics"]:
        assert f"{m['tokens_in']:,} · {m['tokens_cached']:,} · {m['tokens_out']:,}" in res.output
    listed = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "250"})
    assert listed.exit_code == 0, listed.output
    assert f"{t_in:,} · {t_cached:,} · {t_out:,}" in listed.output and shown in listed.output
    # A model no table prices: the tokens, no cost, and which judge has no price.
    prices.write_text("other-model: {input: 1, output: 1}\n")
    listed = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "250"})
    assert listed.exit_code == 0 and "— (no price: openai:judge-test)" in listed.output
    # A table that cannot be read: one note, the runs still listed.
    prices.write_text("judge-test: {input: cheap, output: 1}\n")
    listed = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "250"})
    assert listed.exit_code == 0 and run["run_id"] in listed.output
    assert re.search(r"note: no cost shown: .*prices\.yaml: judge-test\.input", " ".join(listed.output.split()))

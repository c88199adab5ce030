"""The peers' side of ``scripts/bench_tokens.py``: run in the peers' own venv, never greval's.

DeepEval, Ragas and Phoenix's evals pin versions of openai, langchain and pydantic that greval's environment
does not have, so ``bench_tokens.py`` installs them into a separate venv (``--peers-venv``) and runs this file
with that venv's Python. It imports no greval module. Its commands:

    python _bench_peers.py deepeval --base-url URL --records FILE [--metric relevancy|precision]
    python _bench_peers.py ragas --base-url URL --records FILE [--metric precision|relevance]
    python _bench_peers.py phoenix --base-url URL --records FILE [--metric relevance|retrieval]
    python _bench_peers.py count < bodies.json                      # o200k_base tokens of each request body

``count`` is the one token counter of the benchmark (every framework's requests go through it): the request
as the provider receives it, counted with OpenAI's o200k_base encoding (from the ``bpe-openai`` package, which
ships its vocabulary; tiktoken would download it): each message's text plus 3 tokens of framing per message
and 3 for the reply's priming (OpenAI's published recipe), plus the structured-output definition the request
carries (``response_format``'s JSON schema, or the ``tools``), as compact JSON — the provider puts those in
front of the model too, so their descriptions are prompt tokens as well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")
os.environ.setdefault("DEEPEVAL_GRPC_LOGGING", "0")
os.environ.setdefault("RAGAS_DO_NOT_TRACK", "true")
os.environ.setdefault("OPENAI_API_KEY", "sk-bench")

MESSAGE_FRAMING = 3  # tokens around each message (role, separators)
REPLY_PRIMING = 3  # tokens that start the assistant's reply


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _schema_text(body: dict[str, Any]) -> str:
    """The structured-output definition a request carries, as compact JSON ("" when it has none)."""
    parts = []
    fmt = body.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        parts.append(json.dumps(fmt.get("json_schema", {}), separators=(",", ":")))
    if body.get("tools"):
        parts.append(json.dumps(body["tools"], separators=(",", ":")))
    return "\n".join(parts)


def count_body(enc: Any, body: dict[str, Any]) -> dict[str, int]:
    """One request's prompt tokens: its messages, and its structured-output definition."""
    messages = sum(MESSAGE_FRAMING + len(enc.encode(_text(m.get("content")))) for m in body.get("messages", []))
    schema = _schema_text(body)
    return {"messages": messages + REPLY_PRIMING, "schema": len(enc.encode(schema)) if schema else 0}


PREFIX_KEY = 32  # tokens: requests that begin with the same ones go to the same cache (OpenAI hashes a prefix)
OPENAI_MIN, OPENAI_STEP = 1024, 128  # OpenAI caches nothing below 1,024 shared tokens, then in steps of 128


def count_all(enc: Any, bodies: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Every request counted, in arrival order; ``prefix``: the leading tokens it shares with the last request
    that began with the same ``PREFIX_KEY`` tokens (what a prefix cache could reuse); ``openai_cached``: the
    same under OpenAI's rule."""
    last: dict[tuple[int, ...], list[int]] = {}
    out = []
    for body in bodies:
        row = count_body(enc, body)
        texts = [_schema_text(body)] + [f"{m.get('role')}: {_text(m.get('content'))}" for m in body["messages"]]
        tokens = list(enc.encode("\n".join(texts)))
        key = tuple(tokens[:PREFIX_KEY])
        before = last.get(key, [])
        shared = 0
        for a, b in zip(before, tokens, strict=False):
            if a != b:
                break
            shared += 1
        last[key] = tokens
        row["prefix"] = shared
        row["openai_cached"] = (
            0 if shared < OPENAI_MIN else OPENAI_MIN + (shared - OPENAI_MIN) // OPENAI_STEP * OPENAI_STEP
        )
        out.append(row)
    return out


def count_main() -> None:
    import bpe_openai

    enc = bpe_openai.get_encoding("o200k_base")
    json.dump(count_all(enc, json.load(sys.stdin)), sys.stdout)


async def _gather(jobs: list[Any], concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(job: Any) -> None:
        async with sem:
            await job

    await asyncio.gather(*(one(j) for j in jobs))


async def run_deepeval(base_url: str, records: list[dict[str, Any]], concurrency: int, metric_name: str) -> None:
    """DeepEval's metrics as its docs show them, ``include_reason`` left at its default (True: one more call for
    the reason). ``relevancy``: ContextualRelevancyMetric, one verdict call per retrieved chunk. ``precision``:
    ContextualPrecisionMetric, one verdict call over all chunks (a verdict each: greval's shape). It needs an
    ``expected_output``; the workload has none, so the record's answer is given as the expected output."""
    from deepeval.metrics import ContextualPrecisionMetric, ContextualRelevancyMetric
    from deepeval.models import OpenAIModel
    from deepeval.test_case import LLMTestCase

    model = OpenAIModel(model="gpt-4o-mini", base_url=base_url, api_key="sk-bench", temperature=0)
    kind = ContextualPrecisionMetric if metric_name == "precision" else ContextualRelevancyMetric

    async def one(rec: dict[str, Any]) -> None:
        metric = kind(model=model, async_mode=True)
        case = LLMTestCase(
            input=rec["question"],
            actual_output=rec["answer"],
            expected_output=rec["answer"],
            retrieval_context=rec["chunks"],
        )
        await metric.a_measure(case, _show_indicator=False)

    await _gather([one(r) for r in records], concurrency)


async def run_ragas(base_url: str, records: list[dict[str, Any]], concurrency: int, metric_name: str) -> None:
    """Ragas' collections metrics through ``llm_factory`` (instructor, JSON mode): ``precision`` is
    ContextPrecisionWithoutReference (one call per retrieved chunk: was it useful for the answer?), the
    per-chunk judgement; ``relevance`` is ContextRelevance (two judges over all chunks joined)."""
    from openai import AsyncOpenAI
    from ragas.llms.base import llm_factory
    from ragas.metrics.collections import ContextPrecisionWithoutReference, ContextRelevance

    client = AsyncOpenAI(base_url=base_url, api_key="sk-bench")
    llm = llm_factory("gpt-4o-mini", client=client, temperature=0)

    async def one(rec: dict[str, Any]) -> None:
        if metric_name == "precision":
            m = ContextPrecisionWithoutReference(llm=llm)
            await m.ascore(user_input=rec["question"], response=rec["answer"], retrieved_contexts=rec["chunks"])
        else:
            r = ContextRelevance(llm=llm)
            await r.ascore(user_input=rec["question"], retrieved_contexts=rec["chunks"])

    await _gather([one(r) for r in records], concurrency)


async def run_phoenix(base_url: str, records: list[dict[str, Any]], concurrency: int, metric_name: str) -> None:
    """arize-phoenix-evals' relevance classifiers through their own ``async_evaluate`` (tool calling, with the
    explanation it asks for by default), one call per retrieved chunk. ``relevance``: DocumentRelevanceEvaluator,
    the library's RAG relevancy template (question and one document; "relevant" or "unrelated"). phoenix-evals
    3.x no longer has ``llm_classify``: this evaluator is that template's call path now (deprecated since 3.7 in
    favour of ``retrieval``, which is kept as it ships). ``retrieval``: RetrievalRelevanceEvaluator, its
    successor, given one chunk as its ``context`` (per chunk, as its deprecation note says to keep)."""
    import warnings

    from phoenix.evals import LLM
    from phoenix.evals.metrics import DocumentRelevanceEvaluator, RetrievalRelevanceEvaluator

    llm = LLM(provider="openai", model="gpt-4o-mini", base_url=base_url, api_key="sk-bench")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        evaluator = (
            DocumentRelevanceEvaluator(llm=llm, temperature=0)
            if metric_name == "relevance"
            else RetrievalRelevanceEvaluator(llm=llm, temperature=0)
        )
    field = "document_text" if metric_name == "relevance" else "context"

    async def one(question: str, chunk: str) -> None:
        [score] = await evaluator.async_evaluate({"input": question, field: chunk})
        if score.label is None:
            raise SystemExit(f"phoenix: no label for a chunk: {score}")

    await _gather([one(r["question"], c) for r in records for c in r["chunks"]], concurrency)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["deepeval", "ragas", "phoenix", "count", "versions"])
    ap.add_argument("--base-url")
    ap.add_argument("--records", help="a JSON file: [{id, question, answer, chunks: [text]}]")
    ap.add_argument("--metric", default="precision", choices=["precision", "relevance", "relevancy", "retrieval"])
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args()
    if args.command == "count":
        count_main()
        return
    if args.command == "versions":
        from importlib.metadata import version

        names = ("deepeval", "ragas", "arize-phoenix-evals", "instructor", "openai", "bpe-openai")
        print(json.dumps({p: version(p) for p in names}))
        return
    with open(args.records, encoding="utf-8") as fh:
        records = json.load(fh)
    if args.command == "deepeval":
        asyncio.run(run_deepeval(args.base_url, records, args.concurrency, args.metric))
    elif args.command == "phoenix":
        asyncio.run(run_phoenix(args.base_url, records, args.concurrency, args.metric))
    else:
        asyncio.run(run_ragas(args.base_url, records, args.concurrency, args.metric))


if __name__ == "__main__":
    main()

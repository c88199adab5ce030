"""Prompt tokens per record on the per-chunk workload: greval against DeepEval, Ragas, Phoenix and an SDK loop.

Every framework judges the same records (a question, an answer and ``--chunks`` retrieved chunks of ~70 tokens,
as in ``scripts/bench_run.py``) against the same local OpenAI-compatible test server, which logs each request;
every logged request is then counted by one counter (``scripts/_bench_peers.py count``: OpenAI's o200k_base
encoding over the messages, their framing and the structured-output schema the request carries). Per round
and framework, on new records:

* ``greval`` — ``chunk_evaluation`` (one call per record: every chunk judged, one verdict each), the code of
  this checkout, through ``greval.run``;
* ``greval-old`` — the same, by the code at ``--baseline-ref`` (default: the commit before the prompt layout
  of issue 35), exported with ``git archive`` and run in its own process;
* ``deepeval`` — DeepEval's ContextualRelevancyMetric (a verdict call per chunk, then a reason call);
  ``deepeval-precision`` — its ContextualPrecisionMetric (one verdict call over all chunks, a verdict each:
  greval's shape; then a reason call). It needs an expected output: the record's answer is given as it;
* ``ragas`` — Ragas' ContextPrecisionWithoutReference (a call per chunk: was it useful for the answer?),
  the closest to a per-chunk judgement; ``ragas-relevance`` — Ragas' ContextRelevance (two judges over all
  chunks joined: not per chunk, shown for completeness);
* ``phoenix-relevance`` — arize-phoenix-evals' RAG relevancy template (DocumentRelevanceEvaluator: question
  and one document, "relevant" / "unrelated", with the explanation it asks for by default), one call per
  chunk through the library's own ``async_evaluate`` (3.x has no ``llm_classify`` any more);
  ``phoenix-retrieval`` — its successor RetrievalRelevanceEvaluator, given one chunk at a time;
* ``sdk`` — a hand-written ``openai`` loop, one call per chunk with a one-line question and the three label
  names (no steps, no descriptions: less in front of the judge than the spec gives).

The peers run in a venv of their own (``--peers-venv``; ``--setup-peers`` makes it: their pins of openai,
langchain and pydantic would break greval's environment) and are pointed at the test server; their answers
come from it too (Ragas asks in JSON mode with an unfenced schema, so two scripted rules answer its prompts).
Token counts do not depend on the machine's load; the load is printed as the issue asks. The columns:
``prompt`` = what the provider reads per record, ``schema`` = the part of it that is the structured-output
definition, ``prefix`` = tokens a prefix cache could reuse (the leading tokens each request shares with the
previous one that began alike), ``openai-cached`` = the same under OpenAI's rule (nothing below 1,024 shared
tokens, then steps of 128).

    python scripts/bench_tokens.py --setup-peers          # once: makes the peers' venv (minutes, ~1 GB)
    python scripts/bench_tokens.py                        # 3 rounds of 20 records, 5 chunks each
    python scripts/bench_tokens.py --rounds 5 --records 10 --peers-venv /tmp/peers-venv
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = Path(__file__).resolve().parent / "_bench_peers.py"
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "greval" / "bench-peers-venv"
# ragas 0.4.3 imports langchain_community.chat_models.vertexai, gone from langchain-community 0.4.
PEER_PACKAGES = [
    "ragas==0.4.3",
    "deepeval==4.3.1",
    "arize-phoenix-evals==3.9.4",
    "bpe-openai==0.1.4",
    "langchain-community<0.4",
]
#: Each peer system: (the framework, its metric) as ``_bench_peers.py`` names them.
PEER_METRICS = {
    "deepeval": ("deepeval", "relevancy"),
    "deepeval-precision": ("deepeval", "precision"),
    "ragas": ("ragas", "precision"),
    "ragas-relevance": ("ragas", "relevance"),
    "phoenix-relevance": ("phoenix", "relevance"),
    "phoenix-retrieval": ("phoenix", "retrieval"),
}
SYSTEMS = ["greval", "greval-old", *PEER_METRICS, "sdk"]
LABELS = ["Relevant", "Indirectly relevant", "Irrelevant"]
# Ragas' prompts carry their schema without a fence (JSON mode): the test server cannot read it, so these answer.
RAGAS_RULES = [
    {
        "match": "useful in arriving at the given answer",
        "action": {
            "type": "respond",
            "content": {"reason": "The context names the item the question asks about and explains it.", "verdict": 1},
        },
    },
    {"match": "rating", "action": {"type": "respond", "content": {"rating": 1}}},
]


def records(n: int, k: int, tag: str) -> list[dict[str, Any]]:
    """The per-chunk workload (bench_run.py's records, with an answer for the peers that need one)."""
    return [
        {
            "id": f"{tag}-{i}",
            "question": f"Which of these passages explain item {i} of batch {tag}?",
            "answer": f"Passages 1 and 3 explain item {i}: they describe it.",
            "chunks": [f"Passage {j} about item {i}: " + "lorem ipsum dolor sit amet " * 12 for j in range(k)],
        }
        for i in range(n)
    ]


# ---------------------------------------------------------------------------------------------- the passes
def greval_pass(base_url: str, path: str) -> None:
    """``chunk_evaluation`` over the records through ``greval.run`` (whichever greval PYTHONPATH gives)."""
    import greval

    recs = [greval.Record.from_mapping(r) for r in json.loads(Path(path).read_text())]
    cfg = greval.JudgeConfig.parse("openai:gpt-4o-mini", base_url=base_url, timeout=60)
    specs = greval.resolve_specs(["chunk_evaluation"])
    with tempfile.TemporaryDirectory() as d, greval.Store(Path(d) / "bench.sqlite") as st:
        summary = greval.run(specs, recs, st, cfg, options=greval.RunOptions(concurrency=8))
    if summary.failed:
        raise SystemExit(f"greval: {summary.failed} judgement(s) failed; the count is void")


async def sdk_pass(base_url: str, recs: list[dict[str, Any]]) -> None:
    """One ``openai`` call per chunk, the shortest prompt that still names the labels."""
    import openai

    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-bench")
    sem = asyncio.Semaphore(8)
    labels = " | ".join(f'"{lab}"' for lab in LABELS)

    async def one(question: str, chunk: str) -> None:
        prompt = (
            f"Question: {question}\nChunk: {chunk}\nIs the chunk relevant to the question? Answer in JSON: "
            f'{{"reason": "...", "label": {labels}}}'
        )
        async with sem:
            await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": prompt}],
                response_format={"type": "json_object"},
                temperature=0,
            )

    await asyncio.gather(*(one(r["question"], c) for r in recs for c in r["chunks"]))
    await client.close()


def run_system(system: str, srv: Any, path: str, recs: list[dict[str, Any]], ctx: dict[str, Any]) -> None:
    env = {**os.environ, "OPENAI_API_KEY": "sk-bench"}
    if system == "sdk":
        asyncio.run(sdk_pass(srv.base_url, recs))
        return
    if system.startswith("greval"):
        tree = str(ROOT) if system == "greval" else ctx["baseline"]
        cmd = [sys.executable, __file__, "--greval-pass", path, "--base-url", srv.base_url]
        env["PYTHONPATH"] = tree
    else:
        if system.startswith("ragas"):
            srv.script(RAGAS_RULES)
        peer, metric = PEER_METRICS[system]
        cmd = [ctx["peers_python"], str(PEERS), peer, "--base-url", srv.base_url, "--records", path]
        cmd += ["--metric", metric]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        raise SystemExit(f"{system} failed (exit {done.returncode}):\n{tail}")


def count(peers_python: str, bodies: list[dict[str, Any]]) -> list[dict[str, int]]:
    """Each logged request counted by the one counter (run by the Python that has the tokenizer)."""
    done = subprocess.run(
        [peers_python, str(PEERS), "count"], input=json.dumps(bodies), capture_output=True, text=True, check=True
    )
    result: list[dict[str, int]] = json.loads(done.stdout)
    return result


# --------------------------------------------------------------------------------------------- the harness
def baseline_tree(ref: str | None, into: Path) -> tuple[str, str]:
    """The greval package (and its bundled specs) at ``ref``, exported into ``into``: (ref, path)."""
    if ref is None:  # the commit before the one that introduced the layout constant
        out = subprocess.run(
            ["git", "log", "--reverse", "--format=%H", "-S", "PROMPT_LAYOUT: Final", "--", "greval/types.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if not out:
            raise SystemExit("no commit introduces PROMPT_LAYOUT here: give --baseline-ref")
        ref = f"{out[0]}^"
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True, check=True)
    archive = into / "baseline.tar"
    subprocess.run(["git", "archive", "-o", str(archive), ref, "greval", "metric_specs"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return sha.stdout.strip(), str(into / "tree")


def setup_peers(venv: Path) -> None:
    print(f"making the peers' venv {venv} ({', '.join(PEER_PACKAGES)}) …", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, *PEER_PACKAGES], check=True)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20, help="records per round")
    ap.add_argument("--chunks", type=int, default=5, help="retrieved chunks per record")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}")
    ap.add_argument("--peers-venv", type=Path, default=DEFAULT_VENV)
    ap.add_argument("--setup-peers", action="store_true", help="make the peers' venv first")
    ap.add_argument("--baseline-ref", help="the greval commit whose layout is 'greval-old'")
    ap.add_argument("--greval-pass", help=argparse.SUPPRESS)
    ap.add_argument("--base-url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.greval_pass:  # a child process: judge with the greval PYTHONPATH names
        greval_pass(args.base_url, args.greval_pass)
        return
    sys.path.insert(0, str(ROOT))
    from greval.testing.openai_server import OpenAIServer

    if args.setup_peers:
        setup_peers(args.peers_venv)
    peers_python = str(args.peers_venv / "bin" / "python")
    if not Path(peers_python).exists():
        raise SystemExit(f"no peers' venv at {args.peers_venv} (the token counter lives there): run --setup-peers")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(unknown)} (have {', '.join(SYSTEMS)})")
    versions = subprocess.run([peers_python, str(PEERS), "versions"], capture_output=True, text=True, check=True)
    per: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    with tempfile.TemporaryDirectory() as tmp, OpenAIServer() as srv:
        ref, tree = baseline_tree(args.baseline_ref, Path(tmp))
        ctx = {"baseline": tree, "peers_python": peers_python}
        print(f"load average at start: {load()}; peers: {versions.stdout.strip()}; greval-old = {ref}")
        print(f"{args.rounds} rounds × {args.records} records × {args.chunks} chunks; o200k_base tokens per record")
        for rnd in range(args.rounds):
            recs = records(args.records, args.chunks, f"r{rnd}")
            path = str(Path(tmp) / f"records-{rnd}.json")
            Path(path).write_text(json.dumps(recs))
            order = systems[rnd % len(systems) :] + systems[: rnd % len(systems)]  # rotate: no fixed order
            for system in order:
                srv.reset()
                t0 = time.perf_counter()
                run_system(system, srv, path, recs, ctx)
                counts = count(peers_python, srv.requests())
                n = args.records
                row = {
                    "calls": len(counts) / n,
                    "prompt": sum(c["messages"] + c["schema"] for c in counts) / n,
                    "schema": sum(c["schema"] for c in counts) / n,
                    "prefix": sum(c["prefix"] for c in counts) / n,
                    "openai_cached": sum(c["openai_cached"] for c in counts) / n,
                }
                per[system].append(row)
                took = time.perf_counter() - t0
                print(
                    f"  round {rnd + 1} {system:<18} {row['calls']:5.1f} calls  {row['prompt']:8.1f} prompt  "
                    f"{row['schema']:6.1f} schema  {row['prefix']:7.1f} prefix  {row['openai_cached']:7.1f} "
                    f"openai-cached  ({took:.1f} s, load {load()})",
                    flush=True,
                )
    report(per, systems)
    print(f"load average at the end: {load()}")


def report(per: dict[str, list[dict[str, float]]], systems: list[str]) -> None:
    """Medians over rounds, and greval's ratio to each other system paired round by round."""
    med = {s: {k: statistics.median(r[k] for r in per[s]) for k in per[s][0]} for s in systems}
    print("\nmedian per record          calls    prompt   schema   prefix  openai-cached")
    for s in systems:
        m = med[s]
        print(
            f"  {s:<22} {m['calls']:6.1f} {m['prompt']:9.1f} {m['schema']:8.1f} {m['prefix']:8.1f} "
            f"{m['openai_cached']:9.1f}"
        )
    if "greval" not in systems:
        return
    print("\ngreval's prompt tokens ÷ each system's, per round → median")
    for s in systems:
        if s == "greval":
            continue
        ratios = [g["prompt"] / o["prompt"] for g, o in zip(per["greval"], per[s], strict=True)]
        shown = " ".join(f"{r:.3f}" for r in ratios)
        print(f"  ÷ {s:<18} {shown} → {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()

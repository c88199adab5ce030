"""Benchmark the local judge's two engines side by side: the xllamacpp wheel (pip, prebuilt) against llama-server
built from source, on the same model, threads and slots, in alternating rounds (the order flips each round).

Per engine and round (the server started afresh by greval's own ``LocalJudgeServer``):

* ``start``: seconds from starting the server process to ``/health`` ok;
* the judge's real requests — the quick start's spec (``attribution``) on its first ``--records`` records, the
  system prompt, few-shot turns and record message greval builds, temperature 0, at most 200 tokens — sent one
  after the other in four forms: ``schema`` (the JSON schema response format, what every judgement sends),
  ``schema+lp`` (with ``logprobs`` and ``top_logprobs`` ``--top``: what ``greval run --logprobs`` adds),
  ``lp`` (log-probabilities, no schema) and ``plain`` (neither);
* ``2 at once``: the ``schema`` requests two at a time (greval's default ``GREVAL_LLAMA_PARALLEL``: 2 slots).

Figures: ``gen tok/s``, the server's own generation speed (its ``timings.predicted_per_second``, the median
over the requests); ``tok/s``, completion tokens over wall time (the prompt's processing included); ``s/req``.
Printed: each engine's median over the rounds, and the median of the per-round ratios wheel / build; the load
average before each round. Then, with ``--verdicts N``, N alternating rounds of the quick start's step 2 itself
(its 30 records judged by ``greval.run`` with the embedded judge, a fresh store each) on each engine: its wall
time, calls (retries included), tokens generated, the labels and errors, and how many records got the same label
from both engines (the same kind of answers: labels of the spec, errors of the same kinds).

``--wait-policy ACTIVE`` runs both engines with OpenMP's threads spinning between their work instead of
sleeping (greval's servers get ``OMP_WAIT_POLICY=PASSIVE`` unless the user's environment sets it): faster on an
idle machine, far slower on a busy one.

    python scripts/bench_local_engine.py [--rounds 3] [--records 6] [--top 5] [--verdicts 3] [--forms 0]
        [--max-tokens 200] [--wait-policy PASSIVE|ACTIVE]
        [--binary PATH]   # the source build (default: the one greval built in its data directory)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from greval.llm.local import Engine, LocalJudgeServer, find_llama_server, wheel_version

FORMS = ("schema", "schema+lp", "lp", "plain", "2 at once")
MAX_TOKENS = 200  # the embedded judge's cap (greval.llm.config.LOCAL_MAX_TOKENS): --max-tokens


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} / {five:.1f} / {fifteen:.1f}"


def judge_requests(n: int) -> tuple[list[list[dict[str, str]]], dict[str, Any], set[str]]:
    """The quick start's judge requests for its first ``n`` records: messages, response format, labels."""
    from greval.cli.workspace import write_workspace
    from greval.dataset.records import load_records
    from greval.judge.judge import Judge
    from greval.llm.openai_chat import OpenAIChat
    from greval.spec import CategoricalScale, Spec, load_spec_file

    work = Path(tempfile.mkdtemp(prefix="greval-bench-engine-"))
    write_workspace(work)
    spec = load_spec_file(work / "attribution.yaml")[0]
    assert isinstance(spec, Spec) and isinstance(spec.scale, CategoricalScale)
    judge = Judge(spec, OpenAIChat(model="m", api_key=SecretStr("local")))
    records = load_records(work / "records.jsonl")[:n]
    messages = [
        [{"role": m["role"], "content": m["content"]} for m in judge.messages("json_schema", r.data, None, None)]
        for r in records
    ]
    labels = {label.name for label in spec.scale.labels}
    return messages, judge._response_format("json_schema"), labels


def _ask(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    response = client.post("/chat/completions", json=body)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    data["_wall"] = time.perf_counter() - started
    return data


def _figures(answers: list[dict[str, Any]], wall: float) -> dict[str, float]:
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    gen = [a["timings"]["predicted_per_second"] for a in answers if a.get("timings")]
    return {
        "gen tok/s": statistics.median(gen) if gen else float("nan"),
        "tok/s": tokens / wall,
        "s/req": wall / len(answers),
    }


Figures = dict[str, dict[str, float]]


def measure(engine: Engine, requests: list[dict[str, Any]], threads: int, cap: int) -> tuple[Figures, list[str]]:
    """One round on one engine: start, then each form; the ``schema`` answers' contents, for comparison."""
    started = time.perf_counter()
    with LocalJudgeServer("local", engine=engine, threads=threads, parallel=2, ctx_size=4096) as server:
        out: Figures = {"start": {"s": time.perf_counter() - started}}
        base = {"model": server.model, "temperature": 0, "max_tokens": cap}
        with httpx.Client(base_url=server.base_url, timeout=600) as client:
            _ask(client, {**base, **requests[0]["plain"]})  # warm-up: the shared prefix cached, pages touched
            contents: list[str] = []
            for form in FORMS[:4]:
                t = time.perf_counter()
                answers = [_ask(client, {**base, **r[form]}) for r in requests]
                out[form] = _figures(answers, time.perf_counter() - t)
                if form == "schema":
                    contents = [a["choices"][0]["message"]["content"] for a in answers]
            t = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                answers = list(pool.map(lambda r: _ask(client, {**base, **r["schema"]}), requests))
            out["2 at once"] = _figures(answers, time.perf_counter() - t)
    return out, contents


def _forms(messages: list[list[dict[str, str]]], fmt: dict[str, Any], top: int) -> list[dict[str, Any]]:
    lp = {"logprobs": True, "top_logprobs": top}
    return [
        {
            "plain": {"messages": m},
            "schema": {"messages": m, "response_format": fmt},
            "schema+lp": {"messages": m, "response_format": fmt, **lp},
            "lp": {"messages": m, **lp},
        }
        for m in messages
    ]


def _valid(content: str, labels: set[str]) -> bool:
    try:
        label = json.loads(content).get("label")
    except (ValueError, AttributeError):
        return False
    return label in labels


@dataclass(frozen=True)
class QuickStart:
    """The quick start's step 2 on one engine: wall seconds, calls (retries included), tokens generated,
    label per record id, the errors' messages."""

    wall: float
    calls: int
    tokens_out: int
    labels: dict[str, str]
    errors: list[str]


def verdicts(engine_env: dict[str, str]) -> QuickStart:
    """The quick start's step 2 (its 30 records, the embedded judge) with one engine, in a fresh store."""
    import greval
    from greval.cli.workspace import write_workspace

    saved = {k: os.environ.get(k) for k in ("GREVAL_LLAMA_ENGINE", "GREVAL_LLAMA_SERVER")}
    for key in saved:
        os.environ.pop(key, None)
    os.environ.update(engine_env)
    try:
        with tempfile.TemporaryDirectory(prefix="greval-bench-qs-") as tmp:
            work = Path(tmp)
            write_workspace(work)
            specs = greval.load_spec_file(work / "attribution.yaml")
            started = time.perf_counter()
            with greval.Store(work / "s.sqlite") as st:
                summary = greval.run(
                    specs, greval.load_records(work / "records.jsonl"), st, greval.JudgeConfig.parse("local")
                )
                wall = time.perf_counter() - started
                frame = greval.load_results(st, "attribution", level="record")
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value
    ok = frame[frame["status"] == "ok"]
    return QuickStart(
        wall=wall,
        calls=summary.calls,
        tokens_out=summary.metrics[0].tokens_out,
        labels={str(r["record_id"]): str(r["label"]) for _, r in ok.iterrows()},
        errors=[str(e)[:60] for e in frame[frame["status"] != "ok"]["error"]],
    )


def _table(results: dict[str, list[dict[str, dict[str, float]]]], names: list[str]) -> None:
    rows = [("start", "s"), *((f, k) for f in FORMS for k in ("gen tok/s", "tok/s", "s/req"))]
    print(f"\n{'':<22}" + "".join(f"{n:>12}" for n in names) + f"{'wheel/build':>14}")
    for form, key in rows:
        if form == "2 at once" and key == "gen tok/s":
            continue  # per request; the two requests share the cores
        meds = [statistics.median(r[form][key] for r in results[n]) for n in names]
        ratios = [w[form][key] / b[form][key] for w, b in zip(results["wheel"], results["build"], strict=True)]
        label = f"{form} {key}"
        print(f"{label:<22}" + "".join(f"{m:>12.2f}" for m in meds) + f"{statistics.median(ratios):>13.2f}x")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=6)
    ap.add_argument("--top", type=int, default=5, help="top_logprobs of the log-probability forms")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--binary", type=Path, default=None, help="the source-built llama-server")
    ap.add_argument("--verdicts", type=int, default=0, help="rounds of the quick start's step 2 on each engine")
    ap.add_argument("--forms", type=int, default=None, help="rounds of the request forms (default --rounds)")
    ap.add_argument("--max-tokens", type=int, default=MAX_TOKENS, help="the requests' cap (the forms only)")
    ap.add_argument("--wait-policy", choices=("PASSIVE", "ACTIVE"), default="PASSIVE", help="OpenMP's, both engines")
    args = ap.parse_args(argv)
    os.environ["OMP_WAIT_POLICY"] = args.wait_policy  # what LocalJudgeServer passes on (it sets PASSIVE if unset)
    binary = args.binary or find_llama_server()
    version = wheel_version()
    if binary is None or version is None:
        sys.exit("needs both engines: llama-server built (greval local-judge build) and xllamacpp installed")
    engines = {
        "build": Engine("build", f"llama-server {binary}", binary),
        "wheel": Engine("wheel", f"xllamacpp {version}"),
    }
    messages, fmt, labels = judge_requests(args.records)
    requests = _forms(messages, fmt, args.top)
    print(f"engines: build = {binary}; wheel = xllamacpp {version}")
    print(
        f"{args.threads} threads, 2 slots, {len(requests)} records, top_logprobs {args.top}, at most "
        f"{args.max_tokens} tokens, OMP_WAIT_POLICY={args.wait_policy}"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M')}  {os.cpu_count()} cores  {_load()} at the start")
    results: dict[str, list[dict[str, dict[str, float]]]] = {n: [] for n in engines}
    answers: dict[str, list[list[str]]] = {n: [] for n in engines}
    for i in range(args.rounds if args.forms is None else args.forms):
        order = list(engines) if i % 2 == 0 else list(reversed(engines))
        for name in order:
            print(f"round {i + 1} {name:<5} ({_load()})", flush=True)
            got, contents = measure(engines[name], requests, args.threads, args.max_tokens)
            results[name].append(got)
            answers[name].append(contents)
    if results["build"]:
        _table(results, list(engines))
        _compare(answers, labels)
    if args.verdicts:
        envs = {"build": {"GREVAL_LLAMA_SERVER": str(binary)}, "wheel": {"GREVAL_LLAMA_ENGINE": "wheel"}}
        _quickstart(envs, args.verdicts)
    print(f"\n{_load()} at the end")


def _compare(answers: dict[str, list[list[str]]], labels: set[str]) -> None:
    """The ``schema`` answers: valid (JSON with a label of the spec) and the same text on both engines."""
    for name, rounds in answers.items():
        flat = [c for r in rounds for c in r]
        print(f"{name}: {sum(_valid(c, labels) for c in flat)} of {len(flat)} schema answers valid with a spec label")
    pairs = zip(answers["build"], answers["wheel"], strict=True)
    same = sum(a == b for ra, rb in pairs for a, b in zip(ra, rb, strict=True))
    total = sum(len(r) for r in answers["build"])
    print(f"identical text on both engines (temperature 0): {same} of {total}")


def _quickstart(envs: dict[str, dict[str, str]], rounds: int) -> None:
    """Step 2 of the quick start on each engine, in alternating rounds; the labels compared round by round."""
    got: dict[str, list[QuickStart]] = {name: [] for name in envs}
    for i in range(rounds):
        order = list(envs) if i % 2 == 0 else list(reversed(envs))
        for name in order:
            print(f"quick start step 2, round {i + 1}, {name} ({_load()})", flush=True)
            got[name].append(verdicts(envs[name]))
    for name, runs in got.items():
        for run in runs:
            counts = {lab: list(run.labels.values()).count(lab) for lab in sorted(set(run.labels.values()))}
            print(
                f"{name}: {run.wall:.0f} s, {run.calls} calls, {run.tokens_out} tokens out, labels {counts}, "
                f"{len(run.errors)} errors {sorted(set(run.errors))}"
            )
        print(f"{name}: median {statistics.median(r.wall for r in runs):.0f} s for the 30 records")
    ratios = [w.wall / b.wall for w, b in zip(got["wheel"], got["build"], strict=True)]
    print(
        f"wheel / build, step 2's wall time: median {statistics.median(ratios):.2f}x (rounds: "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + ")"
    )
    for b, w in zip(got["build"], got["wheel"], strict=True):
        print(f"same label on both engines (one round): {_same(b.labels, w.labels)}")
    for name, runs in got.items():  # the engine against itself: what temperature 0 repeats
        again = [_same(runs[0].labels, r.labels) for r in runs[1:]]
        print(f"same label on {name} in round 1 and each later round: {again}")


def _same(a: dict[str, str], b: dict[str, str]) -> str:
    both = set(a) & set(b)
    return f"{sum(a[k] == b[k] for k in both)} of {len(both)}"


if __name__ == "__main__":
    main()

"""A small instrumented RAG app (the test suite's own): what a team's service looks like to greval's Phoenix source.

For each question it emits, through OpenTelemetry with OpenInference's conventions, one trace: a root CHAIN span
(``input.value`` the question, ``output.value`` the answer, ``metadata`` the expected answer), a RETRIEVER span
whose ``retrieval.documents`` hold the top documents (ids, content, score, metadata) of a word-overlap retriever,
and an LLM span made by openinference-instrumentation-openai around a real openai SDK call to an
OpenAI-compatible server (the test LLM server). Spans go to Phoenix over OTLP/HTTP.

Run as a program (its own process, so the openai instrumentation patches nothing in the test's process):

    python -m tests.traces_app --phoenix http://127.0.0.1:6006 --project rag --llm http://127.0.0.1:PORT/v1 --n 20

It prints one JSON line per trace: ``{"trace_id", "root_span_id", "retriever_span_id", "question", "documents"}``.

With ``--chats N`` it holds N conversations instead (``--turns`` questions each): every turn one trace whose root
CHAIN span carries ``session.id`` (the conversation), its question and answer, and whose LLM span (the openai
instrumentation, under ``using_session``) sends the conversation so far. One JSON line per turn:
``{"session_id", "turn", "trace_id", "root_span_id", "question", "answer"}``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

#: The app's knowledge base: id -> (title, text). Fictional facts, so no judge can know them beforehand.
DOCUMENTS: dict[str, tuple[str, str]] = {
    f"kb-{i:02d}": (title, text)
    for i, (title, text) in enumerate(
        [
            ("Ostra bridge", "The Ostra bridge over the Vell river was opened in 1911 and is 412 metres long."),
            ("Ostra bridge repairs", "The Ostra bridge was closed for repairs from 1998 to 2001."),
            ("Vell river", "The Vell river rises in the Tarn hills and flows 240 kilometres to the Amber sea."),
            ("Tarn hills", "The highest summit of the Tarn hills is Mount Orrel, 1,204 metres high."),
            ("Mount Orrel", "Mount Orrel was first climbed in 1832 by the surveyor Ida Kessel."),
            ("Ida Kessel", "Ida Kessel mapped the Tarn hills and founded the Kessel survey school in 1840."),
            ("Kessel school", "The Kessel survey school moved to the town of Brisk in 1875."),
            ("Brisk", "Brisk is a market town of 18,000 people on the eastern bank of the Vell."),
            ("Brisk market", "The Brisk cheese market is held every Thursday since 1650."),
            ("Brisk cheese", "Brisk cheese is a hard cheese made from sheep's milk and aged nine months."),
            ("Amber sea", "The Amber sea is shallow: its average depth is 38 metres."),
            ("Amber sea ports", "Port Lune is the largest port of the Amber sea, handling grain and timber."),
            ("Port Lune", "Port Lune's lighthouse, the Lune light, was built in 1788 and is 31 metres tall."),
            ("Lune light", "The Lune light was automated in 1964 and is now a museum of navigation."),
            ("Vell ferries", "Before the Ostra bridge, the Vell was crossed by the Harrow ferry."),
            ("Harrow ferry", "The Harrow ferry carried up to forty passengers and ran from 1790 to 1911."),
            ("Tarn railway", "The Tarn railway links Brisk and Port Lune; it opened in 1869."),
            ("Tarn railway length", "The Tarn railway is 96 kilometres long and has eleven stations."),
            ("Orrel glacier", "A small glacier, the Orrel ice, lies on the north face of Mount Orrel."),
            ("Brisk university", "Brisk university grew out of the Kessel survey school in 1921."),
        ]
    )
}

#: (question, expected answer): each answerable from the knowledge base.
QUESTIONS: list[tuple[str, str]] = [
    ("When was the Ostra bridge opened?", "The Ostra bridge was opened in 1911."),
    ("How long is the Ostra bridge?", "It is 412 metres long."),
    ("Where does the Vell river rise?", "In the Tarn hills."),
    ("How long is the Vell river?", "240 kilometres."),
    ("What is the highest summit of the Tarn hills?", "Mount Orrel, 1,204 metres high."),
    ("Who first climbed Mount Orrel?", "The surveyor Ida Kessel, in 1832."),
    ("What did Ida Kessel found?", "The Kessel survey school, in 1840."),
    ("Where did the Kessel survey school move?", "To the town of Brisk, in 1875."),
    ("How many people live in Brisk?", "About 18,000 people."),
    ("When is the Brisk cheese market held?", "Every Thursday."),
    ("What milk is Brisk cheese made from?", "Sheep's milk."),
    ("How deep is the Amber sea on average?", "38 metres."),
    ("What is the largest port of the Amber sea?", "Port Lune."),
    ("When was the Lune light built?", "In 1788."),
    ("When was the Lune light automated?", "In 1964."),
    ("How was the Vell crossed before the Ostra bridge?", "By the Harrow ferry."),
    ("How many passengers did the Harrow ferry carry?", "Up to forty passengers."),
    ("When did the Tarn railway open?", "In 1869."),
    ("How many stations does the Tarn railway have?", "Eleven stations."),
    ("What did the Kessel survey school become?", "Brisk university, in 1921."),
]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9']+", text.lower()) if len(w) > 2}


def retrieve(question: str, k: int = 3) -> list[dict[str, Any]]:
    """The top ``k`` documents by word overlap with the question (ties by id): id, content, score, metadata."""
    q = _words(question)
    ranked = sorted(DOCUMENTS, key=lambda d: (-len(q & _words(" ".join(DOCUMENTS[d]))), d))[:k]
    return [
        {
            "id": d,
            "content": DOCUMENTS[d][1],
            "score": round(len(q & _words(" ".join(DOCUMENTS[d]))) / max(1, len(q)), 4),
            "metadata": {"title": DOCUMENTS[d][0], "source": "kb"},
        }
        for d in ranked
    ]


def _tracing(phoenix: str, project: str, llm: str) -> tuple[Any, Any, Any]:
    """(tracer provider, tracer, openai client): spans to Phoenix over OTLP/HTTP, the openai SDK instrumented."""
    import openai
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from openinference.semconv.resource import ResourceAttributes
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource({ResourceAttributes.PROJECT_NAME: project}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.rstrip('/')}/v1/traces")))
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    client = openai.OpenAI(base_url=llm, api_key="sk-rag-app-test", max_retries=0)
    return provider, provider.get_tracer("greval-tests-rag-app"), client


def run(phoenix: str, project: str, llm: str, n: int) -> list[dict[str, Any]]:
    """Answer the first ``n`` questions, one trace each; returns what each trace holds (ids included)."""
    from openinference.semconv.trace import DocumentAttributes, OpenInferenceSpanKindValues, SpanAttributes

    provider, tracer, client = _tracing(phoenix, project, llm)
    kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
    out = []
    for question, expected in QUESTIONS[:n]:
        with tracer.start_as_current_span("rag") as root:
            root.set_attribute(kind, OpenInferenceSpanKindValues.CHAIN.value)
            root.set_attribute(SpanAttributes.INPUT_VALUE, question)
            root.set_attribute(SpanAttributes.METADATA, json.dumps({"expected_answer": expected, "app": "rag-v1"}))
            with tracer.start_as_current_span("retrieve") as ret:
                ret.set_attribute(kind, OpenInferenceSpanKindValues.RETRIEVER.value)
                ret.set_attribute(SpanAttributes.INPUT_VALUE, question)
                docs = retrieve(question)
                for i, doc in enumerate(docs):
                    prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{i}."
                    ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc["id"])
                    ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, doc["content"])
                    ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, doc["score"])
                    ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_METADATA, json.dumps(doc["metadata"]))
            context = "\n".join(f"[{d['id']}] {d['content']}" for d in docs)
            reply = client.chat.completions.create(
                model="rag-app-model",
                messages=[
                    {"role": "system", "content": "Answer from the context only.\n" + context},
                    {"role": "user", "content": question},
                ],
            )
            answer = reply.choices[0].message.content or ""
            root.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
            ctx = root.get_span_context()
            out.append(
                {
                    "trace_id": f"{ctx.trace_id:032x}",
                    "root_span_id": f"{ctx.span_id:016x}",
                    "retriever_span_id": f"{ret.get_span_context().span_id:016x}",
                    "question": question,
                    "expected_answer": expected,
                    "answer": answer,
                    "documents": docs,
                }
            )
    provider.force_flush()
    provider.shutdown()
    return out


def chat(phoenix: str, project: str, llm: str, chats: int, turns: int) -> list[dict[str, Any]]:
    """``chats`` conversations of ``turns`` questions each, every turn one trace in the conversation's session."""
    from openinference.instrumentation import using_session
    from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes

    provider, tracer, client = _tracing(phoenix, project, llm)
    out = []
    for c in range(chats):
        session = f"chat-{c + 1}"
        history: list[dict[str, str]] = [{"role": "system", "content": "You answer questions about the Vell valley."}]
        for t in range(turns):
            question = QUESTIONS[(c * turns + t) % len(QUESTIONS)][0]
            with using_session(session), tracer.start_as_current_span("chat turn") as root:
                root.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.CHAIN.value)
                root.set_attribute(SpanAttributes.SESSION_ID, session)
                root.set_attribute(SpanAttributes.INPUT_VALUE, question)
                history.append({"role": "user", "content": question})
                reply = client.chat.completions.create(model="rag-app-model", messages=history)
                answer = reply.choices[0].message.content or ""
                history.append({"role": "assistant", "content": answer})
                root.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
                ctx = root.get_span_context()
            out.append(
                {
                    "session_id": session,
                    "turn": t + 1,
                    "trace_id": f"{ctx.trace_id:032x}",
                    "root_span_id": f"{ctx.span_id:016x}",
                    "question": question,
                    "answer": answer,
                }
            )
    provider.force_flush()
    provider.shutdown()
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--phoenix", required=True, help="Phoenix's base URL (OTLP/HTTP at /v1/traces)")
    ap.add_argument("--project", required=True)
    ap.add_argument("--llm", required=True, help="OpenAI-compatible base URL (…/v1)")
    ap.add_argument("--n", type=int, default=len(QUESTIONS))
    ap.add_argument("--chats", type=int, default=0, help="hold this many conversations instead (sessions)")
    ap.add_argument("--turns", type=int, default=3, help="questions per conversation")
    args = ap.parse_args(argv)
    if args.chats:
        traces = chat(args.phoenix, args.project, args.llm, args.chats, args.turns)
    else:
        traces = run(args.phoenix, args.project, args.llm, args.n)
    for trace in traces:
        sys.stdout.write(json.dumps(trace) + "\n")


if __name__ == "__main__":
    main()

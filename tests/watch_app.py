"""The suite's instrumented RAG app (tests/traces_app.py) as a live service for ``greval watch``: it answers a
stream of questions over time, and can start answering from the wrong chunk part-way (the drift the watch must
catch).

Each question is one trace with OpenInference's conventions: a root CHAIN span (``input.value`` the question,
``output.value`` the answer, ``metadata`` the expected answer, and a ``route`` attribute: ``search`` or ``chat``),
a RETRIEVER span with the top documents of the word-overlap retriever, and an LLM span — made by
openinference-instrumentation-openai around a real openai SDK call to the test LLM server, or (``--no-llm``) by
hand with its token counts, for streams of thousands of traces. The app answers **extractively**: its answer is
the sentence of the chunk it picked (the LLM call is the step that would phrase it; the test server's canned
reply stays in the LLM span). Until ``--drift-after`` it picks the top chunk; from then on the chunk the
retriever ranked lowest of all (the wrong one).

Spans go to Phoenix over OTLP/HTTP, or (``--otlp-dir``) into OTLP JSON files, ``--per-file`` traces each,
written as the OTLP encoder makes them (protobuf's JSON mapping) and renamed into place once complete.

    python -m tests.watch_app --phoenix http://127.0.0.1:6006 --project rag --llm http://127.0.0.1:PORT/v1 \\
        --n 80 --pace 0.25 --drift-after 40

One JSON line per trace: ``{"trace_id", "root_span_id", "question", "answer", "drifted", "route", "started"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.traces_app import DOCUMENTS, QUESTIONS, _words, retrieve


def wrong_chunk(question: str) -> str:
    """The document the retriever ranks lowest for ``question`` (ties by id): the drifted app's answer."""
    q = _words(question)
    return sorted(DOCUMENTS, key=lambda d: (len(q & _words(" ".join(DOCUMENTS[d]))), d))[0]


def answer_for(i: int, drift_after: int | None) -> tuple[str, str, bool]:
    """(question, answer, drifted) of the ``i``-th trace."""
    question = QUESTIONS[i % len(QUESTIONS)][0]
    drifted = drift_after is not None and i >= drift_after
    chunk = wrong_chunk(question) if drifted else retrieve(question)[0]["id"]
    return question, DOCUMENTS[chunk][1], drifted


class _FileExporter:
    """An OTel span exporter that keeps spans until :meth:`flush_file` writes them as one OTLP JSON file."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.spans: list[Any] = []
        self.files = 0

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += list(spans)
        return SpanExportResult.SUCCESS

    def flush_file(self) -> None:
        from google.protobuf.json_format import MessageToDict
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        if not self.spans:
            return
        self.files += 1
        final = self.folder / f"spans-{self.files:05d}.json"
        tmp = self.folder / f".{final.name}.tmp"
        tmp.write_text(json.dumps(MessageToDict(encode_spans(self.spans))))
        os.replace(tmp, final)  # a file appears whole
        self.spans = []

    def shutdown(self) -> None:
        self.flush_file()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _provider(args: argparse.Namespace) -> tuple[Any, Any, _FileExporter | None]:
    from openinference.semconv.resource import ResourceAttributes
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource({ResourceAttributes.PROJECT_NAME: args.project}))
    files = None
    if args.otlp_dir:
        files = _FileExporter(Path(args.otlp_dir))
        provider.add_span_processor(SimpleSpanProcessor(files))  # type: ignore[arg-type]
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = f"{args.phoenix.rstrip('/')}/v1/traces"
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider, provider.get_tracer("greval-tests-watch-app"), files


def _llm_span(tracer: Any, client: Any, context: str, question: str) -> None:
    from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes

    messages = [{"role": "system", "content": "Answer from the context only.\n" + context},
                {"role": "user", "content": question}]  # fmt: skip
    if client is not None:  # the openai instrumentation makes the LLM span
        client.chat.completions.create(model="rag-app-model", messages=messages)
        return
    with tracer.start_as_current_span("ChatCompletion") as llm:
        llm.set_attribute(SpanAttributes.OPENINFERENCE_SPAN_KIND, OpenInferenceSpanKindValues.LLM.value)
        llm.set_attribute("llm.input_messages.0.message.role", "user")
        llm.set_attribute("llm.input_messages.0.message.content", question)
        llm.set_attribute("llm.output_messages.0.message.role", "assistant")
        llm.set_attribute("llm.output_messages.0.message.content", "OK")
        llm.set_attribute(SpanAttributes.LLM_TOKEN_COUNT_PROMPT, 40 + len(context) // 4)
        llm.set_attribute(SpanAttributes.LLM_TOKEN_COUNT_COMPLETION, 2)


def trace(tracer: Any, client: Any, i: int, drift_after: int | None) -> dict[str, Any]:
    """Answer the ``i``-th question as one trace; what it holds."""
    from openinference.semconv.trace import DocumentAttributes, OpenInferenceSpanKindValues, SpanAttributes

    kind = SpanAttributes.OPENINFERENCE_SPAN_KIND
    question, answer, drifted = answer_for(i, drift_after)
    expected = QUESTIONS[i % len(QUESTIONS)][1]
    route = "chat" if i % 3 == 0 else "search"
    started = time.time()
    with tracer.start_as_current_span("rag") as root:
        root.set_attribute(kind, OpenInferenceSpanKindValues.CHAIN.value)
        root.set_attribute(SpanAttributes.INPUT_VALUE, question)
        root.set_attribute(SpanAttributes.METADATA, json.dumps({"expected_answer": expected, "app": "rag-v1"}))
        root.set_attribute("route", route)
        with tracer.start_as_current_span("retrieve") as ret:
            ret.set_attribute(kind, OpenInferenceSpanKindValues.RETRIEVER.value)
            ret.set_attribute(SpanAttributes.INPUT_VALUE, question)
            for n, doc in enumerate(retrieve(question)):
                prefix = f"{SpanAttributes.RETRIEVAL_DOCUMENTS}.{n}."
                ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_ID, doc["id"])
                ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_CONTENT, doc["content"])
                ret.set_attribute(prefix + DocumentAttributes.DOCUMENT_SCORE, doc["score"])
        _llm_span(tracer, client, answer, question)
        root.set_attribute(SpanAttributes.OUTPUT_VALUE, answer)
        ctx = root.get_span_context()
    return {"trace_id": f"{ctx.trace_id:032x}", "root_span_id": f"{ctx.span_id:016x}", "question": question,
            "answer": answer, "drifted": drifted, "route": route, "started": started}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--phoenix", default="", help="Phoenix's base URL (OTLP/HTTP at /v1/traces)")
    ap.add_argument("--project", default="rag")
    ap.add_argument("--llm", default="", help="OpenAI-compatible base URL (…/v1); unused with --no-llm")
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--start", type=int, default=0, help="the first question's number (the stream goes on)")
    ap.add_argument("--pace", type=float, default=0.0, help="seconds between traces")
    ap.add_argument("--drift-after", type=int, default=None, help="answer from the wrong chunk from this trace on")
    ap.add_argument("--otlp-dir", default="", help="write OTLP JSON files here instead of sending to Phoenix")
    ap.add_argument("--per-file", type=int, default=50, help="traces per OTLP JSON file")
    ap.add_argument("--no-llm", action="store_true", help="make the LLM span by hand (no LLM call)")
    args = ap.parse_args(argv)
    provider, tracer, files = _provider(args)
    client = None
    if not args.no_llm:
        import openai
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
        client = openai.OpenAI(base_url=args.llm, api_key="sk-rag-app-test", max_retries=0)
    for i in range(args.start, args.start + args.n):
        sys.stdout.write(json.dumps(trace(tracer, client, i, args.drift_after)) + "\n")
        sys.stdout.flush()
        if files is not None and (i - args.start + 1) % args.per_file == 0:
            files.flush_file()
        if args.pace:
            time.sleep(args.pace)
    provider.force_flush()
    provider.shutdown()


if __name__ == "__main__":
    main()

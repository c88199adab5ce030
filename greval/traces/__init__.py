"""Traces in, verdicts back: what a RAG service's tracing tool recorded, read as greval records.

- ``detect``: what ``greval run DATA`` reads (a ``phoenix://`` address, an export recognised by its shape, or a
  plain table);
- ``spans``: the one span shape every tool's export is read into; ``assemble``: one trace → one row;
  ``source``: traces as a run's rows, with one note per kind of gap;
- ``openinference`` (Phoenix's OpenInference spans), ``phoenix`` (the live server and its exports),
  ``langsmith``, ``langfuse``: one module per tool;
- ``phoenix_annotations``: verdicts back to Phoenix as span and document annotations.

Nothing here is imported by ``import greval``; Phoenix's client is imported only when a Phoenix server is read.
"""

__all__ = [
    "assemble",
    "detect",
    "langfuse",
    "langsmith",
    "openinference",
    "phoenix",
    "phoenix_annotations",
    "source",
    "spans",
]

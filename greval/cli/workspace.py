"""The quick start's files: the bundled example copied into the user's workspace, and its label files. Only
``greval quickstart`` uses them (they were the tail of greval/workflows.py)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path
from typing import Any

from greval.paths import examples_dir

EXAMPLE = "begin"
SPEC = "attribution"
FILES = ("records.jsonl", "human_labels.csv", "attribution.yaml", "NOTICE", "LICENSE")


def write_workspace(directory: Path) -> list[str]:
    """Copy the bundled example into ``directory`` (existing files are left alone: they may be edited)."""
    directory.mkdir(parents=True, exist_ok=True)
    src = examples_dir() / EXAMPLE
    written = []
    for name in FILES:
        target = directory / name
        if not target.exists():
            shutil.copyfile(src / name, target)
            written.append(name)
    return written


#: With Argilla, how many of the example's records arrive with their human labels; the others are the user's.
IMPORTED = 20

#: Predefined metrics that fit a typical RAG file (question, answer, chunks); the first is reviewed in Argilla.
OWN_SPECS = ("answer_quality", "chunk_evaluation")


def first_records(rows: list[dict[str, Any]], n: int | None) -> list[dict[str, Any]]:
    """The rows of the first ``n`` distinct record ids, in file order (all rows when ``n`` is None)."""
    if n is None:
        return rows
    keep = list(dict.fromkeys(str(r["record_id"]) for r in rows))[:n]
    return [r for r in rows if str(r["record_id"]) in keep]


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]) if rows else ["record_id", "label", "annotator"])
        writer.writeheader()
        writer.writerows(rows)


__all__ = ["EXAMPLE", "FILES", "IMPORTED", "OWN_SPECS", "SPEC", "first_records", "write_csv", "write_workspace"]

"""Text the optimizer reads: a record as the judge read it, the spec as YAML, a confusion table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from greval.agreement.models import AgreementScale
from greval.align.consensus import human_answer
from greval.align.models import Answer, Unit
from greval.judge.prompt import render_inputs
from greval.spec import Spec

RECORD_CHARS = 1500
"""A record shown to the optimizer is cut to this many characters."""


def record_text(spec: Spec, data: Mapping[str, Any], item_id: str = "", limit: int | None = RECORD_CHARS) -> str:
    """The record's inputs under the judge's headings (one item of a per-item metric), cut to ``limit``."""

    text = render_inputs(spec, data, None, [item_id] if spec.each and item_id else None)
    if limit is not None and len(text) > limit:
        return text[:limit] + " …"
    return text


def spec_yaml(spec: Spec) -> str:
    """The spec's content as YAML for the optimizer (few-shot examples counted, not shown)."""
    data = spec.canonical()
    examples = data.pop("examples", [])
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(data, Dumper=dumper, sort_keys=False, allow_unicode=True, width=110)
    if examples:
        text += f"# ... and {len(examples)} few-shot example(s), not shown\n"
    return text


def confusion_text(units: Sequence[Unit], answers: Mapping[str, Answer], scale: AgreementScale) -> str:
    """People's answers (rows) against the judge's (columns) on these units, as a small text table."""

    def judged(u: Unit) -> str:
        a = answers.get(u.key)
        if a is None or not a.ok:
            return "no valid answer"
        return a.label if a.label is not None else str(round(a.value or 0))

    rows = sorted({human_answer(u, scale) for u in units})
    cols = sorted({judged(u) for u in units})
    lines = ["people \\ judge | " + " | ".join(cols)]
    for r in rows:
        cells = [str(sum(1 for u in units if human_answer(u, scale) == r and judged(u) == c)) for c in cols]
        lines.append(f"{r} | " + " | ".join(cells))
    agree = sum(1 for u in units if human_answer(u, scale) == judged(u))
    lines.append(f"({agree} of {len(units)} agree)")
    return "\n".join(lines)


__all__ = ["RECORD_CHARS", "confusion_text", "record_text", "spec_yaml"]

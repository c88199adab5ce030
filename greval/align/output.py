"""What ``greval align`` writes: the adopted spec as readable YAML (its lineage and evidence in a comment block),
the evidence as JSON beside it, and the diff against the old spec."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import yaml

from greval.align.decide import fmt_gain, fmt_gain_ci
from greval.align.models import REPORT_NAME, AlignResult
from greval.align.page import render_page
from greval.paths import write_private
from greval.quality.draft import render_spec_yaml
from greval.report.format import fmt_ci, fmt_number
from greval.spec import Spec, parse_spec

_DEFAULTS: dict[str, Any] = {
    "depends_on": [],
    "outputs": {},
    "examples": [],
    "target": "record",
    "judge": {"samples": 1},
}


def spec_data(spec: Spec) -> dict[str, Any]:
    """The spec as the data a person writes: no nulls, no defaults, the kind left implicit."""
    data = spec.model_dump(mode="json", exclude_none=True)
    data.pop("kind", None)
    for key, empty in _DEFAULTS.items():
        if data.get(key) == empty:
            data.pop(key)
    if data["scale"].get("ordered") is False:
        data["scale"].pop("ordered")
    return data


def spec_yaml(spec: Spec, note: str = "") -> str:
    """Readable YAML that loads back as exactly this version (checked)."""

    text = render_spec_yaml(spec_data(spec), note=note)
    again = parse_spec(yaml.safe_load(text), "align output")
    if again.hash != spec.hash:  # pragma: no cover - a bug in the rendering, never the user's
        raise AssertionError(f"the written YAML loads as version {again.hash}, not {spec.hash}")
    return text


def diff_text(old: Spec, new: Spec) -> str:
    """The unified diff of the two versions' YAML."""
    a, b = spec_yaml(old).splitlines(keepends=True), spec_yaml(new).splitlines(keepends=True)
    return "".join(difflib.unified_diff(a, b, f"{old.name}@{old.hash}", f"{new.name}@{new.hash}"))


def lineage(result: AlignResult, evidence: str) -> str:
    """The comment block of the adopted spec: where it came from and why it was adopted."""
    d = result.decision.difference
    name = REPORT_NAME[result.objective]
    lines = [
        f"greval align: {result.spec}@{result.old_hash} -> {result.spec}@{result.new_hash} "
        f"({result.best.description}), judge {result.judge}, optimizer {result.optimizer}, seed {result.split.seed}",
        f"searched: {len(result.candidates)} candidates, {len(result.split.fold_units)}-fold cross-validation on "
        f"{result.split.units_search} labelled units of {result.split.records_search} records",
    ]
    if d is not None:
        lines.append(
            f"adopted on {d.n_units} test units of {d.n_records} records no search step read: {name} "
            f"{fmt_number(d.old)} -> {fmt_number(d.new)}, gain {fmt_gain(d.gain)}, {d.level:.0%} CI "
            f"{fmt_gain_ci(d)} ({d.resamples} paired resamples of {d.unit})"
        )
    c = result.decision.ceiling
    if c is not None:
        lines.append(
            f"people's own agreement ({c.metric}, every item two of them labelled, n = {c.n}): "
            f"{fmt_number(c.value)} {fmt_ci(c)}".rstrip()
        )
    lines.append(f"evidence: {evidence}")
    return "\n".join(lines)


def write_outputs(result: AlignResult, out: Path, html: Path | None) -> dict[str, str]:
    """The evidence JSON (always), the adopted spec's YAML (only when adopted) and the HTML page; their paths."""

    files: dict[str, str] = {}
    evidence = out.with_name(out.name.removesuffix(".yaml").removesuffix(".yml") + ".evidence.json")
    if result.adopted and result.new_spec is not None:
        write_private(out, spec_yaml(result.new_spec, lineage(result, evidence.name)))
        files["spec"] = str(out)
    files["evidence"] = str(evidence)
    if html is not None:
        files["html"] = str(html)
    done = result.model_copy(update={"files": files})
    write_private(evidence, done.model_dump_json(indent=2))
    if html is not None:
        write_private(html, render_page(done))
    return files


__all__ = ["diff_text", "lineage", "spec_data", "spec_yaml", "write_outputs"]

"""The one table from an option field (as stages name it in messages, greval.errors.option) to the
command-line flag that sets it. Only cli/ knows flags: a stage's error says `pair_by`, the terminal says
--pair-by."""

from __future__ import annotations

from greval.errors import render_options

#: field (bare, or qualified as `Model.field` where one name means two flags) → flag.
FLAGS: dict[str, str] = {
    # agreement/ (greval agreement, gate, review status): the options' models, frame columns, parameters
    "AgreementOptions.invalid": "--invalid",
    "AgreementOptions.mapping": "--map",
    "AgreementOptions.missing_values": "--missing-values",
    "AgreementOptions.pos_label": "--pos-label",
    "AgreementOptions.protocol": "--protocol",
    "AgreementOptions.select_on": "--select-on",
    "AgreementScale.kind": "--kind",
    "AgreementScale.labels": "--labels",
    "datasets": "--dataset",
    "group": "--group",
    "annotator": "--annotator",
    "human": "--human",
    "item": "--item",
    "judge": "--judge",
    "pair_by": "--pair-by",
    "score": "--score",
    "target": "--target",
    "vs_ceiling": "--vs-ceiling",
    # greval.dataset.limits.ReadLimits (cli.common.read_limit_options)
    "max_columns": "--max-columns",
    "max_line_bytes": "--max-line-size",
    "max_decompressed_bytes": "--max-decompressed",
    # greval gate (greval.gate.GateRequest)
    "baseline": "--baseline",
    "max_drop": "--max-drop",
    "systems": "--system",
    # greval.runner (RunOptions and its Sample)
    "engine": "--engine",
    "Sample.records": "--sample",
    "Sample.items": "--sample-items",
}


def for_terminal(message: str) -> str:
    """A stage's message with its option fields written as the flags a terminal user types."""
    return render_options(message, FLAGS)

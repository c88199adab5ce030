"""The one table from an option field (as stages name it in messages, greval.errors.option) to the
command-line flag that sets it. Only cli/ knows flags: a stage's error says `pair_by`, the terminal says
--pair-by."""

from __future__ import annotations

import shlex

from greval.errors import Remedy, render_options

#: field (bare, or qualified as `Model.field` where one name means two flags) → flag. A field is the name a
#: stage's options model or function gives the option; tests/test_errors.py checks every flag here exists.
FLAGS: dict[str, str] = {
    # runs (greval run, serve, spec try): the judge, the data, the sample
    "judge": "--judge",
    "base_url": "--base-url",
    "max_tokens": "--max-tokens",
    "method": "--method",
    "samples": "--samples",
    "temperature": "--temperature",
    "logprobs": "--logprobs",
    "seed": "--seed",
    "mapping": "--map",
    "engine": "--engine",
    "workers": "--workers",
    "retry_errors": "--retry-errors",
    "promote": "--promote",
    "Sample.records": "--sample",
    "Sample.items": "--sample-items",
    "spec": "--spec",
    "store": "--store",
    "id_column": "--id-column",
    # report
    "compare": "--compare",
    # align
    "folds": "--folds",
    "reuse_test": "--reuse-test",
    # agreement/ (greval agreement, gate, review status): the options' models, frame columns, parameters
    "AgreementOptions.invalid": "--invalid",
    "AgreementOptions.invalid_pairs": "--invalid-pairs",
    "AgreementOptions.mapping": "--relabel",
    "AgreementOptions.missing_values": "--missing-values",
    "AgreementOptions.pos_label": "--pos-label",
    "AgreementOptions.protocol": "--protocol",
    "AgreementOptions.select_on": "--select-on",
    "AgreementScale.kind": "--kind",
    "AgreementScale.labels": "--labels",
    "missing_values": "--missing-values",
    "datasets": "--dataset",
    "group": "--group",
    "annotator": "--annotator",
    "gold": "--gold",
    "human": "--human",
    "item": "--item",
    "pair_by": "--pair-by",
    "score": "--score",
    "vs_ceiling": "--vs-ceiling",
    # greval.dataset.limits.ReadLimits (cli.common.read_limit_options)
    "max_columns": "--max-columns",
    "max_line_bytes": "--max-line-size",
    "max_decompressed_bytes": "--max-decompressed",
    # annotation: Argilla, push / review, import-labels, the embedded server
    "api_url": "--api-url",
    "api_key": "--api-key",
    "workspace": "--workspace",
    "dataset": "--dataset",
    "annotators_per_record": "--annotators-per-record",
    "force": "--force",
    "strategy": "--select",
    "select.n": "--n",
    "control_share": "--control-share",
    "batch": "--batch",
    "blind": "--blind",
    "target": "--target",
    "record_id_col": "--record-id",
    "label_col": "--label",
    "item_id_col": "--item-id",
    "annotator_col": "--annotator",
    "annotator_name": "--annotator-name",
    "comment_col": "--comment",
    "data_dir": "--data-dir",
    "port": "--port",
    # quality: spec try, reliability
    "human_column": "--human-column",
    "human_id_column": "--human-id-column",
    "panel": "--panel",
    # serve
    "host": "--host",
    "max_body": "--max-body",
    "max_records": "--max-records",
    "body_timeout": "--body-timeout",
    "header_timeout": "--header-timeout",
    "max_connections": "--max-connections",
    # greval gate (greval.gate.gate.GateRequest)
    "baseline": "--baseline",
    "max_drop": "--max-drop",
    "systems": "--system",
}


def for_terminal(message: str) -> str:
    """A stage's message with its option fields written as the flags a terminal user types."""
    return render_options(message, FLAGS)


def remedy_text(remedy: Remedy) -> str:
    """A stage's remedy as the command a terminal user types: "run `greval store migrate --store URL` once"."""
    words = ["greval", remedy.command]
    for name, value in remedy.options.items():
        words.append(FLAGS.get(name, f"`{name}`"))
        if value:
            words.append(value if value.isupper() else shlex.quote(value))  # a placeholder (URL, NAME) as it is
    return f"run `{' '.join(words)}`" + (f" {remedy.why}" if remedy.why else "")


def error_text(error: str | Exception) -> str:
    """A user error for the terminal: its option fields as flags, and its remedy (a UserError's, or any error's
    ``remedy`` attribute), if any, as a command line."""
    text = for_terminal(str(error))
    remedy = getattr(error, "remedy", None)
    return f"{text}; {remedy_text(remedy)}" if isinstance(remedy, Remedy) else text

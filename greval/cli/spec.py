"""``greval spec``: list, show, validate, schema (here) and lint, new, try (below the table)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.markup import escape

from greval.cli.bundle import gathered
from greval.cli.bundles import DataFlags
from greval.cli.common import (
    console,
    judge_options,
    notice,
    out,
    print_error,
    print_run_event,
    print_table,
    read_limit_options,
    store_option,
)
from greval.spec import DEFAULT_SCHEMA_REF

if TYPE_CHECKING:
    from greval.llm.config import JudgeChoice
    from greval.quality.draft import DraftRequest
    from greval.quality.lint import Finding
    from greval.spec import BaseSpec, Spec
from greval.cli.flags import FLAGS
from greval.cli.lazy import Lazy, LazyGroup
from greval.errors import UserError
from greval.paths import write_private

SPEC_COMMANDS: dict[str, Lazy] = {
    "lint": Lazy(
        "greval.cli.spec:spec_lint",
        "Lint spec files for what makes judges unreliable; print FILE: FIELD: [rule] message.",
    ),
    "list": Lazy("greval.cli.spec:spec_list", "List the predefined metric specs shipped with greval."),
    "promote": Lazy(
        "greval.cli.versions:spec_promote",
        "Make a stored version of a metric its production version: what readers read by default.",
    ),
    "versions": Lazy(
        "greval.cli.versions:spec_versions",
        "List a metric's stored versions: production, experiments, verdicts, runs.",
    ),
    "new": Lazy(
        "greval.cli.spec:spec_new",
        "Draft a new metric spec with the judge model: evaluation steps and scale descriptions.",
    ),
    "schema": Lazy(
        "greval.cli.spec:spec_schema",
        "Write the JSON Schema of spec files, for editor validation and autocompletion.",
    ),
    "show": Lazy(
        "greval.cli.spec:spec_show",
        "Print a spec (file or predefined name) with its hash, and the prompt the judge receives.",
    ),
    "try": Lazy(
        "greval.cli.spec:spec_try",
        "Judge a few human-labelled records with a draft spec and print judge–human agreement.",
    ),
    "validate": Lazy(
        "greval.cli.spec:spec_validate",
        "Validate spec files; print each spec's name and hash, or the first error as FILE: FIELD: PROBLEM.",
    ),
}


# ----------------------------------------------------------------------------------------------- spec
@click.group("spec", cls=LazyGroup, lazy=SPEC_COMMANDS)
def spec() -> None:
    """Inspect, validate and document metric specs."""


@click.command("list")
def spec_list() -> None:
    """List the predefined metric specs shipped with greval."""
    from rich.table import Table

    from greval.spec import CategoricalScale, Spec, bundled_specs, load_spec_file

    table = Table(title="Predefined metric specs", show_lines=False)
    for col in ("name", "kind", "target", "scale", "inputs", "hash"):
        table.add_column(col, no_wrap=col in ("name", "hash"))
    for name, path in bundled_specs().items():
        s = next(x for x in load_spec_file(path) if x.name == name)
        scale = inputs = ""
        if isinstance(s, Spec):
            sc = s.scale
            scale = ", ".join(sc.names) if isinstance(sc, CategoricalScale) else f"{sc.min}–{sc.max}"
            inputs = ", ".join(s.inputs)
        else:
            inputs = ", ".join(s.required_inputs())
        table.add_row(name, s.kind, s.each or "record", scale, inputs, s.hash)
    print_table(table)


@click.command("show")
@click.argument("ref")
def spec_show(ref: str) -> None:
    """Print a spec (file or predefined name) with its hash, and the prompt the judge receives."""
    import yaml

    from greval.judge.prompt import system_prompt
    from greval.spec import Spec, resolve_specs
    from greval.spec.verdict import verdict_models

    for s in resolve_specs([ref], with_dependencies=False):
        if not isinstance(s, Spec):
            out.print(f"[bold]{s.name}[/]  hash {s.hash}  kind {s.kind}")
            out.print(yaml.safe_dump(s.canonical(), sort_keys=False, allow_unicode=True), highlight=False)
            continue
        answer, _ = verdict_models(s)
        out.print(f"[bold]{s.name}[/]  hash {s.hash}  target {s.each or 'record'}")
        out.print(system_prompt(s, "json_schema", answer.model_json_schema()), highlight=False)


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path())
def spec_validate(files: Sequence[str]) -> None:
    """Validate spec files; print each spec's name and hash, or the first error as FILE: FIELD: PROBLEM."""
    from greval.spec import Spec, load_spec_file
    from greval.spec.verdict import check_judge

    failed = False
    for f in files:
        try:
            for s in load_spec_file(f):
                if isinstance(s, Spec):
                    check_judge(s)  # what building its judge checks: verdict schema, outputs, few-shot examples
                out.print(f"[green]ok[/] {f}: {s.name} ({s.hash})", highlight=False)
        except UserError as exc:
            print_error(str(exc))
            failed = True
    if failed:
        sys.exit(2)


@click.command("schema")
@click.option("-o", "--output", type=click.Path(), help="Write to a file instead of stdout.")
def spec_schema(output: str | None) -> None:
    """Write the JSON Schema of spec files, for editor validation and autocompletion.

    \b
    VS Code (YAML extension): add to the top of a spec file
      # yaml-language-server: $schema=./greval-spec.schema.json
    """
    from greval.spec import spec_json_schema

    text = json.dumps(spec_json_schema(), indent=2, ensure_ascii=False)
    if output:
        write_private(Path(output), text + "\n")
        console.print(f"wrote {output}")
    else:
        click.echo(text)


# ------------------------------------------------------------------------------- lint, new, try
def _print_findings(findings: Iterable[Finding], console: Any) -> None:

    for f in findings:
        colour = "red" if f.severity == "error" else "yellow"
        console.print(f"[{colour}]{escape(f.line())}[/]", highlight=False, soft_wrap=True)


@click.command("lint")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--strict", is_flag=True, help="Exit 1 on warnings too.")
def spec_lint(files: Sequence[str], strict: bool) -> None:
    """Lint spec files for what makes judges unreliable; print FILE: FIELD: [rule] message.

    \b
    Errors (exit 1): overlapping / gappy / outside ranges, undescribed or duplicate labels, labels that
    share a description, schema errors. Warnings: inputs referenced but not declared (or declared and
    never mentioned), steps that never mention the scale, very long steps, near-empty descriptions.
    """
    from greval.quality.lint import lint_file

    findings: list[Finding] = []
    for f in files:
        findings.extend(lint_file(f))
    _print_findings(findings, out)
    errors = sum(1 for f in findings if f.severity == "error")
    warnings = len(findings) - errors
    colour = "red" if errors else ("yellow" if warnings else "green")
    console.print(f"[{colour}]{len(files)} file(s): {errors} error(s), {warnings} warning(s)[/]", highlight=False)
    if errors or (strict and warnings):
        raise SystemExit(1)


@click.command("new")
@click.argument("name")
@click.option("--description", "-d", required=True, help="What the metric measures, in a sentence or two.")
@click.option(
    "--kind",
    type=click.Choice(["value", "categorical"]),
    default=None,
    help="[categorical with --labels, else value]",
)
@click.option(
    "--target", type=click.Choice(["record", "chunks", "triples", "turns"]), default="record", show_default=True
)
@click.option("--labels", default=None, help="Comma-separated labels, best first (categorical).")
@click.option("--min", "vmin", type=int, default=1, show_default=True, help="Lowest value (value scales).")
@click.option("--max", "vmax", type=int, default=5, show_default=True, help="Highest value (value scales).")
@click.option("--inputs", default=None, help="Comma-separated input fields [question,answer; or question,chunks …].")
@click.option("-o", "--output", type=click.Path(), default=None, help="Spec file to write [NAME.yaml].")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--schema-ref", default=DEFAULT_SCHEMA_REF, show_default=True, help="$schema path in the header.")
@judge_options
def spec_new(
    name: str,
    description: str,
    kind: str | None,
    target: str,
    labels: str | None,
    vmin: int,
    vmax: int,
    inputs: str | None,
    output: str | None,
    force: bool,
    schema_ref: str,
    judge: JudgeChoice,
) -> None:
    """Draft a new metric spec with the judge model: evaluation steps and scale descriptions.

    \b
    The file is written only if it validates, compiles and has no lint errors; edit it, then
    `greval spec lint` and `greval spec try` it on a few labelled records.
    \b
      greval spec new faithfulness -d "Is every claim of the answer supported by the chunks?" \\
          --labels "Faithful,Partly faithful,Unfaithful" --inputs question,answer,chunks
      greval spec new chunk_relevance -d "How useful each chunk is" --target chunks --min 1 --max 3
    """
    from greval.llm.config import default_judge
    from greval.llm.local import judge_session
    from greval.quality.draft import DRAFT_MAX_TOKENS, check_written, draft_spec, render_spec_yaml

    req = _draft_request(name, description, kind, target, labels, (vmin, vmax), inputs)
    path = Path(output or f"{name}.yaml")
    if path.exists() and not force:
        raise UserError(f"{path} exists; pass --force to overwrite it or -o for another file")
    from greval.llm.config import make_chat_model

    ref = judge.ref or default_judge(notice)
    # A whole spec is a longer answer than a verdict: draft with a budget that fits one (a judge's
    # default cap, e.g. the local judge's, cut drafts off mid-JSON). One sample: a draft is not a vote.
    params = {**judge.params(), "max_tokens": judge.max_tokens or DRAFT_MAX_TOKENS, "samples": None}
    with judge_session(ref, console.print, **params) as cfg:
        console.print(f"drafting [bold]{name}[/] with {cfg.label} …", highlight=False)
        outcome = draft_spec(req, make_chat_model(cfg))
    note = f"Drafted by `greval spec new` with {cfg.label}. Review every step and description before use."
    text = render_spec_yaml(outcome.data, schema_ref, note)
    spec = check_written(text, str(path))
    write_private(path, text)
    for n in outcome.notes:
        console.print(f"[yellow]note:[/] {n}", highlight=False)
    _print_findings(outcome.findings, console)
    console.print(
        f"[green]wrote[/] {path}: {spec.name} ({spec.hash}), {len(spec.steps)} steps, {outcome.requests} request(s)",
        highlight=False,
    )


def _draft_request(
    name: str,
    description: str,
    kind: str | None,
    target: str,
    labels: str | None,
    value_range: tuple[int, int],
    inputs: str | None,
) -> DraftRequest:
    """What `spec new` asks the judge to draft, from its flags (a flag that makes no sense: one line)."""
    import re
    from typing import cast

    from pydantic import ValidationError

    from greval.quality.draft import DraftRequest

    vmin, vmax = value_range
    label_list = [x.strip() for x in labels.split(",") if x.strip()] if labels else []
    chosen = kind or ("categorical" if label_list else "value")
    if chosen == "value" and label_list:
        raise UserError("--labels is for --kind categorical")
    if chosen == "categorical" and len(label_list) == 1:
        raise UserError("--labels: give at least two labels, e.g. --labels yes,no")
    if len(set(label_list)) != len(label_list):
        raise UserError("--labels: a label is listed twice")
    if chosen == "value" and vmin >= vmax:
        raise UserError(f"--min ({vmin}) must be below --max ({vmax})")
    input_list = [x.strip() for x in inputs.split(",") if x.strip()] if inputs else []
    try:
        req = DraftRequest(
            name=name,
            description=description,
            kind=cast(Any, chosen),
            target=cast(Any, target),
            labels=label_list,
            min=vmin,
            max=vmax,
            inputs=input_list,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        raise UserError(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    bad = [n for n in req.effective_inputs() if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", n)]
    if bad:
        raise UserError(f"--inputs: {bad[0]!r} is not an identifier")
    return req


@click.command("try")
@click.argument("spec_file", type=click.Path())
@click.option("--data", "data", required=True, type=click.Path(), help="Records with human labels.")
@click.option("--human-column", required=True, help="Column with the human label / value (dotted path ok).")
@click.option(
    "--human-file", type=click.Path(), default=None, help="Human answers in their own table, joined on record id."
)
@click.option("--human-id-column", default=None, help="Record-id column of --human-file [record_id, else id].")
@click.option("--annotator-column", default=None, help="Annotator column of --human-file (several per record).")
@click.option("--name", "spec_name", default=None, help="Which spec of a multi-spec file [the last].")
@click.option("--limit", type=int, default=20, show_default=True, help="Judge only the first N records.")
@store_option(default=None, env=False, help="Keep verdicts here [a temporary store].")
@click.option("--map", "maps", multiple=True, metavar="FIELD=COLUMN", help="As in `greval run`.")
@click.option("--id-column", default=None, help="Column holding record ids.")
@click.option("--bootstrap", type=int, default=200, show_default=True, help="Resamples for CIs (0: none).")
@click.option("--json", "json_out", type=click.Path(), default=None, help="Write the full agreement report.")
@judge_options
@read_limit_options
@gathered("data", DataFlags)
def spec_try(
    spec_file: str,
    human_column: str,
    human_file: str | None,
    human_id_column: str | None,
    annotator_column: str | None,
    spec_name: str | None,
    store: str | None,
    bootstrap: int,
    json_out: str | None,
    judge: JudgeChoice,
    data: DataFlags,
) -> None:
    """Judge a few human-labelled records with a draft spec and print judge–human agreement.

    \b
      greval spec try my_metric.yaml --data labelled.csv --human-column label --limit 30

    For chunk / triple metrics the human column holds one label per item: a list in item order or a
    mapping {item_id: label}.
    """
    from greval.flows.trial import TrialRequest, print_try, try_spec

    specs, target = _load_target(spec_file, spec_name)
    request = TrialRequest(
        data_file=data.data,
        human_column=human_column,
        human_file=human_file,
        human_id_column=human_id_column,
        annotator_column=annotator_column,
        mapping=data.mapping(),
        id_column=data.id_column,
        limit=data.limit,
        limits=data.limits,
        store=store,
        bootstrap=bootstrap,
    )
    done = try_spec(specs, target, request, judge, print_run_event)
    print_try(out, target, done.report, done.frame, done.summary, FLAGS)
    if json_out:
        write_private(Path(json_out), done.report.model_dump_json(indent=2))
        console.print(f"wrote {json_out}")


def _load_target(spec_file: str, name: str | None) -> tuple[list[BaseSpec], Spec]:
    from greval.spec import Spec, load_spec_file, resolve_specs

    loaded = load_spec_file(spec_file)
    if name is None:
        chosen = loaded[-1]
    else:
        match = [s for s in loaded if s.name == name]
        if not match:
            raise UserError(f"{spec_file}: no spec named {name!r}; it holds {', '.join(s.name for s in loaded)}")
        chosen = match[0]
    if not isinstance(chosen, Spec):
        raise UserError(f"{spec_file}: {chosen.name} is a {chosen.kind} metric; `spec try` needs a judge spec")
    specs = resolve_specs([spec_file])
    return specs, chosen

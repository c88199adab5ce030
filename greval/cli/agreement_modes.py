"""The modes of `greval agreement`, picked from its flag bundles (greval.cli.agreement) by :func:`run`:

- **store**: stored verdicts against stored human labels, per metric (``--spec`` repeated: versions compared);
- **pair-by**: the judge against itself, two runs per item named by a column (no people);
- **file**: a judge column against a human column (several ``--judge`` columns, or ``--version`` values,
  compared side by side);
- **batch**: several FILEs, or ``--judge`` / ``--human`` given in pairs — one :class:`Table` per file and pair,
  each reported as a single call would (pair-by or file), in one process, and one JSON (:class:`AgreementBatch`).

Each mode builds a :class:`Job` (its agreement frames); :func:`report` computes one report, or a comparison of
several, and prints it; the caller writes the JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import click
from rich.console import Console
from rich.markup import escape

from greval.agreement.agreement import MISSING_SLICE, compute_agreement
from greval.agreement.comparison import compare_agreement
from greval.agreement.consistency import compute_consistency
from greval.agreement.models import (
    AgreementBatch,
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    BatchTable,
    ComparisonReport,
    ConsistencyReport,
    GoldChoice,
)
from greval.agreement.prepare import CONFIDENCE_COLUMN, is_null
from greval.agreement.tables import read_columns, select, to_agreement_frame
from greval.cli.agreement import Columns, ComputeFlags, Outputs, ScaleFlags, Source
from greval.cli.flags import FLAGS
from greval.dataset.frame import Frame
from greval.dataset.limits import ReadLimits
from greval.errors import UserError
from greval.paths import write_private
from greval.report.agreement import render_consistency_markdown, render_html, render_markdown
from greval.report.format import with_names
from greval.report.terminal import print_comparison, print_consistency, print_report


@dataclass(frozen=True)
class Job:
    """What a mode hands to :func:`report`: its frames (one, or several to compare, by name), their scale and
    options; how the HTML page of a single frame is titled, whether its name heads the printed report, and the
    error when --html/--markdown meet several frames."""

    frames: dict[str, Frame]
    scale: AgreementScale
    options: AgreementOptions
    page_title: Callable[[str], str]
    named: bool
    several: str
    gold: GoldChoice | None = None
    judged: Mapping[str, Any] = field(default_factory=dict)  # store mode: name -> from_store.judged_frame


Result = AgreementReport | ComparisonReport | ConsistencyReport


@dataclass(frozen=True)
class Table:
    """One table of FILE mode: a file and the columns compared in it (a batch has several)."""

    file: Path
    columns: Columns

    def title(self) -> str:
        c = self.columns
        judge = ", ".join(c.judges) or c.score or ""
        return f"{self.file}: {judge} by {c.pair_by}" if c.pair_by else f"{self.file}: {judge} vs {c.human}"


def run(
    console: Console,
    source: Source,
    columns: Columns,
    scale: ScaleFlags,
    compute: ComputeFlags,
    outputs: Outputs,
    limits: ReadLimits,
) -> None:
    """Pick the mode from the flags and run it (``limits``: how much of each FILE may be read)."""
    if source.store is not None:
        if source.files:
            raise UserError("give FILE or --store, not both")
        compute.mapping()  # a bad --relabel (or the retired --map) is refused first
        _write_json(console, outputs, report(console, store_job(console, source, columns, compute), outputs))
        return
    if source.datasets:
        raise UserError("--dataset selects human labels in a store: use it with --store")
    if not source.files or not (columns.judges or columns.score) or (not columns.humans and not columns.pair_by):
        raise UserError("give FILE with --judge COL (or --score COL) and --human COL, or --store S --spec NAME")
    todo = tables(source.files, columns)
    agreement_scale, options = scale.scale(), compute.options(list(columns.slices))
    gold = compute.gold_choice()
    if len(todo) == 1:
        raw = read_columns(todo[0].file, limits=limits)
        _write_json(console, outputs, table_report(console, todo[0], raw, agreement_scale, options, outputs, gold))
        return
    if outputs.html_out is not None or outputs.md_out is not None:
        raise UserError("--html/--markdown write one table's report; a batch (several FILEs or --human) writes --json")
    batch(console, todo, (agreement_scale, options, limits), outputs, gold)


def tables(files: tuple[Path, ...], columns: Columns) -> list[Table]:
    """Each FILE with each --judge / --human pair (one --human: all the --judge columns against it, compared)."""
    pairs_of = [columns]
    if len(columns.humans) > 1:
        if len(columns.judges) != len(columns.humans):
            raise UserError(
                f"--human given {len(columns.humans)} times and --judge {len(columns.judges)}: a batch pairs the "
                "i-th --judge with the i-th --human (give --human once to compare --judge columns side by side)"
            )
        if columns.score:
            raise UserError("--score goes with one --judge and one --human, not a batch of --judge / --human pairs")
        given = zip(columns.judges, columns.humans, strict=True)
        pairs_of = [replace(columns, judges=(j,), humans=(h,)) for j, h in given]
    return [Table(f, c) for f in files for c in pairs_of]


def table_report(
    console: Console,
    table: Table,
    raw: Frame,
    scale: AgreementScale,
    options: AgreementOptions,
    outputs: Outputs,
    gold: GoldChoice | None = None,
) -> Result:
    """One table read from its file (``raw``): printed, its HTML / Markdown written; the result for the JSON."""
    columns = table.columns
    if columns.pair_by is not None:
        if gold is not None:
            raise UserError("--gold compares the judge with people; --pair-by compares the judge with itself")
        return pairs(console, raw, columns, scale, options, outputs)
    who = columns.judges[0] if columns.judges else columns.score
    title = f"{table.file.name}: {who} vs {columns.human}"
    frames = file_frames(raw, columns, options)
    job = Job(frames, scale, options, lambda _: title, False, "--html/--markdown work with one judge version", gold)
    return report(console, job, outputs)


def batch(
    console: Console,
    todo: list[Table],
    how: tuple[AgreementScale, AgreementOptions, ReadLimits],
    outputs: Outputs,
    gold: GoldChoice | None = None,
) -> None:
    """Every table in order, each file read once for its pairs. The reports are printed once all are computed:
    a mistake in any table is the one line printed (naming its file), and nothing is written."""
    scale, options, limits = how
    done: list[BatchTable] = []
    raw: tuple[Path, Frame] | None = None
    with console.capture() as printed:
        for table in todo:
            console.rule(escape(table.title()))
            try:
                if raw is None or raw[0] != table.file:
                    raw = (table.file, read_columns(table.file, limits=limits))
                result = table_report(console, table, raw[1], scale, options, outputs, gold)
            except UserError as exc:
                text = str(exc)
                raise UserError(text if text.startswith(f"{table.file}:") else f"{table.file}: {text}") from exc
            c = table.columns
            done.append(
                BatchTable(file=str(table.file), judge=list(c.judges), human=c.human, score=c.score, report=result)
            )
    click.echo(printed.get(), nl=False)
    _write_json(console, outputs, AgreementBatch(tables=done))


def store_job(console: Console, source: Source, columns: Columns, compute: ComputeFlags) -> Job:
    """Store mode: one agreement frame per ``--spec`` (NAME or NAME@HASH), keyed NAME@HASH; one scale."""
    from greval.agreement.from_store import judged_frame, store_frame
    from greval.store.store import Store

    if not source.spec_refs:
        raise UserError("--store needs --spec NAME (the metric whose verdicts people labelled)")
    assert source.store is not None
    frames: dict[str, Frame] = {}
    judged: dict[str, Any] = {}  # the frames THE prevalence is computed on: every verdict, not only labelled
    scale: AgreementScale | None = None
    level: Literal["item", "record"] = "record" if source.level == "record" else "item"
    with Store(source.store) as st:
        for ref in source.spec_refs:
            name, _, version = ref.partition("@")
            judge = columns.judges[0] if columns.judges else None
            frame, sc, sel = store_frame(st, name, judge, level, version or None, datasets=source.datasets)
            if scale is not None and sc != scale:
                raise UserError(f"{ref}: a different scale than {source.spec_refs[0]}; compare versions of one scale")
            scale = sc
            frames[f"{sel.spec}@{sel.spec_hash}"] = Frame.of(frame)
            if sc.kind == "categorical" and level == "item":
                judged[f"{sel.spec}@{sel.spec_hash}"] = judged_frame(st, frame, sel)
            which = "production" if sel.production else "not production"
            console.print(
                f"{escape(sel.spec)}@{sel.spec_hash} ({which}): human labels from dataset(s) "
                f"{escape(', '.join(sel.datasets))}" + ("" if source.datasets else " (all; choose with --dataset)"),
                highlight=False,
            )
    assert scale is not None
    auto = [c for c in ("system",) if all(c in f.columns and not all(map(is_null, f[c])) for f in frames.values())]
    options = compute.store_options(list(columns.slices) or auto)
    several = "--html/--markdown work with one --spec"
    return Job(
        frames, scale, options, lambda title: f"{title}: judge vs people", True, several, compute.gold_choice(), judged
    )


def pairs(
    console: Console,
    raw: Frame,
    columns: Columns,
    scale: AgreementScale,
    options: AgreementOptions,
    outputs: Outputs,
) -> ConsistencyReport:
    """Pair-by mode: one judge column, two runs per item, compared with each other (no humans)."""
    pair_by = columns.pair_by
    assert pair_by is not None
    if columns.human is not None:
        raise UserError(
            "--pair-by compares the judge's two runs with each other; drop --human (or use --version "
            f"{pair_by} to compare each run with people)"
        )
    if len(columns.judges) != 1 or columns.version is not None:
        raise UserError("--pair-by takes one --judge column (the runs are rows, named by the --pair-by column)")
    if columns.item is None:
        raise UserError("--pair-by needs --item: the id that pairs the two runs' rows")
    if outputs.html_out is not None:
        raise UserError("--pair-by writes --json and --markdown, not --html")
    frame = to_agreement_frame(raw, columns.judges[0], None, item=columns.item, group=columns.group)
    frame["run"] = select(raw, pair_by)
    result = compute_consistency(frame, scale, options, column=pair_by)
    shown = with_names(result, FLAGS)  # its notes name flags; the JSON keeps the option fields
    print_consistency(console, shown, outputs.decimals, names=FLAGS)
    if outputs.md_out is not None:
        _write(console, outputs.md_out, render_consistency_markdown(shown, outputs.decimals))
    return result


def file_frames(raw: Frame, columns: Columns, options: AgreementOptions) -> dict[str, Frame]:
    """File mode: one agreement frame per ``--judge`` column (or the ``--score`` column), or per value of the
    ``--version`` column; with the reason, comment and confidence columns the report shows."""
    if columns.annotator and not columns.item:
        click.echo("note: --annotator without --item: every row is its own item, so no human ceiling", err=True)
    judges = columns.judges
    if columns.score and len(judges) > 1:
        raise UserError("--score goes with one --judge (or none)")
    if columns.version is not None and len(judges) > 1:
        raise UserError("--version splits one --judge column; give --judge once")
    extra = [options.select_on.partition("=")[0]] if options.select_on else []
    confidence = columns.confidence or (CONFIDENCE_COLUMN if CONFIDENCE_COLUMN in raw.columns else None)
    frames: dict[str, Frame] = {}
    for j in judges or (None,):
        f = to_agreement_frame(
            raw,
            j,
            columns.human,
            item=columns.item,
            annotator=columns.annotator,
            group=columns.group,
            slices=columns.slices,
            extra=extra,
            score=columns.score,
        )
        for name, col in (("reason", columns.reason), ("comment", columns.comment), (CONFIDENCE_COLUMN, confidence)):
            if col:
                f[name] = select(raw, col)
        frames[j or columns.score or "score"] = f
    if columns.version is None:
        return frames
    (f,) = frames.values()
    versions = [MISSING_SLICE if is_null(v) else str(v) for v in select(raw, columns.version)]
    if len(set(versions)) == 1:
        raise UserError(f"--version {columns.version}: only one version in the file")
    return {v: f.where(x == v for x in versions) for v in sorted(set(versions))}


def report(console: Console, job: Job, outputs: Outputs) -> AgreementReport | ComparisonReport:
    """One frame: its report, printed and its HTML / Markdown written as asked. Several: their comparison, printed."""
    result: AgreementReport | ComparisonReport
    if len(job.frames) > 1:
        if outputs.html_out or outputs.md_out:
            raise UserError(job.several)
        if job.gold is not None:
            raise UserError("--gold compares one judge with people: give one --judge column (or one --spec)")
        result = compare_agreement(job.frames, job.scale, job.options)
        result.reports = {name: _judged(job, name, rep) for name, rep in result.reports.items()}
        print_comparison(console, with_names(result, FLAGS), outputs.decimals, names=FLAGS)
    else:
        ((name, frame),) = job.frames.items()
        result = _judged(job, name, compute_agreement(frame, job.scale, job.options, job.gold))
        shown = with_names(result, FLAGS)  # its notes name flags; the JSON keeps the option fields
        print_report(console, shown, outputs.decimals, name if job.named else "", names=FLAGS)
        if outputs.html_out is not None:
            _write(console, outputs.html_out, render_html(shown, frame, title=job.page_title(name)))
        if outputs.md_out is not None:
            _write(console, outputs.md_out, render_markdown(shown, outputs.decimals))
    return result


def _judged(job: Job, name: str, rep: AgreementReport) -> AgreementReport:
    """A store metric's report with THE prevalence of the metric (what its report pages show: the judge's shares
    over every verdict, greval.agreement.from_store); a file's report as it is."""
    if name not in job.judged:
        return rep
    from greval.agreement.from_store import judged_prevalence, with_judged_prevalence

    return with_judged_prevalence(rep, judged_prevalence(job.judged[name], job.scale, job.options))


def _write_json(console: Console, outputs: Outputs, result: Result | AgreementBatch) -> None:
    if outputs.json_out is not None:
        _write(console, outputs.json_out, result.model_dump_json(indent=2))


def _write(console: Console, path: Path, text: str) -> None:
    write_private(path, text)
    console.print(f"wrote {path}")

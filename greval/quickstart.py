"""``greval quickstart``: the whole loop on a bundled example, offline, in one idempotent command.

spec + dataset -> judge (the configured one, else the embedded local judge) -> store -> embedded Argilla
(verdicts as suggestions) -> the example's existing human labels -> agreement report. A second run reuses
everything: the store answers every judgement (no judge call, no judge server), the Argilla dataset and its
records keep their ids, the labels are upserted.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import click
from rich.panel import Panel

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


def register(main: click.Group) -> None:
    from greval.cli import judge_options

    @main.command("quickstart")
    @click.option(
        "--dir",
        "workdir",
        default="greval-quickstart",
        show_default=True,
        type=click.Path(),
        help="Workspace: the example data, the store and the report are written here.",
    )
    @judge_options
    @click.option("--port", type=int, default=6900, show_default=True, help="Port of the embedded Argilla.")
    @click.option("--no-argilla", is_flag=True, help="Skip the Argilla step (judge and report only).")
    @click.option(
        "--argilla-data",
        type=click.Path(),
        default=None,
        help="Data directory of the embedded Argilla [greval's data directory].",
    )
    @click.option("--bootstrap", type=int, default=1000, show_default=True, help="Bootstrap resamples for CIs.")
    def quickstart(
        workdir: str,
        judge_ref: str | None,
        base_url: str | None,
        temperature: float | None,
        max_tokens: int | None,
        timeout: float,
        samples: int | None,
        seed: int | None,
        port: int,
        no_argilla: bool,
        argilla_data: str | None,
        bootstrap: int,
    ) -> None:
        """Run greval's whole loop on a bundled example, offline, in one command.

        \b
        1. writes a workspace with 30 BEGIN dialogue turns (CC BY 4.0), their human attribution
           labels and a matching spec;
        2. judges them (your --judge, else OpenAI when OPENAI_API_KEY is set, else the embedded
           llama.cpp judge — a tiny model that only makes the loop run, not a judge to trust);
        3. starts the embedded Argilla and pushes the verdicts as suggestions;
        4. imports the example's human labels (into the store and into Argilla);
        5. writes the agreement report and prints where everything is.

        Running it again reuses everything: no new judge call, the same Argilla dataset.
        """
        _quickstart(
            Path(workdir),
            judge_ref,
            dict(
                base_url=base_url,
                temperature=temperature,
                max_tokens=max_tokens,
                timeout=timeout,
                samples=samples,
                seed=seed,
            ),
            port,
            no_argilla,
            bootstrap,
            argilla_data,
        )


def _quickstart(
    work: Path,
    judge_ref: str | None,
    params: dict[str, Any],
    port: int,
    no_argilla: bool,
    bootstrap: int,
    argilla_data: str | None = None,
) -> None:
    from greval._sync import run_sync
    from greval.agreement.from_store import store_frame
    from greval.agreement.models import AgreementOptions
    from greval.agreement.report import render_html, render_markdown
    from greval.cli import (
        _progress,
        console,
        default_judge,
        local_concurrency,
        out,
        print_summary,
        resolve_judge,
        serve_judge,
    )
    from greval.data import load_records
    from greval.runner import RunOptions, arun, pending_work
    from greval.spec import load_spec_file
    from greval.store import Store

    t0 = time.perf_counter()
    written = write_workspace(work)
    console.print(
        f"[bold]1/5[/] workspace {work}/" + (f" (wrote {', '.join(written)})" if written else " (reused)"),
        highlight=False,
    )
    specs = load_spec_file(work / "attribution.yaml")
    records = load_records(work / "records.jsonl")
    store_path = work / "greval.sqlite"
    cfg = resolve_judge(judge_ref or default_judge(), **{k: v for k, v in params.items() if v is not None})
    with Store(store_path) as st:
        todo, _ = pending_work(specs, records, st, cfg)
        console.print(
            f"[bold]2/5[/] judging {len(records)} records with {SPEC} — judge {cfg.label}: {todo} judgement(s) to make",
            highlight=False,
        )
        with serve_judge(cfg, needed=todo > 0) as live, _progress(False) as hook:
            summary = run_sync(
                arun(
                    specs,
                    records,
                    st,
                    live,
                    options=RunOptions(concurrency=local_concurrency() if live.provider in ("gguf", "local") else 8),
                    dataset=str(work / "records.jsonl"),
                    progress=hook,
                )
            )
        print_summary(summary)

        from greval.annotation import sync

        info = None
        conn = None
        if not no_argilla:
            from greval.annotation import server

            console.print("[bold]3/5[/] embedded Argilla: starting (first time: creating its environment) …")
            try:
                info = server.start(port, argilla_data)
            except server.AnnotationServerError as exc:
                from greval.errors import UserError

                raise UserError(str(exc)) from None
            conn = sync.connect(info.url, info.api_key, workspace=info.workspace)
            pushed = sync.push(st, conn, SPEC)
            console.print(
                f"      {pushed.pushed} verdicts pushed as suggestions to dataset '{pushed.dataset}' "
                f"({'created' if pushed.created else 'updated'}) at {info.url}",
                highlight=False,
            )
        else:
            console.print("[bold]3/5[/] Argilla skipped (--no-argilla)")
        imported = sync.import_labels(
            st,
            work / "human_labels.csv",
            SPEC,
            record_id_col="record_id",
            label_col="label",
            annotator_col="annotator",
            conn=conn,
        )
        console.print(
            f"[bold]4/5[/] human labels: {imported.stored} stored from human_labels.csv"
            + (f", {imported.to_argilla} as Argilla responses" if imported.to_argilla else ""),
            highlight=False,
        )

        from greval.agreement.compute import compute_agreement

        frame, scale, selection = store_frame(st, SPEC)
        options = AgreementOptions(bootstrap=bootstrap, seed=0, slices=["system"] if "system" in frame.columns else [])
        report = compute_agreement(frame, scale, options)
    title = f"{SPEC}: {selection.judge} vs BEGIN annotators"
    report_dir = work / "report"
    report_dir.mkdir(exist_ok=True)
    (report_dir / f"{SPEC}.html").write_text(render_html(report, frame, title=title), encoding="utf-8")
    (report_dir / f"{SPEC}.md").write_text(render_markdown(report), encoding="utf-8")
    (report_dir / f"{SPEC}.json").write_text(report.model_dump_json(indent=2), encoding="utf-8")
    console.print("[bold]5/5[/] agreement report written", highlight=False)
    from greval.agreement.cli import print_report

    print_report(out, report, 3, title)

    lines = []
    if info is not None:
        lines.append(f"Argilla      {info.url}   login: {info.username} / {info.password}")
    lines.append(f"Report       {(report_dir / f'{SPEC}.html').resolve()}")
    lines.append(f"Store        {store_path.resolve()}")
    lines.append("")
    lines.append("The same on your own data and judge:")
    lines.append(
        "  greval run my_data.jsonl -s answer_alignment -s chunk_evaluation --judge openai:gpt-4o-mini "
        "--store my.sqlite"
    )
    lines.append("  greval annotate push --store my.sqlite --spec answer_alignment")
    lines.append("  greval annotate pull --store my.sqlite --spec answer_alignment     # after people labelled")
    lines.append("  greval report --store my.sqlite --spec answer_alignment -o report/")
    lines.append("")
    lines.append(f"done in {time.perf_counter() - t0:.0f}s")
    out.print(Panel("\n".join(lines), title="greval quickstart", expand=False), highlight=False)

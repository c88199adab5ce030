"""``greval reliability``: position bias and model dependence of a judge (greval.quality.reliability)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import cast

import click

from greval.cli.bundle import gathered
from greval.cli.bundles import DataFlags
from greval.cli.common import console, judge_options, notice, out, read_limit_options, store_option
from greval.cli.flags import FLAGS
from greval.errors import UserError
from greval.llm.config import JudgeChoice, JudgeConfig, default_judge
from greval.llm.local import judge_session
from greval.paths import write_private
from greval.quality.reliability import (
    Order,
    Perturbation,
    ReliabilityOptions,
    parse_panel,
    print_report,
    reliability,
)
from greval.spec import BaseSpec, Spec
from greval.store.backend import display


def _resolve_target(ref: str) -> tuple[list[BaseSpec], Spec]:
    from greval.spec import load_spec_file, resolve_specs

    specs = resolve_specs([ref])
    p = Path(ref)
    is_file = p.suffix in (".yaml", ".yml", ".json") or p.exists()
    name = load_spec_file(p)[-1].name if is_file else ref
    target = next(s for s in specs if s.name == name)
    if not isinstance(target, Spec):
        raise UserError(f"{ref}: {target.name} is a {target.kind} metric; reliability needs a judge spec")
    return specs, target


@click.command("reliability")
@click.option("-s", "--spec", "spec_ref", required=True, help="Spec file or predefined metric name.")
@click.option("--data", "data", required=True, type=click.Path(), help="Records to sample from.")
@click.option("--sample", type=int, default=50, show_default=True, help="Records to re-judge (seeded sample).")
@click.option(
    "--sample-seed", "sample_seed", type=int, default=0, show_default=True, help="Seed of sample and shuffles."
)
@store_option(help="Verdicts are kept here.")
@click.option(
    "--perturb",
    type=click.Choice(["items", "scale"]),
    multiple=True,
    help="Which perturbations [items and scale].",
)
@click.option(
    "--order",
    type=click.Choice(["reverse", "shuffle"]),
    default="reverse",
    show_default=True,
    help="How items / labels are reordered.",
)
@click.option(
    "--panel",
    multiple=True,
    metavar="REF[@URL]",
    help="Another judge model for the panel (repeat); the --judge model is always a member.",
)
@click.option("--logprobs", is_flag=True, help="Also compute probability-weighted scores (value scales).")
@click.option("--top-logprobs", type=int, default=10, show_default=True)
@click.option("--map", "maps", multiple=True, metavar="FIELD=COLUMN", help="As in `greval run`.")
@click.option("--id-column", default=None)
@click.option("-c", "--concurrency", type=int, default=8, show_default=True)
@click.option("--json", "json_out", type=click.Path(), default=None, help="Write the report as JSON.")
@judge_options
@read_limit_options
@gathered("data", DataFlags)
def reliability_cmd(
    spec_ref: str,
    sample: int,
    sample_seed: int,
    store: str,
    perturb: Sequence[str],
    order: str,
    panel: Sequence[str],
    logprobs: bool,
    top_logprobs: int,
    concurrency: int,
    json_out: str | None,
    judge: JudgeChoice,
    data: DataFlags,
) -> None:
    """Position bias and model dependence of a judge: re-judge a sample with chunks / triples and labels
    reordered, report how often verdicts flip, and how well a panel of judge models agrees.

    \b
      greval reliability --spec answer_alignment --data rag.jsonl --sample 50 --judge openai:gpt-4o-mini
      greval reliability --spec chunk_evaluation --data rag.jsonl --order shuffle \\
          --panel openai:gpt-4o --panel openai:qwen2.5-7b@http://localhost:8000/v1
      greval reliability --spec my_1to5.yaml --data rag.jsonl --logprobs
    """
    from greval.dataset.records import load_records
    from greval.store.store import Store

    if sample < 1:
        raise UserError("--sample must be at least 1")
    specs, target = _resolve_target(spec_ref)
    records = load_records(data.data, data.mapping(), data.id_column, limits=data.limits)
    ref = judge.ref or target.judge.model or default_judge(notice)
    params = judge.with_defaults(target.judge).params()
    opts = ReliabilityOptions(
        sample=sample,
        seed=sample_seed,
        order=cast(Order, order),
        perturb=cast(list[Perturbation], list(perturb) or ["items", "scale"]),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        concurrency=concurrency,
    )
    with ExitStack() as stack:
        cfg = stack.enter_context(judge_session(ref, console.print, **params))
        members: list[JudgeConfig] = []
        if panel:
            members.append(cfg)
            for entry in panel:
                pref, url = parse_panel(entry)
                members.append(
                    stack.enter_context(
                        judge_session(pref, console.print, **{**params, "base_url": url or judge.base_url})
                    )
                )
        st = stack.enter_context(Store(store))
        console.print(
            f"reliability of [bold]{target.name}[/] with {cfg.label} on {min(sample, len(records))} of "
            f"{len(records)} records — store {display(store)}",
            highlight=False,
        )
        rep = reliability(specs, target, records, st, cfg, members, opts)
    print_report(out, rep, FLAGS)
    if json_out:
        write_private(Path(json_out), rep.model_dump_json(indent=2))
        console.print(f"wrote {json_out}")

"""``greval review``: push the next batch people should label; ``greval review status``: what the labels say
so far and when to stop."""

from __future__ import annotations

import shlex

import click

from greval.annotation.argilla import DEFAULT_BATCH
from greval.cli.annotate_sync import PushBar, opened, store_option
from greval.cli.bundles import ConnectionFlags, connection_options_for
from greval.cli.common import console, out
from greval.cli.common import store_option as common_store_option
from greval.cli.flags import FLAGS, for_terminal
from greval.errors import UserError
from greval.report.terminal import print_review_status
from greval.store.backend import display


@click.group("review", invoke_without_command=True)
@common_store_option(default=None, dest="store_path")
@click.option("--spec", "spec_name", default=None, help="The metric to review (required without a subcommand).")
@click.option(
    "--batch", type=click.IntRange(min=1), default=50, show_default=True, help="New items to label this round."
)
@click.option(
    "--control-share",
    type=click.FloatRange(0.0, 1.0),
    default=0.2,
    show_default=True,
    help="Share of each round drawn at random (stratified by verdict) from the items not yet taken whole.",
)
@click.option("--seed", type=int, default=None, help="Seed of the review's order and draws (kept by later rounds).")
@click.option("--judge", default=None, help="Whose verdicts to review, when several judges ran (the rest: a panel).")
@click.option("--blind", is_flag=True, help="Hide the judge's verdict and reasoning from annotators.")
@click.option("--batch-size", type=click.IntRange(1, 1000), default=DEFAULT_BATCH, show_default=True)
@connection_options_for("SPEC-review")
@click.pass_context
def review(
    ctx: click.Context,
    store_path: str | None,
    spec_name: str | None,
    batch: int,
    control_share: float,
    seed: int | None,
    judge: str | None,
    blind: bool,
    batch_size: int,
    argilla: ConnectionFlags,
) -> None:
    """Push the next round of items people should label for a metric, to its review dataset in Argilla.

    Each round takes the judge's most doubtful verdicts whole (panel disagreement first when several judges
    ran, then lowest confidence), plus a random control sample of the rest, stratified by verdict, and
    records every item's inclusion probability. `greval review status` weights the labels back with them, so
    the figures estimate agreement over every judged item, not just over the hard ones. Docs: docs/review.md.

    \b
      greval review --store runs.sqlite --spec answer_alignment --batch 40
      greval review status --store runs.sqlite --spec answer_alignment --target "kappa±0.05"
    """
    if ctx.invoked_subcommand is not None:
        return
    if store_path is None or spec_name is None:
        raise UserError("greval review needs --store PATH and --spec NAME (or a subcommand: status)")
    from greval.flows.review import next_round

    bar = PushBar(console)
    with opened(store_path, argilla) as (store, conn), bar:
        assert conn is not None
        res = next_round(
            store,
            conn,
            spec_name,
            batch=batch,
            control_share=control_share,
            seed=seed,
            dataset=argilla.dataset,
            workspace=argilla.workspace,
            judge=judge,
            blind=blind,
            batch_size=batch_size,
            on_start=bar.start,
            on_progress=bar.advance,
        )
    parts = ", ".join(f"{k} {v}" for k, v in sorted(res.by_selection.items()))
    panel = f"; a panel of {res.panel} other judge(s) ordered the doubt" if res.panel else ""
    out.print(
        f"Round {res.round_no} of the review of {spec_name!r}: {res.new_units} new item(s) pushed to dataset "
        f"{res.push.dataset!r} (workspace {res.push.workspace!r}); the review now holds {res.push.selected} of "
        f"{res.push.population} judged items ({parts}){panel}.",
        highlight=False,
        soft_wrap=True,
    )
    again = ["greval", "review", "status", "--store", display(store_path), "--spec", spec_name]
    for flag, value in (
        ("--dataset", argilla.dataset),
        ("--workspace", argilla.workspace),
        ("--data-dir", argilla.data_dir),
    ):
        if value is not None:
            again += [flag, str(value)]
    url = argilla.api_url
    if url is not None and ctx.get_parameter_source("api_url") == click.core.ParameterSource.COMMANDLINE:
        again += ["--api-url", url]  # the key stays where the user keeps it (flag or ARGILLA_API_KEY)
    out.print(f"Label them in Argilla, then: {shlex.join(again)}", highlight=False, soft_wrap=True)
    for note in res.notes:
        console.print(f"note: {for_terminal(note)}", highlight=False, soft_wrap=True)


@review.command("status")
@store_option
@click.option("--spec", "spec_name", required=True, help="The metric under review.")
@click.option(
    "--target",
    default=None,
    help="The interval to reach, FIGURE±HALF_WIDTH: 'kappa±0.05', 'accuracy+-0.03', 'prevalence[Correct]±0.05'.",
)
@click.option("--no-pull", is_flag=True, help="Use the labels already in the store (no Argilla needed).")
@click.option("--bootstrap", "resamples", type=int, default=1000, show_default=True, help="Resamples for CIs.")
@click.option("--seed", type=int, default=0, show_default=True)
@connection_options_for("SPEC-review")
def status_cmd(
    store_path: str,
    spec_name: str,
    target: str | None,
    no_pull: bool,
    resamples: int,
    seed: int,
    argilla: ConnectionFlags,
) -> None:
    """Pull the review's labels and print agreement so far (design-weighted), the estimated share of each
    label over every judged item, and how many more labels the target interval needs.

    \b
      greval review status --store runs.sqlite --spec answer_alignment --target "kappa±0.05"
    """
    from greval.agreement.stopping import Target
    from greval.flows.review import review_status

    goal = Target.parse(target) if target else None
    with opened(store_path, argilla, need_argilla=not no_pull) as (store, conn):
        st = review_status(
            store,
            conn,
            spec_name,
            target=goal,
            dataset=argilla.dataset,
            workspace=argilla.workspace,
            resamples=resamples,
            seed=seed,
        )
    print_review_status(out, console, st, FLAGS)

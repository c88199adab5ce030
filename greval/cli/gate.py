"""``greval gate``: exit 0 when a judge agrees with people well enough, 1 when not, with a one-line reason."""

from __future__ import annotations

import sys
from typing import cast

import click

from greval.cli.common import console, fail, out, store_option
from greval.cli.flags import for_terminal
from greval.errors import UserError


@click.command("gate")
@store_option(default=None, required=True, must_exist=True, dest="store_path")
@click.option("--spec", "spec_ref", required=True, help="The metric (NAME, or NAME@HASH for a version).")
@click.option(
    "--min",
    "--require",
    "conditions",
    multiple=True,
    required=True,
    help="A condition METRIC OP NUMBER on the agreement report, e.g. 'kappa>=0.6', 'accuracy>0.8', 'mae<=0.5' "
    "(kappa = cohen_kappa, f1 = macro_f1, alpha = alpha_nominal; any report metric by name); repeatable, all "
    "must hold.",
)
@click.option(
    "--ci",
    "side",
    type=click.Choice(["value", "lower", "upper"]),
    default="value",
    show_default=True,
    help="Test the point estimate, or an end of its bootstrap CI (lower: 'even pessimistically').",
)
@click.option(
    "--vs-ceiling",
    type=float,
    default=None,
    help="Also require the judge–human mean figure ≥ F × the human–human one (needs ≥2 people per item).",
)
@click.option("--judge", default=None, help="Whose verdicts, when several judges answered this metric.")
@click.option("--dataset", "datasets", multiple=True, help="Which human-label datasets (repeatable; default all).")
@click.option("--bootstrap", "resamples", type=int, default=1000, show_default=True, help="Resamples for CIs.")
@click.option("--seed", type=int, default=0, show_default=True)
def gate_cmd(
    store_path: str,
    spec_ref: str,
    conditions: tuple[str, ...],
    side: str,
    vs_ceiling: float | None,
    judge: str | None,
    datasets: tuple[str, ...],
    resamples: int,
    seed: int,
) -> None:
    """Exit 0 if the judge's agreement with people meets every condition, 1 if not (one line says why).

    For CI pipelines that must refuse a judge, or a new version of a spec, that does not agree with people
    well enough. The report is the one `greval agreement --store S --spec NAME` prints.

    \b
      greval gate --store runs.sqlite --spec answer_alignment --min "kappa>=0.6" --ci lower
      greval gate --store runs.sqlite --spec answer_alignment --min "accuracy>=0.8" --vs-ceiling 0.9
    """
    from greval.agreement.agreement import compute_agreement
    from greval.agreement.from_store import store_frame
    from greval.agreement.gate import Condition, Side, evaluate
    from greval.agreement.models import AgreementOptions
    from greval.store.store import Store

    try:
        parsed = [Condition.parse(c) for c in conditions]
        if side != "value" and resamples <= 0:
            raise UserError(f"--ci {side} needs bootstrap resamples (--bootstrap > 0)")
        name, _, version = spec_ref.partition("@")
        with Store(store_path) as st:
            frame, scale, _ = store_frame(st, name, judge, "item", version or None, datasets=datasets)
        report = compute_agreement(frame, scale, AgreementOptions(bootstrap=resamples, seed=seed))
        result = evaluate(report, parsed, cast(Side, side), vs_ceiling)
    except UserError as exc:
        fail(exc)
    out.print(for_terminal(result.line), highlight=False, soft_wrap=True)  # the reasons name option fields
    if not result.passed:
        console.print(f"(from {report.counts.items_compared} items compared; see `greval agreement`)", highlight=False)
    sys.exit(0 if result.passed else 1)

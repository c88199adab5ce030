"""``greval gate``: exit 0 when every condition on a metric holds (its agreement with people, its dataset
score, its change against a baseline), 1 when one does not (one line per failed condition), 2 for a mistake."""

from __future__ import annotations

import sys
from typing import cast

import click

from greval.cli.common import INVALID_OPTION, console, fail, out, store_option
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
    help="A condition METRIC OP NUMBER, repeatable, all must hold. 'score' is the metric's dataset score as the "
    "run summary prints it (any metric: judge, computed, pipeline), e.g. 'score>=0.7'; agreement with people "
    "(judge metrics): 'kappa>=0.6', 'accuracy>0.8', 'mae<=0.5' (kappa = cohen_kappa, f1 = macro_f1, alpha = "
    "alpha_nominal; any report metric by name).",
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
@click.option("--run", "run_id", default=None, help="Score this run's records [the latest finished run of the metric].")
@click.option(
    "--system",
    "systems",
    multiple=True,
    metavar="COL=VALUE",
    help="Check the score (and the baseline) on this system's records only: those whose field COL is VALUE; "
    "repeatable, each system checked apart.",
)
@click.option(
    "--baseline",
    default=None,
    metavar="RUN_ID|NAME@HASH",
    help="Compare the score with another run's (paired by record id), or with another version of the metric "
    "on the same records; with --max-drop.",
)
@click.option(
    "--max-drop",
    type=float,
    default=None,
    help="The largest drop of the score allowed against --baseline (paired bootstrap CI; --ci applies).",
)
@click.option(
    "--junit",
    "junit_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write a JUnit XML report (a test case per condition) for CI systems.",
)
@click.option("--judge", default=None, help="Whose verdicts, when several judges answered this metric.")
@click.option("--dataset", "datasets", multiple=True, help="Which human-label datasets (repeatable; default all).")
@INVALID_OPTION
@click.option("--bootstrap", "resamples", type=int, default=1000, show_default=True, help="Resamples for CIs.")
@click.option("--seed", type=int, default=0, show_default=True)
def gate_cmd(
    store_path: str,
    spec_ref: str,
    conditions: tuple[str, ...],
    side: str,
    vs_ceiling: float | None,
    run_id: str | None,
    systems: tuple[str, ...],
    baseline: str | None,
    max_drop: float | None,
    junit_path: str | None,
    judge: str | None,
    datasets: tuple[str, ...],
    invalid: str,
    resamples: int,
    seed: int,
) -> None:
    """Exit 0 if every condition on a metric holds, 1 if not (one line per failed condition).

    For CI pipelines that must refuse a release whose scores fell, or a judge (a new version of a spec) that
    does not agree with people well enough. Scores are those of the metric's latest finished run (--run to
    choose); agreement is the report `greval agreement --store S --spec NAME` prints.

    \b
      greval gate --store runs.sqlite --spec rouge_l --min "score>=0.3" --ci lower
      greval gate --store runs.sqlite --spec faithfulness --min "score>=0.8" --system system=rag-v2
      greval gate --store runs.sqlite --spec faithfulness --baseline 20250101-120000-ab12cd --max-drop 0.02
      greval gate --store runs.sqlite --spec answer_alignment --min "kappa>=0.6" --ci lower --junit gate.xml
    """
    from greval.gate.checks import Condition, GateResult, Side
    from greval.gate.gate import GateRequest, run_gate
    from greval.gate.junit import write_junit
    from greval.report.scores import SystemFilter
    from greval.store.store import Store

    try:
        if side != "value" and resamples <= 0:
            raise UserError(f"--ci {side} needs bootstrap resamples (--bootstrap > 0)")
        if max_drop is not None and max_drop < 0:
            raise UserError(f"--max-drop {max_drop:g}: give how much the score may drop, a number ≥ 0")
        request = GateRequest(
            spec=spec_ref,
            conditions=[Condition.parse(c) for c in conditions],
            side=cast(Side, side),
            vs_ceiling=vs_ceiling,
            judge=judge,
            datasets=list(datasets),
            run=run_id,
            systems=[SystemFilter.parse(s) for s in systems],
            baseline=baseline,
            max_drop=max_drop,
            invalid=invalid,
            resamples=resamples,
            seed=seed,
        )
        with Store(store_path) as st:
            outcome = run_gate(st, request)
    except UserError as exc:
        fail(exc)
    result = outcome.result
    # the reasons name option fields (greval.errors.option): the terminal and the JUnit report show flags
    checks = [c.model_copy(update={"text": for_terminal(c.text)}) for c in result.checks]
    notes = [for_terminal(n) for n in outcome.notes]
    if junit_path is not None:
        write_junit(junit_path, "greval gate", f"greval.gate.{spec_ref}", checks, notes)
    for line in GateResult.of(checks).lines:
        out.print(line, highlight=False, soft_wrap=True, markup=False)
    if not result.passed:
        console.print("(" + "; ".join(notes) + ")", highlight=False, markup=False)
    sys.exit(0 if result.passed else 1)

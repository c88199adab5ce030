"""greval's pytest plugin (registered through the ``pytest11`` entry point, so every pytest run of an
environment with greval loads it): the ``greval_check`` fixture and the ``--greval-store`` /
``--greval-judge`` options.

    def test_answers_stay_faithful(greval_check):
        greval_check("tests/data/rag.jsonl", "faithfulness", min_score=0.8, ci="lower")

A check judges the data with :func:`greval.evaluate` and fails the test with the score, its CI, the threshold
and the worst records (ids, verdicts, reasons). Verdicts go through the store — by default in pytest's cache
directory (``.pytest_cache/d/greval/``), shared by every test and xdist worker — so a re-run pays only for
what changed, and two workers never pay twice for one judgement (the store's claims).

Loading the plugin costs nothing: this module imports only pytest; greval's stages load when a test calls
the fixture.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pytest

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from greval.flows import Results
    from greval.report.scores import ScoreRow
    from greval.spec import BaseSpec

#: How many of the worst records a failed check names.
WORST = 5


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("greval", "greval: LLM judges in tests (the greval_check fixture)")
    group.addoption(
        "--greval-store",
        default=None,
        help="Store for greval_check's verdicts: a SQLite file or a postgresql:// URL [.pytest_cache/d/greval/"
        "store.sqlite; env GREVAL_STORE].",
    )
    group.addoption(
        "--greval-judge",
        default=None,
        help="Judge for greval_check, e.g. openai:gpt-4o-mini (OPENAI_BASE_URL for any OpenAI-compatible server) "
        "[env GREVAL_JUDGE, else the metric's, else greval's default].",
    )


class GrevalCheck:
    """``greval_check(data, metrics, min_score=…, max_score=…, ci="value"|"lower"|"upper", …)``: judge
    ``data`` (what :func:`greval.evaluate` takes) and fail the test unless each metric asked for has its
    dataset score (the point value, or an end of its 95 % bootstrap CI) within the bounds. Returns the
    :class:`greval.Results` for further assertions."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def store(self) -> str | None:
        """--greval-store, else $GREVAL_STORE, else a file in pytest's cache directory (None: greval's default)."""
        given = self.config.getoption("greval_store") or os.environ.get("GREVAL_STORE")
        if given:
            return str(given)
        cache = getattr(self.config, "cache", None)  # None under -p no:cacheprovider
        return str(Path(cache.mkdir("greval")) / "store.sqlite") if cache is not None else None

    def __call__(
        self,
        data: Any,
        metrics: Sequence[str | Path | BaseSpec] | str | Path | BaseSpec,
        *,
        min_score: float | None = None,
        max_score: float | None = None,
        ci: Literal["value", "lower", "upper"] = "value",
        judge: str | None = None,
        map: Mapping[str, str] | None = None,
        id_column: str | None = None,
        worst: int = WORST,
    ) -> Results:
        from greval.errors import UserError
        from greval.flows import evaluate
        from greval.runner import RunOptions

        try:
            results = evaluate(
                data,
                metrics,
                judge=judge or self.config.getoption("greval_judge"),
                store=self.store(),
                map=map,
                id_column=id_column,
                options=RunOptions(retry_errors=True),  # a judge that failed last time is asked again
                progress=False,
            )
            rows = {r.metric: r for r in results.scores()}
            broken = [t for m in results.asked if (t := judge_failure(results, rows[m], worst)) is not None]
            if broken:  # no score is checked over records the judge failed on
                pytest.fail("\n".join(broken), pytrace=False)
            failed = [c for c in results.checks(min_score=min_score, max_score=max_score, ci=ci) if not c[1].passed]
        except UserError as exc:
            pytest.fail(f"greval: {exc}", pytrace=False)
        if failed:
            text = "\n".join(failure(results, rows[metric], chk.text, worst) for metric, chk in failed)
            pytest.fail(text, pytrace=False)
        return results


def judge_failure(results: Results, row: ScoreRow, worst: int) -> str | None:
    """The judge's failures on a metric as a test failure's message (None: it failed on no record): how many
    records it failed on, and the first ``worst`` of them with their errors — an error, not a low score."""
    f = row.figures
    broken = f.failed + f.partial
    if not broken:
        return None
    lines = [
        f"greval: {row.metric}: the judge failed on {broken} of {f.records} records (errors, not low scores: no "
        "score is checked; the next run asks again)"
    ]
    frame = results.worst(row.metric, f.records)
    for r in [r for r in frame.to_dict("records") if isinstance(r["error"], str) and r["error"]][:worst]:
        lines.append(f"    {r['record_id']}  {r['status']}  {_short(str(r['error']))}")
    return "\n".join(lines)


def failure(results: Results, row: ScoreRow, text: str, worst: int) -> str:
    """A failed check as a test failure's message: the condition, the score with its CI and counts, and the
    worst records with their verdicts and reasons."""
    from greval.report.format import fmt_number

    metric, f, s = row.metric, row.figures, row.score
    ci = f"95% CI [{fmt_number(s.ci_low)}, {fmt_number(s.ci_high)}]" if s.ci_low is not None else "no CI"
    unscored = f", {f.failed + f.partial} failed, {f.skipped} skipped" if f.failed + f.partial + f.skipped else ""
    lines = [
        f"greval: {metric}: {text}",
        f"  dataset score {fmt_number(f.mean_score)}, {ci}, over {f.scored} of {f.records} records{unscored}",
    ]
    frame = results.worst(metric, worst)
    if len(frame):
        lines.append("  worst records:")
    for r in frame.to_dict("records"):
        verdict = r["label"] if r["label"] is not None else r["status"]
        why = r["reason"] or r["error"] or ""
        lines.append(f"    {r['record_id']}  score {fmt_number(r['score'])}  {verdict}  {_short(str(why))}")
    return "\n".join(lines)


def _short(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


@pytest.fixture
def greval_check(request: pytest.FixtureRequest) -> GrevalCheck:
    """Judge data with greval's metrics and fail the test when a score is out of bounds (see GrevalCheck)."""
    return GrevalCheck(request.config)

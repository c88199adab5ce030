"""agreement/gate.py and `greval gate`: exit 0 or 1 on the agreement report, with one line why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from click.testing import CliRunner

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from greval.cli import main
from tests.agreement.conftest import judged_store


def test_gate_exits_0_or_1_on_the_agreement_report_with_one_line_why(llm: Any, tmp_path: Path) -> None:
    """`greval gate`: thresholds just below and just above the report's own κ pass and fail; a CI end, a
    missing human ceiling, an unknown metric and a malformed condition each say so in one line."""
    store = tmp_path / "s.sqlite"
    judged_store(llm, store)
    out = tmp_path / "a.json"
    base = ["--store", str(store), "--spec", "answer_alignment", "--bootstrap", "200"]
    res = CliRunner().invoke(main, ["agreement", *base, "--json", str(out)])
    assert res.exit_code == 0, res.output
    kappa = json.loads(out.read_text())["metrics"]["cohen_kappa"]
    below, above = kappa["value"] - 0.01, kappa["value"] + 0.01
    ok = CliRunner().invoke(main, ["gate", *base, "--min", f"kappa>={below}", "--min", "accuracy>=0"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("gate passed: cohen_kappa ") and ok.output.count("\n") == 1
    bad = CliRunner().invoke(main, ["gate", *base, "--min", f"kappa>={above}"])
    assert bad.exit_code == 1 and bad.output.startswith("gate failed: cohen_kappa "), bad.output
    low = CliRunner().invoke(main, ["gate", *base, "--require", f"kappa>={kappa['ci_low'] + 1e-6}", "--ci", "lower"])
    assert low.exit_code == 1 and "lower end of its CI" in low.output, low.output
    ceiling = CliRunner().invoke(main, ["gate", *base, "--min", "accuracy>=0", "--vs-ceiling", "0.9"])
    assert ceiling.exit_code == 1 and "no human ceiling" in ceiling.output, ceiling.output
    for cond, says in (("nope>=1", "no metric 'nope'"), ("kappa=>0.6", "write METRIC OP NUMBER")):
        res = CliRunner().invoke(main, ["gate", *base, "--min", cond])
        assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output, res.output


def test_gate_tests_the_design_weighted_figure_on_a_non_random_sample() -> None:
    """On an uncertain-first sample the gate reads the 1/π-weighted κ (and says so), not the plain one; a
    figure without a weighted counterpart is tested as it is, with a note that the sample was not random."""
    from greval.gate.checks import Condition, evaluate

    scale = AgreementScale(kind="categorical", labels=["fail", "pass"])
    rows = [
        {
            "item": f"r{i}",
            "judge": "pass" if i % 4 else "fail",
            "human": ("fail" if i % 4 else "pass") if i < 6 else ("pass" if i % 4 else "fail"),
            "probability": 1.0 if i < 8 else 0.1,
            "stratum": "uncertain" if i < 8 else "control",
        }
        for i in range(30)
    ]
    report = compute_agreement(pd.DataFrame(rows), scale, AgreementOptions(bootstrap=200, seed=0))
    assert report.design is not None
    # The error-corrected prevalence says its error rates are the unweighted ones.
    assert report.categorical is not None and report.categorical.prevalence is not None
    assert "as if they were a random sample" in (report.categorical.prevalence.note or "")
    weighted = next(e.weighted for e in report.design.estimates if e.name == "kappa")
    plain = report.metrics["cohen_kappa"].value
    assert weighted is not None and plain is not None and weighted > plain + 0.1
    between = (weighted + plain) / 2
    result = evaluate(report, [Condition.parse(f"kappa>={between}")])
    assert result.passed and "cohen_kappa (design-weighted)" in result.line
    other = evaluate(report, [Condition.parse("alpha_nominal>=-1")])
    assert other.passed and "(unweighted, on a non-random sample)" in other.line


def test_gate_counts_a_judge_error_as_greval_agreement_does_with_the_same_invalid_policy(
    llm: Any, tmp_path: Path
) -> None:
    """`--invalid` reaches the gate's report: with one judge answer an error, as-wrong and drop give different
    accuracies, each the one `greval agreement --invalid …` prints."""
    body = {"error": {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}}
    llm.script([{"match": "q7", "action": {"type": "fault", "status": 400, "body": body}}])
    store = tmp_path / "s.sqlite"
    judged_store(llm, store)
    base = ["--store", str(store), "--spec", "answer_alignment", "--bootstrap", "0"]
    shown = {}
    for policy in ("as-wrong", "drop"):
        out = tmp_path / f"{policy}.json"
        res = CliRunner().invoke(main, ["agreement", *base, "--invalid", policy, "--json", str(out)])
        assert res.exit_code == 0, res.output
        accuracy = json.loads(out.read_text())["metrics"]["accuracy"]["value"]
        ok = CliRunner().invoke(main, ["gate", *base, "--invalid", policy, "--min", f"accuracy>={accuracy - 1e-9}"])
        bad = CliRunner().invoke(main, ["gate", *base, "--invalid", policy, "--min", f"accuracy>={accuracy + 1e-6}"])
        assert ok.exit_code == 0 and bad.exit_code == 1, (ok.output, bad.output)
        shown[policy] = accuracy
    assert shown["as-wrong"] != shown["drop"]

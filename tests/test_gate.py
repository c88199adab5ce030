"""`greval gate` on any metric (issue 33): a computed metric's dataset score, per system, CI ends, a regression
against a baseline run or metric version (paired bootstrap CI), the JUnit XML report checked against its
schema, and each mistake in one line. Runs are made with `greval run` into a real SQLite store (ROUGE-L needs
no judge model, so the scores are known exactly)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner, Result

from greval.cli import main
from greval.report.scores import paired_change
from greval.report.store_report import build
from greval.store.store import Store

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd"

EXPECTED = "the cat sat on the mat"


def dataset(path: Path, exact: set[int], n: int = 20) -> Path:
    """n records: those in ``exact`` answer with the expected answer (ROUGE-L 1), the others share no word
    with it (0). Even ids are system A, odd ones B."""
    rows = [
        {
            "id": f"r{i}",
            "question": f"Where did the cat sit, case {i}?",
            "expected_answer": EXPECTED,
            "answer": EXPECTED if i in exact else "dogs run fast",
            "system": "A" if i % 2 == 0 else "B",
        }
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(store: Path, data: Path, spec: str = "rouge_l") -> str:
    """`greval run` and the id of the run it recorded."""
    done = CliRunner().invoke(main, ["run", str(data), "--spec", spec, "--store", str(store), "--id-column", "id"])
    assert done.exit_code == 0, done.output
    with Store(store) as st:
        return str(st.runs()[-1]["run_id"])


def gate(store: Path, *args: str) -> Result:
    return CliRunner().invoke(main, ["gate", "--store", str(store), "--spec", "rouge_l", "--bootstrap", "500", *args])


def test_gate_on_a_computed_metrics_dataset_score_and_its_ci(tmp_path: Path) -> None:
    """Was exit 2 ('a computed metric, not a judge metric'); now the score the run summary prints is tested."""
    store = tmp_path / "s.sqlite"
    run(store, dataset(tmp_path / "d.jsonl", set(range(10))))  # 10 of 20 exact: score 0.5
    ok = gate(store, "--min", "score>=0.3")
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[0] == "gate passed: score 0.500 >= 0.3"
    bad = gate(store, "--min", "score>=0.6", "--min", "score<=0.9")
    assert bad.exit_code == 1 and bad.output.splitlines()[0] == "gate failed: score 0.500, needs >= 0.6"
    assert "score <= 0.9" not in bad.output.splitlines()[0]
    # --ci lower tests the lower end of the store report's CI (the same bootstrap, same seed)
    ci = build(store).metrics[0].score
    assert ci.ci_low is not None and ci.ci_high is not None and ci.ci_low < 0.5 < ci.ci_high
    low = CliRunner().invoke(main, ["gate", "--store", str(store), "--spec", "rouge_l", "--min", "score>=0.45"])
    assert low.exit_code == 0
    low = CliRunner().invoke(
        main,
        [
            "gate",
            "--store",
            str(store),
            "--spec",
            "rouge_l",
            "--min",
            "score>=0.45",
            "--ci",
            "lower",
            "--bootstrap",
            "2000",
        ],
    )
    assert low.exit_code == 1
    assert low.output.splitlines()[0] == f"gate failed: score (lower end of its CI) {ci.ci_low:.3f}, needs >= 0.45"


def test_gate_per_system_one_line_per_failed_condition(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    run(store, dataset(tmp_path / "d.jsonl", {i for i in range(20) if i % 2 == 0}))  # A exact, B not
    both = gate(store, "--system", "system=A", "--system", "system=B", "--min", "score>=0.9", "--min", "score>=0.95")
    assert both.exit_code == 1
    failed = [line for line in both.output.splitlines() if line.startswith("gate failed")]
    assert failed == [
        "gate failed: score [system=B] 0.000, needs >= 0.9",
        "gate failed: score [system=B] 0.000, needs >= 0.95",
    ]
    only_a = gate(store, "--system", "system=A", "--min", "score>=0.9")
    assert only_a.exit_code == 0 and only_a.output.startswith("gate passed: score [system=A] 1.000 >= 0.9")
    nobody = gate(store, "--system", "system=C", "--min", "score>=0.9")  # a typo must not pass the gate
    assert nobody.exit_code == 2 and "system system=C: no record of run" in nobody.output
    assert "(system: A, B)" in nobody.output


def test_a_regression_against_a_baseline_fails_and_an_even_one_passes(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    base = run(store, dataset(tmp_path / "v1.jsonl", set(range(10))))  # 0.5
    worse = run(store, dataset(tmp_path / "v2.jsonl", set(range(8))))  # 0.4: the baseline is 0.1 higher
    bad = gate(store, "--run", worse, "--baseline", base, "--max-drop", "0.02")
    assert bad.exit_code == 1, bad.output
    assert bad.output.splitlines()[0] == (
        f"gate failed: score change vs run {base} (paired over 20 records) -0.100, needs >= -0.02"
    )
    assert "0.400 now, 0.500 in the baseline" in bad.output
    same = run(store, dataset(tmp_path / "v1b.jsonl", set(range(10))))  # the same answers again
    ok = gate(store, "--baseline", base, "--max-drop", "0.02", "--ci", "lower")  # the latest run: `same`
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith(
        f"gate passed: score change vs run {base} (paired over 20 records; lower end of its CI) 0.000"
    )
    assert same != base
    # within the allowed drop at its point value, but not pessimistically
    small = run(store, dataset(tmp_path / "v3.jsonl", set(range(9))))  # 0.45: a drop of 0.05
    assert gate(store, "--run", small, "--baseline", base, "--max-drop", "0.06").exit_code == 0
    assert gate(store, "--run", small, "--baseline", base, "--max-drop", "0.06", "--ci", "lower").exit_code == 1


def test_a_baseline_version_of_the_metric_on_the_same_records(tmp_path: Path) -> None:
    """NAME@HASH: this run's records judged by another version of the metric (here ROUGE-1 as the main
    figure: on answers sharing no word it is 0 too, so the change is 0)."""
    store = tmp_path / "s.sqlite"
    data = dataset(tmp_path / "d.jsonl", set(range(10)))
    other = tmp_path / "rouge_1.yaml"
    other.write_text(
        "name: rouge_l\nkind: computed\ndescription: ROUGE-1.\nmetric: rouge\nparams:\n  types: [rouge1]\n",
        encoding="utf-8",
    )
    run(store, data, str(other))
    with Store(store) as st:
        old_hash = st.runs()[-1]
        old = json.loads(old_hash["summary"])["metrics"][0]["spec_hash"]
    run(store, data)
    ok = gate(store, "--baseline", f"rouge_l@{old}", "--max-drop", "0")
    assert ok.exit_code == 0, ok.output
    assert f"score change vs rouge_l@{old} on the same records (paired over 20 records) 0.000" in ok.output


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--baseline", "bleu@abc", "--max-drop", "0.1"], "is another metric than 'rouge_l'"),
        (["--baseline", "RUN-BLEU", "--max-drop", "0.1"], "did not judge rouge_l (it judged: bleu)"),
        (["--baseline", "nope", "--max-drop", "0.1"], "baseline 'nope': no such run"),
        (["--baseline", "RUN-BLEU"], "--baseline needs --max-drop"),
        (["--max-drop", "0.1"], "--max-drop needs a --baseline"),
        (["--min", "score>=0.1", "--system", "system"], "system 'system': write COLUMN=VALUE"),
        (["--min", "kappa>=0.1"], "not a judge metric"),
        (["--min", "kappa>=0.1", "--system", "system=A"], "--system applies to dataset scores"),
        ([], "nothing to check"),
        (["--min", "score>=0.1", "--run", "nope"], "no run 'nope'"),
    ],
)
def test_mistakes_are_one_line_and_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    store = tmp_path / "s.sqlite"
    run(store, dataset(tmp_path / "d.jsonl", set(range(10))))
    bleu = run(store, dataset(tmp_path / "d.jsonl", set(range(10))), "bleu")
    res = gate(store, *[bleu if a == "RUN-BLEU" else a for a in args])
    assert res.exit_code == 2, res.output
    assert says in res.output and len(res.output.strip().splitlines()) == 1 and "Traceback" not in res.output


def test_the_junit_report_names_each_condition_and_passes_the_schema(tmp_path: Path) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    store = tmp_path / "s.sqlite"
    base = run(store, dataset(tmp_path / "v1.jsonl", set(range(10))))
    run(store, dataset(tmp_path / "v2.jsonl", set(range(8))))
    out = tmp_path / "gate.xml"
    args = ["--min", "score>=0.3", "--min", "score>=0.5", "--system", "system=A", "--system", "system=B"]
    res = gate(store, *args, "--baseline", base, "--max-drop", "0.02", "--junit", str(out))
    assert res.exit_code == 1
    schema = xmlschema.XMLSchema(str(SCHEMA))
    schema.validate(str(out))  # raises, naming the element, when the report does not fit
    tree = schema.to_dict(str(out))
    suite = tree["testsuite"][0]
    cases = suite["testcase"]
    assert len(cases) == 6 and int(suite["@tests"]) == 6  # 2 conditions × 2 systems + the baseline per system
    failed = [c for c in cases if "failure" in c]
    assert (
        int(suite["@failures"])
        == len(failed)
        == sum(line.startswith("gate failed") for line in res.output.splitlines())
    )
    assert {c["@name"] for c in cases} >= {"score [system=A] >= 0.3", "score [system=B] >= 0.5"}
    assert all(c["failure"][0]["@message"] for c in failed)
    broken = tmp_path / "broken.xml"
    broken.write_text(out.read_text().replace(' tests="6"', ""), encoding="utf-8")
    assert not schema.is_valid(str(broken))  # the schema check can fail


def test_the_paired_change_is_the_difference_of_dataset_scores_with_a_bootstrap_ci() -> None:
    rng = np.random.default_rng(0)
    now = [{"record_id": f"r{i}", "status": "ok", "score": float(x), "units": int(u)}
           for i, (x, u) in enumerate(zip(rng.random(40), rng.integers(1, 5, 40), strict=True))]  # fmt: skip
    before = [{**r, "score": min(1.0, r["score"] + 0.1)} for r in now]
    change = paired_change(now, before, "micro", resamples=1000, seed=1)
    w = np.array([r["units"] for r in now], dtype=float)
    a = np.array([r["score"] for r in now])
    b = np.array([r["score"] for r in before])
    assert change.change == pytest.approx((a * w).sum() / w.sum() - (b * w).sum() / w.sum(), abs=1e-12)
    assert change.ci_low is not None and change.ci_high is not None
    assert change.ci_low <= change.change <= change.ci_high < 0  # every record dropped: the CI is below 0
    same = paired_change(now, now, "micro", resamples=200)
    assert (same.change, same.ci_low, same.ci_high) == (0.0, 0.0, 0.0)
    partial = paired_change(now, before[:30], "macro", resamples=200)
    assert (partial.paired, partial.only_current, partial.only_baseline) == (30, 10, 0)


def test_a_scores_ci_does_not_depend_on_the_order_of_its_rows() -> None:
    """Verdicts written concurrently are stored in the order they finished: the CI must not follow it (it did:
    the same records gave another CI from one run to the next)."""
    from greval.report.stats import score_ci

    rng = np.random.default_rng(3)
    rows = [{"record_id": f"r{i}", "record_hash": f"h{i}", "status": "ok", "score": float(x), "units": 1}
            for i, x in enumerate(rng.random(30))]  # fmt: skip
    cis = {(c.ci_low, c.ci_high) for c in (score_ci(rng.permutation(rows).tolist(), "micro") for _ in range(5))}
    assert len(cis) == 1
    before = [{**r, "score": r["score"] / 2} for r in rows]
    changes = {
        (c.ci_low, c.ci_high)
        for c in (paired_change(rng.permutation(rows).tolist(), before, "micro", resamples=300) for _ in range(5))
    }
    assert len(changes) == 1


def test_the_statistics_panels_mean_ci_does_not_depend_on_the_order_of_its_rows() -> None:
    """The report's statistics (mean of record scores, its CI) from the same records in another stored order:
    the same figures (the CI followed the order verdicts finished in: a PostgreSQL and a SQLite store of one
    dataset showed 0.3 and 0.3325 for one metric's lower bound)."""
    from greval.report.stats import rows_stats

    rng = np.random.default_rng(4)
    rows = [{"record_id": f"r{i}", "record_hash": f"h{i}", "status": "ok", "score": float(x), "units": 1}
            for i, x in enumerate(rng.random(30))]  # fmt: skip
    seen = {rows_stats(rng.permutation(rows).tolist()).model_dump_json() for _ in range(5)}
    assert len(seen) == 1

"""The ledger of spent labels, end to end: a real store, the real run path and the local OpenAI-compatible test
server over HTTP. The scripted judge answers right whenever its prompt shows a few-shot example before the
record judged (and mostly wrong otherwise): a few-shot candidate wins and is adopted, with examples to keep out
of the next decision's test part."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.align.entry import Target, align, plan
from greval.align.ledger import FALSE_ADOPTION_RATE, family_wise
from greval.align.models import AlignOptions, AlignResult
from greval.cli import main
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.store.store import Store
from tests.align import scripted as sc

N = 14
SEEDS = range(int(__import__("os").environ.get("LEDGER_SEEDS", "20")))
OPTIONS = {"folds": 2, "rounds": 1, "rewrites": 0, "shots": (1,), "label_order": False}


def rules(n: int) -> list[dict[str, Any]]:
    """Right when an example's answer comes before the record judged; else right 20 % of the time."""
    out = sc.rules(0, rule=False)
    for i in range(n):
        last = rf"\bQ{i}\b(?!.*\"label\")"
        right, wrong = sc.truth(i), sc.LABELS[1 - sc.LABELS.index(sc.truth(i))]
        shown = r"\"label\": \"(yes|no)\""
        out.append({"match": rf"(?s){shown}.*{last}", "regex": True, "action": sc._answer(right, "shot")})
        out.append({"match": rf"(?s){last}", "regex": True, "probability": 0.2, "action": sc._answer(right)})
        out.append({"match": rf"(?s){last}", "regex": True, "action": sc._answer(wrong)})
    return out


def _align(llm: Any, store: Path, seed: int, **extra: Any) -> AlignResult:
    opts = AlignOptions(seed=seed, **OPTIONS, **extra)
    return align(store, "supported", sc.judge(llm.base_url), options=opts, notify=lambda *a, **k: None)


def _copy(src: Path, dst: Path) -> Path:
    for f in src.parent.glob(src.name + "*"):
        shutil.copy(f, dst.parent / f.name.replace(src.name, dst.name))
    return dst


def _adopt(llm: Any, store: Path, first: AlignResult) -> None:
    """Promote the adopted version (as `align --adopt` does) and judge every record with it (as a run of the
    adopted spec file does): the next align aligns it."""
    assert first.new_spec is not None
    with Store(store) as st:
        [decision] = st.decisions("supported")
        assert decision.adopted and decision.to_key is not None
        st.promote("supported", decision.to_key, "align", note=f"align decision {decision.number}")
        run([first.new_spec], sc.records(N), st, sc.judge(llm.base_url), options=RunOptions())


def test_a_second_align_never_tests_on_spent_labels_over_20_seeds(llm: Any, tmp_path: Path) -> None:
    """After an adoption, the next decision's test part holds neither the adopted version's few-shot examples nor
    the first decision's test records; decisions are numbered and the family-wise chance is counted. The same
    second align with `reuse_test` (what align did before the ledger) does draw spent records: the check bites."""
    llm.script(rules(N))
    base = tmp_path / "base.sqlite"
    sc.labelled_store(base, llm.base_url, N)
    overlaps_if_reused = 0
    for seed in SEEDS:
        path = _copy(base, tmp_path / f"s{seed}.sqlite")
        first = _align(llm, path, seed)
        assert first.adopted and first.examples, (seed, first.decision.message)
        assert first.ledger is not None and first.ledger.number == 1 and first.ledger.fresh == N
        _adopt(llm, path, first)
        spent = {e.unit for e in first.examples} | set(first.split.test_units)
        with Store(path) as st:
            reused = plan(st, Target("supported"), sc.judge(llm.base_url), options=AlignOptions(
                seed=seed, reuse_test=True, **OPTIONS))  # fmt: skip
        overlaps_if_reused += bool(spent & set(reused.split.test_units))
        second = _align(llm, path, seed)
        assert second.old_hash == first.new_hash
        assert not spent & set(second.split.test_units), seed
        assert second.ledger is not None and second.ledger.fresh == N - len(spent)
        if second.decision.difference is not None:  # a decision taken on the test part is the metric's second
            assert second.ledger.number == second.ledger.decisions == 2
            assert second.ledger.family_wise == pytest.approx(1 - (1 - FALSE_ADOPTION_RATE) ** 2)
    print(
        f"seeds whose second test part would hold spent records without the ledger: {overlaps_if_reused}/{len(SEEDS)}"
    )
    assert overlaps_if_reused > 0


def test_the_ledger_records_each_label_s_use_and_the_command_prints_the_count(llm: Any, tmp_path: Path) -> None:
    """The store holds which labels were the test part, which search fold each was in and which became the
    winner's examples (as the evidence JSON lists them); a repeated run is the same decision, not a second; the
    command prints the fresh labels, the decision's number and the family-wise chance; too few fresh labels for
    the split is one line (exit 2) unless `--reuse-test`, which the page and the evidence say."""
    llm.script(rules(N))
    path = tmp_path / "s.sqlite"
    sc.labelled_store(path, llm.base_url, N)
    first = _align(llm, path, 0)
    again = _align(llm, path, 0)
    assert again.ledger is not None and again.ledger.repeat and again.ledger.number == 1
    with Store(path) as st:
        [d] = st.decisions("supported")
        uses = st.label_uses(d.decision_id)
    test = {u.record_id for u in uses if u.use == "test"}
    assert test == set(first.split.test_units)
    assert {u.record_id: u.fold for u in uses if u.use == "search"} == first.split.fold_of
    assert {u.record_id for u in uses if u.use == "example"} == {e.unit for e in first.examples}
    assert first.decision.difference is not None and d.adopted and d.gain == first.decision.difference.gain
    flags = ["--store", str(path), "--spec", "supported", "--judge", "openai:scripted-judge", "--base-url"]
    flags += [llm.base_url, "--folds", "2", "--rounds", "1", "--rewrites", "0", "--shots", "1", "--quiet"]
    flags += ["--no-label-order", "--out", str(tmp_path / "o.yaml"), "--seed", "1"]
    res = CliRunner().invoke(main, ["align", *flags], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    fw = f"{family_wise(2):.1%}"
    assert "fresh labels: " in res.output and "decision 2; 2 decision(s)" in res.output and fw in res.output
    # Spend the rest: a third split needs more fresh records than remain.
    res = CliRunner().invoke(main, ["align", *flags[:-2], "--seed", "2", "--test-share", "0.6"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    assert "fresh labelled record(s)" in res.output and "--reuse-test" in res.output
    res = CliRunner().invoke(main, ["align", *flags[:-2], "--seed", "2", "--test-share", "0.6", "--reuse-test"])
    assert res.exit_code == 0, res.output
    evidence = json.loads((tmp_path / "o.evidence.json").read_text())
    assert evidence["ledger"]["reuse_test"] is True and evidence["split"]["test_units"]
    assert "reuse_test" in (tmp_path / "supported.align.html").read_text()


def test_adopt_promotes_the_adopted_version_and_readers_read_it(llm: Any, tmp_path: Path) -> None:
    """`--adopt` writes the adopted spec and makes it the production version, with a note naming the decision;
    readers then read it, and the next align aligns it. Without `--adopt` nothing is promoted
    (tests/align/test_end_to_end.py)."""
    llm.script(rules(N))
    path = tmp_path / "s.sqlite"
    sc.labelled_store(path, llm.base_url, N)
    with Store(path) as st:
        old = st.metric_version("supported").spec_hash
    flags = ["--store", str(path), "--spec", "supported", "--judge", "openai:scripted-judge", "--base-url"]
    flags += [llm.base_url, "--folds", "2", "--rounds", "1", "--rewrites", "0", "--shots", "1", "--quiet"]
    flags += ["--no-label-order", "--out", str(tmp_path / "o.yaml"), "--adopt"]
    res = CliRunner().invoke(main, ["align", *flags], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    evidence = json.loads((tmp_path / "o.evidence.json").read_text())
    new = evidence["new_hash"]
    assert evidence["adopted"] and new != old and (tmp_path / "o.yaml").exists()
    assert f"promoted supported@{new} to production (align decision 1: adopted" in " ".join(res.output.split())
    with Store(path) as st:
        [d] = st.decisions("supported")
        assert st.production_key("supported") == d.to_key
        assert st.metric_version("supported").spec_hash == new
        assert st.promotions("supported")[-1].note.startswith("align decision 1: adopted")  # type: ignore[union-attr]
    # The next align aligns the production version, now the adopted one; nothing beats it, nothing is promoted.
    again = CliRunner().invoke(main, ["align", *flags], catch_exceptions=False)
    assert again.exit_code == 0 and f"nothing promoted: supported@{new} stays production" in again.output


def test_the_test_part_s_accuracy_confusion_and_per_label_p_r_stand_beside_the_objective(
    llm: Any, tmp_path: Path
) -> None:
    """Beside the objective: each version's accuracy (scikit-learn's, equal to the objective `accuracy` as the
    agreement stage computes it), its confusion (rows: people's labels on the test part) and per-label P/R; the
    few-shot winner is right on every test unit. The terminal and the page show them."""
    llm.script(rules(N))
    path = tmp_path / "s.sqlite"
    sc.labelled_store(path, llm.base_url, N)
    result = _align(llm, path, 3, objective="accuracy")
    d = result.decision.difference
    assert d is not None and result.adopted
    current, winner = result.decision.tables
    assert (current.version, winner.version) == ("current", "winner")
    assert current.accuracy == pytest.approx(d.old) and winner.accuracy == pytest.approx(d.new) == 1.0
    truth = {f"r{i}": sc.truth(i) for i in range(N)}
    people = [truth[k] for k in result.split.test_units]
    for t in (current, winner):
        assert t.n == len(people) and [sum(row) for row in t.confusion] == [people.count(x) for x in t.labels]
        assert sum(t.confusion[i][i] for i in range(len(t.labels))) == round(t.accuracy * t.n)
    assert all(winner.precision[x] == winner.recall[x] == 1.0 for x in winner.labels if x in people)
    res = CliRunner().invoke(
        main,
        ["align", "--store", str(path), "--spec", "supported", "--judge", "openai:scripted-judge", "--base-url",
         llm.base_url, "--folds", "2", "--rounds", "1", "--rewrites", "0", "--shots", "1", "--no-label-order",
         "--seed", "3", "--objective", "accuracy", "--out", str(tmp_path / "o.yaml"), "--quiet"],
    )  # fmt: skip
    assert res.exit_code == 0 and f"winner on {winner.n} test units: accuracy 1.000" in res.output, res.output
    page = (tmp_path / "supported.align.html").read_text()
    assert "label ↓ / judge" in page and "<th>invalid</th>" in page and "winner on" in page

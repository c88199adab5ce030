"""The loop's state in the store (greval/store/versions.py): production versions, experiment runs kept apart by
construction — an align killed anywhere, or finished, changes nothing a reader reads by default."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.annotation.push import candidates, spec_and_judge
from greval.cli import main
from greval.dataset.records import Record
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import Spec, parse_spec
from greval.store.results import figures, item_rows, load_results
from greval.store.store import Store
from tests.align import scripted as sc

ROOT = Path(__file__).resolve().parents[1]
N = 40


def _cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return res.exit_code, res.output


def readers(store: Path, out: Path) -> dict[str, Any]:
    """What every default reader answers on ``store``: the gate, agreement, the report, exports and what a push
    would send (its version, judge and units), each on a copy of the store (a reader never changes it) made in
    ``out`` (emptied first: every answer names the same paths)."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    copy = out / "store.sqlite"
    with sqlite3.connect(store) as src, sqlite3.connect(copy) as dst:  # a consistent copy of a store in use
        src.backup(dst)
    s = str(copy)
    found: dict[str, Any] = {}
    found["gate"] = _cli("gate", "--store", s, "--spec", "supported", "--min", "score>=0.6", "--min", "kappa>=0.3")
    code, text = _cli("agreement", "--store", s, "--spec", "supported", "--json", str(out / "a.json"))
    found["agreement"] = (code, text, (out / "a.json").read_text())
    code, text = _cli("report", "--store", s, "-o", str(out / "report"))
    found["report"] = (code, (out / "report" / "report.json").read_text(), (out / "report" / "report.md").read_text())
    for spec in ("supported", None):
        name = out / f"export-{spec}.jsonl"
        code, text = _cli("results", "export", "--store", s, "-o", str(name), *(["--spec", spec] if spec else []))
        found[f"export {spec}"] = (code, text.replace(str(out), "OUT"), name.read_text())
    with Store(copy) as st:
        key, spec_obj, judge = spec_and_judge(st, "supported")
        found["annotate"] = (key, spec_obj.hash, judge, [repr(c) for c in candidates(st, key, judge.key)])
        found["figures"] = [f.model_dump_json() for f in figures(st)]
        found["items"] = len(item_rows(st))
    return found


def _align_cmd(store: Path, base_url: str, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "greval",
        "align",
        "--store",
        str(store),
        "--spec",
        "supported",
        "--judge",
        "openai:scripted-judge",
        "--base-url",
        base_url,
        "--folds",
        "3",
        "--quiet",
        "-c",
        "2",
        "--out",
        str(out),
    ]


@pytest.mark.slow
def test_align_killed_anywhere_or_finished_changes_nothing_a_reader_reads(llm: Any, tmp_path: Path) -> None:
    """SIGKILL at random points of an align (its candidates, its optimizer's questions), then a whole align that
    adopts a candidate into its file: the gate, agreement, report, exports and a push read exactly what they
    read before, byte for byte."""
    llm.script(sc.rules(N))
    store = tmp_path / "s.sqlite"
    sc.labelled_store(store, llm.base_url, N)
    before = readers(store, tmp_path / "readers")
    assert before["gate"][0] == 1 and "gate failed" in before["gate"][1]  # the judge is at chance: the gate fails
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    llm.configure(latency=0.02)
    rng = random.Random(7)
    for point in range(3):
        calls = llm.stats()["total"]
        proc = subprocess.Popen(_align_cmd(store, llm.base_url, tmp_path / f"k{point}.yaml"), env=env)
        wait = calls + rng.randint(5, 120)  # the 120th call is well inside the search
        deadline = time.monotonic() + 120
        while llm.stats()["total"] < wait and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert readers(store, tmp_path / "readers") == before, f"after the kill at call {wait - calls}"
    llm.configure(latency=0.0)
    done = subprocess.run(_align_cmd(store, llm.base_url, tmp_path / "done.yaml"), env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "done.yaml").exists()  # a candidate was adopted into its file, not into the store
    assert readers(store, tmp_path / "readers") == before
    with Store(store) as st:  # the experiments are kept, named by what they tried
        kinds = {(r["kind"], r["purpose"]) for r in st.runs()}
        assert ("experiment", "align candidate") in kinds and ("experiment", "align optimizer") in kinds
        assert len(st.experiment_keys()) > 1


def _spec(steps: str) -> Spec:
    base = sc.spec().model_dump(mode="json", exclude_none=True)
    spec = parse_spec({**base, "steps": [steps, "Decide."]})
    assert isinstance(spec, Spec)
    return spec


def test_the_first_run_sets_production_and_an_edited_spec_is_promoted_only_when_asked(llm: Any, tmp_path: Path) -> None:
    llm.script(sc.rules(8))
    records = sc.records(8)
    v1, v2 = _spec("Read it."), _spec("Read it twice.")
    cfg = sc.judge(llm.base_url)
    with Store(tmp_path / "s.sqlite") as st:
        run([v1], records, st, cfg)
        assert st.metric_version("supported").spec_hash == v1.hash
        summary = run([v2], records, st, cfg)  # an edited spec file, run: production stays
        assert any("production version stays" in n and f"supported@{v2.hash}" in n for n in summary.notes)
        production = st.metric_version("supported")
        assert (production.spec_hash, production.production) == (v1.hash, True)
        assert {f.spec_hash for f in figures(st)} == {v1.hash}
        assert {f.spec_hash for f in figures(st, all_versions=True)} == {v1.hash, v2.hash}
        named = st.metric_version(f"supported@{v2.hash[:8]}")
        assert (named.spec_hash, named.production, named.named) == (v2.hash, False, True)
        summary = run([v2], records, st, cfg, options=RunOptions(promote=True))  # now asked: promoted, no call
        assert summary.calls == 0
        assert any(f"production version is now {v2.hash}" in n for n in summary.notes)
        assert st.metric_version("supported").spec_hash == v2.hash
        st.promote("supported", st.metric_version(f"supported@{v1.hash}").spec_key, "promote", note="roll back")
        assert [(p.spec_hash, p.source) for p in st.promotions("supported")] == [
            (v1.hash, "first run"),
            (v2.hash, "run"),
            (v1.hash, "promote"),
        ]


def test_an_experiment_on_new_records_under_the_production_version_stays_out_of_every_reader(
    llm: Any, tmp_path: Path
) -> None:
    """A side run of the production version itself on records no run judged: its verdicts are stored (a later
    run pays nothing for them) but no reader sees them, nor their record ids — until a run reuses them."""
    llm.script(sc.rules(12))
    records = sc.records(12)
    cfg = sc.judge(llm.base_url)
    path = tmp_path / "s.sqlite"
    with Store(path) as st:
        run([sc.spec()], records[:6], st, cfg)

        def read() -> Any:
            key, _, judge = spec_and_judge(st, "supported")
            pushed = [repr(c) for c in candidates(st, key, judge.key)]
            return load_results(st).to_json(), [f.model_dump_json() for f in figures(st)], pushed

        before = read()
        calls = llm.stats()["total"]
        side = run([sc.spec()], records, st, cfg, options=RunOptions(experiment="side run"))
        assert llm.stats()["total"] - calls == 6 and side.metrics[0].records == 12  # its own figures: all 12
        assert read() == before
        assert {r.id for r in st.records()} == {r.id for r in records[:6]}
        assert st.metric_version("supported").production  # the experiment changed no production version
        calls = llm.stats()["total"]
        again = run([sc.spec()], records, st, cfg)  # a run of all 12: reuses the side run's 6, pays nothing
        assert llm.stats()["total"] == calls and again.metrics[0].records == 12
        assert len(load_results(st)) == 12 and not st.has_hidden()


def test_a_metric_name_misspelt_gets_did_you_mean(llm: Any, tmp_path: Path) -> None:
    llm.script(sc.rules(3))
    path = tmp_path / "s.sqlite"
    with Store(path) as st:
        run([sc.spec()], sc.records(3), st, sc.judge(llm.base_url))
    code, text = _cli("gate", "--store", str(path), "--spec", "suported", "--min", "score>=0.5")
    assert code == 2 and "no metric 'suported'" in text and "did you mean 'supported'?" in text
    assert len([line for line in text.splitlines() if line.strip()]) == 1


def test_a_store_migrated_from_schema_6_keeps_what_readers_read_and_marks_align_runs(tmp_path: Path) -> None:
    """An older store where an align was killed (a candidate declared last, its run 'running'): after the
    migration the metric's production version is the one a run judged, and align's runs are experiments."""
    path = tmp_path / "s.sqlite"
    spec, cand = _spec("Read it."), _spec("Read it, then answer.")
    recs = [Record.from_mapping({"id": "a", "question": "q", "answer": "a"})]
    with Store(path) as st:
        st.put_specs([spec], {"supported": "k1"})
        st.put_specs([cand], {"supported": "k2"})
        r1 = st.start_run("data.jsonl", "j", ["supported"], {})
        r2 = st.start_run("align supported@x", "j", ["supported"], {})
        st.finish_run(r1, "finished", {"metrics": [{"spec": "supported", "spec_key": "k1"}]})
        st.link_run(r1, recs)
    db = sqlite3.connect(path)
    with db:
        db.execute("DELETE FROM promotions")
        db.execute("UPDATE specs SET experiment=0")
        db.execute("UPDATE runs SET kind=NULL, purpose=NULL")
        db.execute("UPDATE meta SET value='6' WHERE key='schema_version'")
        for table, col in (("runs", "kind"), ("runs", "purpose"), ("runs", "dataset_name"), ("specs", "experiment")):
            db.execute(f"ALTER TABLE {table} DROP COLUMN {col}")
        db.execute("DROP TABLE promotions")
        db.execute("DROP TABLE experiment_verdicts")
    db.close()
    with Store(path) as st:
        assert st.metric_version("supported").spec_key == "k1"
        kinds = {r["run_id"]: r["kind"] for r in st.runs()}
        assert kinds == {r1: None, r2: "experiment"}
        assert st.promotions("supported")[0].source == "migration"


def test_readers_name_the_version_they_read(llm: Any, tmp_path: Path) -> None:
    llm.script(sc.rules(N))
    path = tmp_path / "s.sqlite"
    sc.labelled_store(path, llm.base_url, N)
    with Store(path) as st:
        ref = st.metric_version("supported").ref
    code, text = _cli("gate", "--store", str(path), "--spec", "supported", "--min", "score>=0.1")
    assert f"{ref} (production)" in " ".join(text.split()), text
    code, text = _cli("agreement", "--store", str(path), "--spec", "supported", "--bootstrap", "50")
    assert code == 0 and f"{ref} (production)" in " ".join(text.split()), text
    code, text = _cli("results", "export", "--store", str(path), "-o", str(tmp_path / "x.csv"), "--spec", "supported")
    assert code == 0 and f"{ref} (production)" in " ".join(text.split()), text


def test_the_command_line_promotes_lists_and_runs_experiments(llm: Any, tmp_path: Path) -> None:
    """greval run --promote / --experiment and greval spec versions / promote, end to end on the command line."""
    import yaml

    llm.script(sc.rules(6))
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in sc.records(6)))
    v1, v2 = tmp_path / "v1.yaml", tmp_path / "v2.yaml"
    v1.write_text(yaml.safe_dump(_spec("Read it.").model_dump(mode="json", exclude_none=True)))
    v2.write_text(yaml.safe_dump(_spec("Read it twice.").model_dump(mode="json", exclude_none=True)))
    store = str(tmp_path / "s.sqlite")
    judge = ["--judge", "openai:scripted-judge", "--base-url", llm.base_url, "--store", store, "--quiet"]
    assert _cli("run", str(data), "-s", str(v1), *judge)[0] == 0
    code, text = _cli("run", str(data), "-s", str(v2), *judge)
    assert code == 0 and "production version stays" in " ".join(text.split())
    code, text = _cli("run", str(data), "-s", str(v2), *judge, "--experiment", "side")
    assert code == 0
    with Store(store) as st:
        h1, h2 = (st.metric_version("supported").spec_hash, _spec("Read it twice.").hash)
        assert {r["kind"] for r in st.runs()} == {"run", "experiment"}
    code, text = _cli("spec", "versions", "supported", "--store", store)
    assert code == 0 and h1 in text and h2 in text and "production" in text
    code, text = _cli("spec", "promote", f"supported@{h2[:8]}", "--store", store, "--note", "better steps")
    assert code == 0 and f"production version is now {h2}" in " ".join(text.split())
    with Store(store) as st:
        assert st.metric_version("supported").spec_hash == h2
        assert st.promotions("supported")[-1].note == "better steps"
    code, text = _cli("run", str(data), "-s", str(v1), *judge, "--promote")
    assert code == 0 and f"production version is now {h1}" in " ".join(text.split())
    code, text = _cli("run", str(data), "-s", str(v1), *judge, "--promote", "--experiment", "x")
    assert code == 2 and "never changes a production version" in text


def test_results_runs_says_which_runs_are_experiments(llm: Any, tmp_path: Path) -> None:
    llm.script(sc.rules(3))
    cfg = sc.judge(llm.base_url)
    with Store(tmp_path / "s.sqlite") as st:
        run([sc.spec()], sc.records(3), st, cfg, options=RunOptions(dataset_name="week 1"))
        run([sc.spec()], sc.records(3), st, cfg, options=RunOptions(experiment="judge gpt-4o"))
    code, text = _cli("results", "runs", "--store", str(tmp_path / "s.sqlite"))
    flat = " ".join(text.split())
    assert code == 0 and "experiment: judge gpt-4o" in flat and "(week 1)" in flat
    assert flat.count("experiment:") == 1

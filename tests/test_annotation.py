"""Human review in Argilla end to end: spec -> dataset, push with suggestions, two annotators, pull,
selection strategies with recorded probabilities, import-labels, and a push interrupted by a killed server.

Real argilla-server 2.8.0 (embedded, one per module), real argilla SDK, real verdicts from the local
OpenAI-compatible test server.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from greval.annotation import dataset as ds
from greval.annotation import server
from greval.annotation.argilla import Connection, connect
from greval.annotation.labels_import import import_labels
from greval.annotation.push import push, selection_weights
from greval.annotation.selection import Unit, select
from greval.dataset.records import Record
from greval.errors import UserError
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import CategoricalScale, Spec, parse_spec, resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY

import greval.cli.annotate_sync  # noqa: F401  (attaches push / pull / import-labels)  # isort: skip

rg = pytest.importorskip("argilla")

pytestmark = [pytest.mark.slow, pytest.mark.argilla]

RATING_SPEC: dict[str, Any] = {
    "name": "answer_rating",
    "description": "How good the answer is overall.",
    "steps": ["Read the question.", "Rate the answer."],
    "inputs": ["question", "answer"],
    "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
}


def rag_records(n: int) -> list[Record]:
    return [
        Record.from_mapping(
            {
                "id": f"r{i}",
                "question": f"Question number {i}?",
                "expected_answer": f"Expected {i}.",
                "answer": f"Answer {i}.",
                "chunks": [f"chunk {i}.{k}" for k in range(3)],
                "triples": [[f"s{i}", "p", f"o{k}"] for k in range(2)],
                "system": "A" if i % 2 else "B",
            }
        )
        for i in range(n)
    ]


@dataclass
class Env:
    info: server.ServerInfo
    store_path: Path
    tmp: Path
    specs: dict[str, Spec]
    users: dict[str, dict[str, str]]

    def cli(self, *args: str, ok: bool = True) -> Any:
        """``greval annotate ARGS`` through the main CLI (which turns UserErrors into one line, exit 2)."""
        from greval.cli import main

        env = {"ARGILLA_API_URL": self.info.url, "ARGILLA_API_KEY": self.info.api_key}
        result = CliRunner().invoke(main, ["annotate", *args], env=env)
        if ok:
            assert result.exit_code == 0, (result.output, result.exception)
        return result

    def client(self, api_key: str | None = None) -> Any:
        return rg.Argilla(api_url=self.info.url, api_key=api_key or self.info.api_key)

    def http(self, api_key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.info.url, headers={"X-Argilla-Api-Key": api_key or self.info.api_key}, timeout=30
        )

    def conn(self) -> Connection:
        return connect(self.info.url, self.info.api_key, workspace=self.info.workspace)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, openai_server: OpenAIServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("annotation")
    specs = {s.name: s for s in resolve_specs(["answer_alignment", "chunk_evaluation"]) if isinstance(s, Spec)}
    rating = parse_spec(RATING_SPEC)
    assert isinstance(rating, Spec)
    specs["answer_rating"] = rating
    store_path = tmp / "store.sqlite"
    openai_server.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        cfg = JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url, timeout=10)
        with Store(store_path) as st:
            summary = run(list(specs.values()), rag_records(12), st, cfg)
            assert summary.failed == 0
            # Distinct confidences (a 1-sample judge has none): r0 least confident ... r11 most.
            for i in range(12):
                st.db.execute(
                    "UPDATE verdicts SET confidence=? WHERE record_id=? AND spec_name='answer_alignment'",
                    (round(0.3 + i * 0.05, 2), f"r{i}"),
                )
    with server.running_server(data=tmp / "argilla") as info:
        yield Env(info=info, store_path=store_path, tmp=tmp, specs=specs, users={})


def _records(env: Env, name: str) -> list[Any]:
    dataset = env.client().datasets(name, workspace=env.info.workspace)
    assert dataset is not None
    return list(dataset.records(with_suggestions=True, with_responses=True))


def _verdicts(env: Env, spec: str) -> list[dict[str, Any]]:
    with Store(env.store_path) as st:
        return st.query("SELECT * FROM verdicts WHERE spec_name=? AND status='ok'", (spec,))


def _labels(env: Env, spec: str) -> list[dict[str, Any]]:
    with Store(env.store_path) as st:
        return st.query("SELECT * FROM human_labels WHERE spec_name=? ORDER BY record_id, annotator", (spec,))


# ------------------------------------------------------------------------------------- settings
def test_settings_follow_each_spec_kind(env: Env) -> None:
    cat = env.specs["answer_alignment"]
    assert isinstance(cat.scale, CategoricalScale)
    s = ds.build_settings(cat, env.client(), annotators_per_record=2)
    q = s.questions[ds.QUESTION]
    assert isinstance(q, rg.LabelQuestion) and q.labels == cat.scale.names
    assert all(lab.description in (q.description or "") for lab in cat.scale.labels)
    assert all(step in (s.guidelines or "") for step in cat.steps) and cat.description.strip() in s.guidelines
    assert s.distribution.min_submitted == 2
    assert [f.name for f in s.fields][:3] == ["question", "expected_answer", "answer"]
    assert ds.REASON_FIELD in [f.name for f in s.fields]

    val = env.specs["answer_rating"]
    rq = ds.build_settings(val, env.client()).questions[ds.QUESTION]
    assert isinstance(rq, rg.RatingQuestion) and rq.values == [1, 2, 3, 4, 5]

    many = env.specs["chunk_evaluation"]
    names = [f.name for f in ds.build_settings(many, env.client(), blind=True).fields]
    assert names[0] == ds.ITEM_FIELD and "chunks" not in names and ds.REASON_FIELD not in names

    too_wide = parse_spec(
        {**RATING_SPEC, "scale": {"kind": "value", "min": 0, "max": 20, "ranges": {"0-10": "low", "11-20": "high"}}}
    )
    assert isinstance(too_wide, Spec)
    with pytest.raises(ds.ScaleDoesNotFit, match=r"value scale 0-20 does not fit an Argilla rating"):
        ds.build_settings(too_wide, env.client())


# ----------------------------------------------------------------------------------------- push
def test_push_categorical_with_suggestions_and_metadata(env: Env) -> None:
    spec = env.specs["answer_alignment"]
    out = env.cli("push", "--store", str(env.store_path), "--spec", spec.name, "--annotators-per-record", "2").output
    assert "Pushed 12 of 12 items" in out and env.info.api_key not in out
    dataset = env.client().datasets(spec.name, workspace=env.info.workspace)
    assert dataset.settings.distribution.min_submitted == 2
    assert dataset.settings.questions[ds.QUESTION].labels == spec.scale.names  # type: ignore[union-attr]
    verdicts = {v["record_id"]: v for v in _verdicts(env, spec.name)}
    recs = _records(env, spec.name)
    assert len(recs) == 12
    for rec in recs:
        meta = dict(rec.metadata)
        v = verdicts[meta["record_id"]]
        assert rec.id == ds.argilla_id(spec.name, v["record_hash"], "")
        sug = rec.suggestions[ds.QUESTION]
        assert sug.value == v["label"] and sug.agent == f"openai:judge-test/{spec.hash}"
        assert sug.score == pytest.approx(v["confidence"])
        assert meta["spec_name"] == spec.name and meta["spec_hash"] == spec.hash and meta["item_id"] == "-"
        assert meta["judge"] == "openai:judge-test" and meta["judge_model"] == "judge-test"
        assert meta["system"] in ("A", "B") and meta["judge_verdict"] == v["label"]
        assert rec.fields[ds.REASON_FIELD] == v["reason"] and rec.fields["question"].startswith("Question number")


def test_push_value_and_many_specs(env: Env) -> None:
    env.cli("push", "--store", str(env.store_path), "--spec", "answer_rating")
    val = _records(env, "answer_rating")
    values = {v["record_id"]: v["value"] for v in _verdicts(env, "answer_rating")}
    assert len(val) == 12
    assert {dict(r.metadata)["record_id"]: r.suggestions[ds.QUESTION].value for r in val} == values

    env.cli("push", "--store", str(env.store_path), "--spec", "chunk_evaluation", "--blind")
    many = _records(env, "chunk_evaluation")
    assert len(many) == len(_verdicts(env, "chunk_evaluation")) == 36
    r = next(r for r in many if dict(r.metadata)["record_id"] == "r3" and dict(r.metadata)["item_id"] == "c2")
    assert r.fields[ds.ITEM_FIELD] == "**Chunk c2**\n\nchunk 3.1"
    assert r.fields["question"] == "Question number 3?"
    assert len(list(r.suggestions)) == 0 and ds.REASON_FIELD not in r.fields  # blind: nothing to anchor on


# ------------------------------------------------------------------------------- two annotators
def _user(env: Env, name: str) -> dict[str, str]:
    if name not in env.users:
        client = env.client()
        user = rg.User(username=name, password="annotator-pass-123", role="annotator", client=client).create()
        client.workspaces(env.info.workspace).add_user(user)
        with env.http() as http:
            key = http.get(f"/api/v1/users/{user.id}").json()["api_key"]
        env.users[name] = {"id": str(user.id), "api_key": key}
    return env.users[name]


def _server_ids(env: Env, name: str) -> dict[str, str]:
    """record id (greval's) -> Argilla's record uuid."""
    return {dict(r.metadata)["record_id"]: str(r._server_id) for r in _records(env, name)}


def _respond(env: Env, user: str, record_uuid: str, status: str, values: dict[str, Any]) -> str:
    with env.http(_user(env, user)["api_key"]) as http:
        resp = http.post(f"/api/v1/records/{record_uuid}/responses", json={"status": status, "values": values})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def test_two_annotators_pull_repull_and_change(env: Env) -> None:
    spec = env.specs["answer_alignment"]
    ids = _server_ids(env, spec.name)
    a = {
        f"r{i}": _respond(env, "alice", ids[f"r{i}"], "submitted", {"verdict": {"value": "Correct"}}) for i in range(4)
    }
    _respond(
        env,
        "bob",
        ids["r0"],
        "submitted",
        {"verdict": {"value": "Incorrect"}, "comment": {"value": "misses the point"}},
    )
    _respond(env, "bob", ids["r1"], "discarded", {"verdict": {"value": "Correct"}})
    out = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name).output
    assert "5 submitted, 1 discarded" in out and "alice" in out and "bob" in out
    rows = _labels(env, spec.name)
    sub = [(r["record_id"], r["annotator"], r["label"]) for r in rows if r["status"] == "submitted"]
    assert sorted(sub) == sorted([(f"r{i}", "alice", "Correct") for i in range(4)] + [("r0", "bob", "Incorrect")])
    bob0 = next(r for r in rows if r["annotator"] == "bob" and r["record_id"] == "r0")
    assert bob0["comment"] == "misses the point" and bob0["source"] == "argilla" and bob0["answered_at"] > 0
    hashes = {v["record_id"]: v["record_hash"] for v in _verdicts(env, spec.name)}
    assert bob0["record_hash"] == hashes["r0"] and bob0["item_id"] == "" and bob0["spec_hash"] == spec.hash

    again = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name).output
    assert "(0 new or changed" in again

    def strip(rs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "updated_at"} for r in rs]

    assert strip(_labels(env, spec.name)) == strip(rows)  # idempotent: same rows, same answer times

    with env.http(_user(env, "alice")["api_key"]) as http:
        resp = http.put(
            f"/api/v1/responses/{a['r2']}", json={"status": "submitted", "values": {"verdict": {"value": "Incorrect"}}}
        )
        assert resp.status_code == 200, resp.text
    changed = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name).output
    assert "(1 new or changed" in changed
    after = {(r["record_id"], r["annotator"]): r["label"] for r in _labels(env, spec.name)}
    assert after[("r2", "alice")] == "Incorrect" and len(after) == len(rows)


def test_a_pull_counts_new_answers_as_changed_and_the_store_counts_what_waits(env: Env) -> None:
    """Five first answers given in Argilla: the pull right after says 5 new or changed (it said 0: only an
    answer that had been pulled before could change), the next one 0; the store's count of what waits for a
    label (the one the quick start prints) follows: 12 pushed, 5 labelled, 7 waiting."""
    spec = env.specs["answer_alignment"]
    name = "pull-count"
    env.cli("push", "--store", str(env.store_path), "--spec", spec.name, "--dataset", name)
    with Store(env.store_path) as st:
        assert st.review_counts(spec.name, name) == (12, 0)
    ids = {dict(r.metadata)["record_id"]: str(r._server_id) for r in _records(env, name)}
    for i in range(5):
        _respond(env, "dora", ids[f"r{i}"], "submitted", {"verdict": {"value": "Correct"}})
    out = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name, "--dataset", name).output
    assert "(5 new or changed since the last pull of 'pull-count')" in out, out
    again = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name, "--dataset", name).output
    assert "(0 new or changed" in again
    with Store(env.store_path) as st:
        counts = st.review_counts(spec.name, name)
    assert (counts.units, counts.labelled, counts.waiting) == (12, 5, 7)

    # A verdict that is an error is not pushed, and the push says so (it was left out without a word).
    flip = "UPDATE verdicts SET status=?, error_kind=? WHERE record_id='r11' AND spec_name=?"
    with Store(env.store_path) as st:
        st.db.execute(flip, ("error", "truncated", spec.name))
    try:
        res = env.cli("push", "--store", str(env.store_path), "--spec", spec.name, "--dataset", name)
    finally:
        with Store(env.store_path) as st:
            st.db.execute(flip, ("ok", None, spec.name))
    assert "Pushed 11 of 11 items" in res.output
    assert "note: 1 record not pushed: its verdict is an error (truncated); run the `greval run`" in res.output


def test_repush_updates_without_duplicates_and_keeps_answers(env: Env) -> None:
    spec = env.specs["answer_alignment"]
    before = {r.id for r in _records(env, spec.name)}
    with Store(env.store_path) as st:  # the judge changes its mind on r5: the suggestion follows
        st.db.execute("UPDATE verdicts SET label='Incorrect' WHERE record_id='r5' AND spec_name=?", (spec.name,))
    env.cli("push", "--store", str(env.store_path), "--spec", spec.name, "--annotators-per-record", "2")
    recs = _records(env, spec.name)
    assert {r.id for r in recs} == before and len(recs) == 12
    r5 = next(r for r in recs if dict(r.metadata)["record_id"] == "r5")
    assert r5.suggestions[ds.QUESTION].value == "Incorrect"
    answered = Counter(len(list(r.responses)) for r in recs)
    assert sum(k * v for k, v in answered.items()) >= 6  # alice's and bob's answers survived the re-push


# ------------------------------------------------------------------------------------- selection
def test_selection_strategies_are_honest() -> None:
    units = [Unit(f"h{i:03d}", "", "rare" if i < 3 else ("mid" if i < 20 else "common"), i / 100) for i in range(100)]
    rnd = select(units, "random", n=10, seed=1)
    assert len(rnd) == 10 and all(p.probability == pytest.approx(0.1) for p in rnd)
    assert [p.unit for p in select(units, "random", n=10, seed=1)] == [p.unit for p in rnd]

    strat = select(units, "stratified", n=12, seed=1)
    by = Counter(p.unit.stratum for p in strat)
    assert set(by) == {"rare", "mid", "common"} and by["rare"] == 3 and sum(by.values()) == 12
    sizes = Counter(u.stratum for u in units)
    for p in strat:
        assert p.probability == pytest.approx(by[p.unit.stratum] / sizes[p.unit.stratum])
    # Horvitz-Thompson: the weights add up to the population.
    assert sum(1 / p.probability for p in strat) == pytest.approx(100)

    unc = select(units, "uncertain", n=20, seed=1, control_share=0.25)
    first = [p for p in unc if p.selection == "uncertain"]
    control = [p for p in unc if p.selection == "control"]
    assert [p.unit.confidence for p in first] == sorted(u.confidence or 0 for u in units)[:15]
    assert len(control) == 5 and all(p.probability == pytest.approx(5 / 85) for p in control)
    assert all(p.probability == 1.0 for p in first)
    assert sum(1 / p.probability for p in unc) == pytest.approx(100)
    assert not {p.unit for p in first} & {p.unit for p in control}

    with pytest.raises(UserError, match=r"needs `select\.n`"):
        select(units, "random")


def test_review_rounds_grow_one_design() -> None:
    """Round after round: the doubt prefix grows by the uncertain share, earlier units stay selected (a control
    unit the prefix reaches becomes part of it), about ``batch`` units are new, every control stratum's π is
    its draws over its size, and panel disagreement outranks confidence."""
    from greval.annotation.selection import review_round

    units = [Unit(f"h{i:03d}", "", "Yes" if i % 4 else "No", i / 100) for i in range(100)]
    previous: dict[tuple[str, str], str] = {}
    for round_no in (1, 2, 3):
        picks = review_round(units, previous, 10, 0.4, seed=3, round_no=round_no)
        keys = {p.unit.key for p in picks}
        assert keys >= set(previous) and len(keys) == len(picks)
        assert len(keys - set(previous)) == 10
        uncertain = sorted(p.unit.record_hash for p in picks if p.selection == "uncertain")
        assert uncertain == [f"h{i:03d}" for i in range(6 * round_no)]
        for stratum in ("control:Yes", "control:No"):
            drawn = [p for p in picks if p.selection == stratum]
            rest = [u for u in units if u.record_hash not in uncertain and u.stratum == stratum[8:]]
            assert drawn and all(p.probability == pytest.approx(len(drawn) / len(rest)) for p in drawn)
        previous = {p.unit.key: p.selection for p in picks}
    panel = [Unit(u.record_hash, "", u.stratum, u.confidence, 1.0 if u.record_hash == "h090" else 0.0) for u in units]
    first = review_round(panel, {}, 10, 0.0, seed=3, round_no=1)
    assert first[0].unit.record_hash == "h090" and first[0].selection == "uncertain"
    with pytest.raises(UserError, match="`batch`"):  # the option's field: the CLI writes it as --batch
        review_round(units, {}, 0, 0.2, seed=3, round_no=1)


def test_doubt_order_is_one_sort_by_disagreement_confidence_and_seeded_tie() -> None:
    """The doubt order (sorted part by part, for speed) is the order of one stable sort by the tuple
    (-disagreement, confidence or 1.0, the seeded tie) over the input order: many equal confidences, unknown
    ones, panel levels, units with an item id, in a shuffled input; with a NaN confidence too."""
    import random

    from greval.annotation.selection import doubt_order

    def reference(units: list[Unit], seed: int) -> list[Unit]:
        rng = random.Random(seed)
        tie = {u.key: rng.random() for u in sorted(units, key=lambda u: u.key)}
        conf = [1.0 if u.confidence is None else u.confidence for u in units]
        order = sorted(range(len(units)), key=lambda i: (-units[i].disagreement, conf[i], tie[units[i].key]))
        return [units[i] for i in order]

    rng = random.Random(0)
    confidences = [None, 0.5, 0.75, 1.0]
    units = [
        Unit(f"h{i % 97:03d}", f"c{i // 97}", rng.choice("ab"), rng.choice([*confidences, rng.random()]), i % 3 / 2)
        for i in range(400)
    ]
    rng.shuffle(units)
    for seed in range(5):
        assert doubt_order(units, seed) == reference(units, seed)
    units[7] = Unit(units[7].record_hash, units[7].item_id, "a", float("nan"))
    assert doubt_order(units, 1) == reference(units, 1)


def test_uncertain_first_says_when_verdicts_have_no_confidence() -> None:
    """A judge asked once gives no confidence: "uncertain first" cannot see doubt there and says so."""
    from greval.annotation.push import uncertain_notes
    from greval.store.lookups import UnitVerdict

    def verdict(i: int, confidence: float | None) -> UnitVerdict:
        return UnitVerdict(f"h{i}", "", f"r{i}", "Correct", None, confidence, None)

    assert uncertain_notes([verdict(0, 0.4), verdict(1, 0.9)]) == []
    (some,) = uncertain_notes([verdict(0, 0.4), verdict(1, None), verdict(2, None)])
    assert some.startswith("2 of 3 verdicts have no confidence")
    (none,) = uncertain_notes([verdict(0, None)])
    assert none.startswith("no verdict has confidence") and "`samples`" in none and "`logprobs`" in none
    # A token confidence (one call with --logprobs) counts, and the samples' agreement rate comes first.
    tokens = UnitVerdict("h3", "", "r3", "Correct", None, None, None, token_confidence=0.55)
    assert uncertain_notes([tokens]) == [] and tokens.best_confidence == 0.55
    both = UnitVerdict("h4", "", "r4", "Correct", None, 0.67, None, token_confidence=0.55)
    assert both.best_confidence == 0.67


def test_push_records_selection_and_probabilities(env: Env) -> None:
    spec = env.specs["answer_alignment"]
    res = env.cli(
        "push",
        "--store",
        str(env.store_path),
        "--spec",
        spec.name,
        "--dataset",
        "aa-uncertain",
        "--select",
        "uncertain",
        "--n",
        "5",
        "--control-share",
        "0.4",
        "--seed",
        "3",
    )
    assert "uncertain 3" in res.output and "control 2" in res.output
    with Store(env.store_path) as st:
        push = st.query("SELECT * FROM annotation_pushes WHERE dataset='aa-uncertain'")
        assert len(push) == 1 and push[0]["status"] == "done" and push[0]["population"] == 12
        rows = st.query("SELECT * FROM annotation_selection WHERE push_id=? ORDER BY rank", (push[0]["push_id"],))
    assert [r["record_id"] for r in rows[:3]] == ["r0", "r1", "r2"]  # least confident first
    assert [r["stratum"] for r in rows] == ["uncertain"] * 3 + ["control"] * 2
    assert all(r["probability"] == pytest.approx(2 / 9) for r in rows[3:]) and all(r["pushed_at"] for r in rows)
    recs = _records(env, "aa-uncertain")
    assert len(recs) == 5
    assert {dict(r.metadata)["selection"] for r in recs} == {"uncertain", "control"}
    with Store(env.store_path) as st:
        weights = selection_weights(st, spec.name, push[0]["push_id"])
    assert sum(weights.values()) == pytest.approx(12)

    env.cli(
        "push",
        "--store",
        str(env.store_path),
        "--spec",
        spec.name,
        "--dataset",
        "aa-strat",
        "--select",
        "stratified",
        "--n",
        "6",
    )
    labels = {dict(r.metadata)["judge_verdict"] for r in _records(env, "aa-strat")}
    assert labels == {v["label"] for v in _verdicts(env, spec.name)}


# ---------------------------------------------------------------------------------------- import
def test_import_labels_round_trip(env: Env) -> None:
    spec = env.specs["answer_rating"]
    # The metric's 12 records in Argilla, as the push tests above leave them (a re-push adds none): the test
    # runs alone too.
    env.cli("push", "--store", str(env.store_path), "--spec", spec.name)
    path = env.tmp / "labels.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["rid", "score", "note"])
        w.writerows([["r1", "4", "fine"], ["r2", "2", ""], ["r3", "5", ""]])
    out = env.cli(
        "import-labels",
        str(path),
        "--store",
        str(env.store_path),
        "--spec",
        spec.name,
        "--record-id",
        "rid",
        "--label",
        "score",
        "--comment",
        "note",
        "--annotator-name",
        "carol",
        "--to-argilla",
    ).output
    assert "Imported 3 labels" in out
    imported = [r for r in _labels(env, spec.name) if r["annotator"] == "carol"]
    assert [(r["record_id"], r["value"], r["source"]) for r in imported] == [
        ("r1", 4.0, "import"),
        ("r2", 2.0, "import"),
        ("r3", 5.0, "import"),
    ]
    assert imported[0]["comment"] == "fine"

    # carol's answers are in Argilla as hers: a pull reads them back unchanged.
    pulled = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name).output
    assert "3 submitted" in pulled and "carol" in pulled and "(0 new or changed" in pulled
    recs = _records(env, spec.name)
    assert len(recs) == 12  # the imported units were updated in place, not duplicated

    bad = env.tmp / "bad.jsonl"
    bad.write_text(
        "\n".join(json.dumps({"rid": r, "score": s}) for r, s in [("r1", 3), ("nope", 2), ("zzz", 1)]) + "\n"
    )
    res = env.cli(
        "import-labels",
        str(bad),
        "--store",
        str(env.store_path),
        "--spec",
        spec.name,
        "--record-id",
        "rid",
        "--label",
        "score",
        "--annotator-name",
        "dan",
        ok=False,
    )
    assert res.exit_code == 2 and "name records not in" in res.output
    with pytest.raises(UserError, match=r"2 row\(s\) name records not in .*: nope, zzz"), Store(env.store_path) as st:
        import_labels(st, bad, spec.name, record_id_col="rid", label_col="score", annotator_name="dan")
    bad.write_text(json.dumps({"rid": "r1", "score": 9}) + "\n")
    with (
        pytest.raises(UserError, match=r"1 label\(s\) not on the scale .*integers 1-5\): 9"),
        Store(env.store_path) as st,
    ):
        import_labels(st, bad, spec.name, record_id_col="rid", label_col="score", annotator_name="dan")


def test_user_errors_are_one_line(env: Env) -> None:
    from greval.cli import main

    runner = CliRunner()
    envs = {"ARGILLA_API_URL": env.info.url, "ARGILLA_API_KEY": env.info.api_key}
    res = runner.invoke(main, ["annotate", "push", "--store", str(env.store_path), "--spec", "nope"], env=envs)
    assert res.exit_code == 2 and "no metric 'nope'" in res.output and len(res.output.strip().splitlines()) == 1
    res = runner.invoke(
        main,
        ["annotate", "push", "--store", str(env.store_path), "--spec", "answer_alignment", "--select", "random"],
        env=envs,
    )
    assert res.exit_code == 2 and "needs --n" in res.output
    res = runner.invoke(
        main,
        ["annotate", "pull", "--store", str(env.store_path), "--spec", "answer_alignment"],
        env={"ARGILLA_API_URL": env.info.url, "ARGILLA_API_KEY": "wrong-key"},
    )
    assert res.exit_code == 2 and "refused the API key" in res.output and "wrong-key" not in res.output
    # No key ever lands in the store (pushes record the URL, never the key).
    for f in env.store_path.parent.glob(env.store_path.name + "*"):
        assert env.info.api_key.encode() not in f.read_bytes()


# ---------------------------------------------------------------------------- killed mid-push
def test_push_after_killing_the_server_loses_nothing(env: Env) -> None:
    """The server dies after the first batch; after a restart the same command finishes the job."""
    spec = env.specs["chunk_evaluation"]
    port = int(env.info.url.rsplit(":", 1)[1])
    calls = {"n": 0}

    def kill_after_first(_: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            os.killpg(env.info.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(env.info.pid, 0)
            for _ in range(100):
                if not server.healthy(env.info.url, timeout=0.2):
                    break
                time.sleep(0.05)

    with Store(env.store_path) as st:
        conn = env.conn()
        with pytest.raises(UserError, match=r"stopped answering after 8 of 36 records.*re-run the same command"):
            push(st, conn, spec.name, dataset="ce-killed", batch_size=8, on_progress=kill_after_first)
        conn.close()
        status = st.query("SELECT status, pushed FROM annotation_pushes WHERE dataset='ce-killed'")
        assert status == [{"status": "running", "pushed": 8}]
    info = server.start(port, env.info.data_dir)
    env.info = info
    with Store(env.store_path) as st:
        conn = env.conn()
        res = push(st, conn, spec.name, dataset="ce-killed", batch_size=8)
        conn.close()
        assert res.pushed == 36
        status = st.query("SELECT status, pushed, attempts FROM annotation_pushes WHERE dataset='ce-killed'")
        assert status == [{"status": "done", "pushed": 36, "attempts": 2}]
    recs = _records(env, "ce-killed")
    assert len(recs) == 36 and len({r.id for r in recs}) == 36
    # Everything pushed before the crash is still there (SQLite is the source of truth).
    assert len(_records(env, spec.name)) == 36 and len(_records(env, "answer_alignment")) == 12


# ------------------------------------------------------------------- datasets and ids (schema 2)
def _progress(env: Env, name: str) -> dict[str, Any]:
    dataset = env.client().datasets(name, workspace=env.info.workspace)
    assert dataset is not None
    with env.http() as http:
        resp = http.get(f"/api/v1/datasets/{dataset.id}/progress")
        assert resp.status_code == 200, resp.text
        return dict(resp.json())


def _min_submitted(env: Env, name: str) -> int:
    dataset = env.client().datasets(name, workspace=env.info.workspace)
    assert dataset is not None
    with env.http() as http:
        return int(http.get(f"/api/v1/datasets/{dataset.id}").json()["distribution"]["min_submitted"])


def test_pull_two_datasets_of_one_spec_keeps_both(env: Env) -> None:
    """One person labels the same items in a blind copy and in the copy with suggestions, differently:
    both answers are kept, under their dataset, and a re-pull of either reports nothing changed."""
    spec = env.specs["answer_alignment"]
    store = str(env.store_path)
    env.cli("push", "--store", store, "--spec", spec.name, "--dataset", "aa-two-sugg")
    env.cli("push", "--store", store, "--spec", spec.name, "--dataset", "aa-two-blind", "--blind")
    sugg, blind = _server_ids(env, "aa-two-sugg"), _server_ids(env, "aa-two-blind")
    for rid in ("r0", "r1"):
        _respond(env, "erin", sugg[rid], "submitted", {"verdict": {"value": "Correct"}})
        _respond(env, "erin", blind[rid], "submitted", {"verdict": {"value": "Incorrect"}})
    first = [
        env.cli("pull", "--store", store, "--spec", spec.name, "--dataset", d).output
        for d in ("aa-two-sugg", "aa-two-blind")
    ]
    assert all("2 submitted" in out for out in first)
    again = [
        env.cli("pull", "--store", store, "--spec", spec.name, "--dataset", d).output
        for d in ("aa-two-sugg", "aa-two-blind")
    ]
    assert all("(0 new or changed" in out for out in again), again
    erin = {(r["dataset"], r["record_id"]): r["label"] for r in _labels(env, spec.name) if r["annotator"] == "erin"}
    assert erin == {
        ("aa-two-sugg", "r0"): "Correct",
        ("aa-two-sugg", "r1"): "Correct",
        ("aa-two-blind", "r0"): "Incorrect",
        ("aa-two-blind", "r1"): "Incorrect",
    }
    # The labels pulled earlier from the default dataset are still there, untouched and under its name.
    assert {r["dataset"] for r in _labels(env, spec.name) if r["annotator"] in ("alice", "bob")} == {spec.name}


def test_agreement_cli_chooses_label_datasets(env: Env, tmp_path: Path) -> None:
    """erin answered r0 and r1 in two datasets: agreement asks which; --dataset picks, and says what it used."""
    from greval.cli import main

    base = ["agreement", "--store", str(env.store_path), "--spec", "answer_alignment", "--bootstrap", "0"]
    res = CliRunner().invoke(main, base)
    assert res.exit_code == 2 and "--dataset NAME" in res.output and "aa-two-blind" in res.output, res.output
    out = tmp_path / "blind.json"
    res = CliRunner().invoke(main, [*base, "--dataset", "aa-two-blind", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "human labels from dataset(s) aa-two-blind" in res.output
    counts = json.loads(out.read_text())["counts"]
    assert counts["rows"] == 2 and counts["items"] == 2  # erin's two blind answers, nothing else
    both = [*base, "--dataset", "answer_alignment", "--dataset", "aa-two-sugg", "--json", str(out)]
    res = CliRunner().invoke(main, both)
    assert res.exit_code == 0, res.output
    assert "human labels from dataset(s) aa-two-sugg, answer_alignment" in res.output
    with Store(env.store_path) as st:
        n = st.query(
            "SELECT COUNT(*) AS n FROM human_labels WHERE spec_name='answer_alignment' AND status='submitted'"
            " AND dataset IN ('answer_alignment', 'aa-two-sugg')"
        )[0]["n"]
    assert json.loads(out.read_text())["counts"]["rows"] == n
    res = CliRunner().invoke(main, [*base, "--dataset", "nope"])
    assert res.exit_code == 2 and "nope" in res.output


def _dup_store(env: Env, openai_server: OpenAIServer) -> tuple[Path, dict[str, str]]:
    """A store where records "a" and "b" have identical content (one verdict) and "c" differs."""
    path = env.tmp / "dup.sqlite"
    base = {"question": "What is the capital of France?", "expected_answer": "Paris.", "answer": "Paris."}
    recs = [
        Record.from_mapping({"id": "a", **base}),
        Record.from_mapping({"id": "b", **base}),
        Record.from_mapping({"id": "c", **base, "answer": "Lyon."}),
    ]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        cfg = JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url, timeout=10)
        with Store(path) as st:
            assert run([env.specs["answer_alignment"]], recs, st, cfg).failed == 0
    return path, {r.id: r.hash for r in recs}


def test_identical_records_are_one_argilla_record_listing_every_id(env: Env, openai_server: OpenAIServer) -> None:
    path, hashes = _dup_store(env, openai_server)
    spec = env.specs["answer_alignment"]
    env.cli("push", "--store", str(path), "--spec", spec.name, "--dataset", "dup-aa")
    env.cli("push", "--store", str(path), "--spec", spec.name, "--dataset", "dup-aa")  # a re-push never duplicates
    recs = _records(env, "dup-aa")
    assert len(recs) == 2
    by_hash = {dict(r.metadata)["record_hash"]: r for r in recs}
    shared = by_hash[hashes["a"]]
    assert sorted(dict(shared.metadata)["record_id"]) == ["a", "b"]
    assert dict(by_hash[hashes["c"]].metadata)["record_id"] == "c"
    with Store(path) as st:
        sel = st.query("SELECT record_hash, record_id FROM annotation_selection WHERE record_hash=?", (hashes["a"],))
    assert sel and all(r["record_id"] in ("a", "b") for r in sel)

    _respond(env, "frank", str(shared._server_id), "submitted", {"verdict": {"value": "Acceptable"}})
    out = env.cli("pull", "--store", str(path), "--spec", spec.name, "--dataset", "dup-aa").output
    assert "Stored 1 answers as 2 labels" in out and "(1 new or changed" in out  # one answer, once
    with Store(path) as st:
        rows = st.query("SELECT dataset, record_id, record_hash, label FROM human_labels ORDER BY record_id")
    assert [(r["dataset"], r["record_id"], r["record_hash"], r["label"]) for r in rows] == [
        ("dup-aa", "a", hashes["a"], "Acceptable"),
        ("dup-aa", "b", hashes["b"], "Acceptable"),
    ]
    again = env.cli("pull", "--store", str(path), "--spec", spec.name, "--dataset", "dup-aa").output
    assert "(0 new or changed" in again


def test_import_keeps_the_id_each_row_names(env: Env, openai_server: OpenAIServer) -> None:
    """A file row for "b" is stored for "b" (not for "a", which has the same content), under dataset
    "import"; with --to-argilla under the Argilla dataset's name, which a pull then updates in place."""
    path, hashes = _dup_store(env, openai_server)
    spec = env.specs["answer_alignment"]
    with Store(path) as st:  # "c" was edited after the run: its judged version is the one labelled
        st.put_records([Record.from_mapping({"id": "c", "question": "Edited?", "answer": "x"})])
    labels = env.tmp / "dup-labels.csv"
    labels.write_text("rid,label\nb,Correct\nc,Incorrect\n")
    args = ["--store", str(path), "--spec", spec.name, "--record-id", "rid", "--label", "label"]
    out = env.cli("import-labels", str(labels), *args, "--annotator-name", "gina").output
    assert "Imported 2 labels" in out and "'import'" in out
    with Store(path) as st:
        rows = st.query(
            "SELECT dataset, record_id, record_hash, label, source FROM human_labels WHERE annotator='gina'"
            " ORDER BY record_id"
        )
    assert [tuple(r.values()) for r in rows] == [
        ("import", "b", hashes["b"], "Correct", "import"),
        ("import", "c", hashes["c"], "Incorrect", "import"),
    ]

    out = env.cli(
        "import-labels", str(labels), *args, "--annotator-name", "hana", "--to-argilla", "--dataset", "dup-imp"
    ).output
    assert "as dataset 'dup-imp'" in out
    recs = _records(env, "dup-imp")
    assert len(recs) == 2
    shared = next(r for r in recs if dict(r.metadata)["record_hash"] == hashes["b"])
    assert sorted(dict(shared.metadata)["record_id"]) == ["a", "b"]
    pulled = env.cli("pull", "--store", str(path), "--spec", spec.name, "--dataset", "dup-imp").output
    assert "(0 new or changed" in pulled
    with Store(path) as st:
        hana = st.query("SELECT dataset, record_id, label FROM human_labels WHERE annotator='hana' ORDER BY record_id")
    # One Argilla record stands for a and b, so hana's answer on it is pulled for both ids.
    assert [tuple(r.values()) for r in hana] == [
        ("dup-imp", "a", "Correct"),
        ("dup-imp", "b", "Correct"),
        ("dup-imp", "c", "Incorrect"),
    ]


def test_changing_annotators_per_record_needs_force(env: Env) -> None:
    """A different --annotators-per-record on a live dataset would recount its progress: refused with the
    numbers unless --force, which applies it and says what changed."""
    spec = env.specs["answer_rating"]
    base = ["push", "--store", str(env.store_path), "--spec", spec.name, "--dataset", "ar-dist"]
    env.cli(*base, "--annotators-per-record", "1")
    ids = _server_ids(env, "ar-dist")
    for rid in ("r0", "r1", "r2"):
        _respond(env, "ivan", ids[rid], "submitted", {"verdict": {"value": 3}})
    assert _progress(env, "ar-dist")["completed"] == 3

    res = env.cli(*base, "--annotators-per-record", "2", ok=False)
    assert res.exit_code == 2, res.output
    msg = res.output.strip()
    assert len(msg.splitlines()) == 1
    assert "needs 1 submitted answer(s) per record" in msg and "--annotators-per-record 2" in msg
    assert "3 of 12 records are completed" in msg and "--force" in msg
    assert _min_submitted(env, "ar-dist") == 1 and _progress(env, "ar-dist")["completed"] == 3

    env.cli(*base)  # no flag: the dataset keeps its setting
    assert _min_submitted(env, "ar-dist") == 1 and _progress(env, "ar-dist")["completed"] == 3

    out = env.cli(*base, "--annotators-per-record", "2", "--force").output
    assert "from 1 to 2; 3 of 12 records were completed" in out
    assert _min_submitted(env, "ar-dist") == 2
    for _ in range(100):  # argilla-server recounts the records' status in a background job
        if _progress(env, "ar-dist")["completed"] == 0:
            break
        time.sleep(0.05)
    assert _progress(env, "ar-dist")["completed"] == 0


# ------------------------------------------------------------------------------- the review loop
SUPPORTED_SPEC: dict[str, Any] = {
    "name": "answer_supported",
    "description": "Whether the answer is supported by the expected answer.",
    "steps": ["Read the expected answer.", "Check the answer against it."],
    "inputs": ["question", "expected_answer", "answer"],
    "scale": {"kind": "categorical", "labels": {"Yes": "supported", "No": "not supported"}},
}


def _review(env: Env, *args: str, ok: bool = True) -> Any:
    from greval.cli import main

    envvars = {"ARGILLA_API_URL": env.info.url, "ARGILLA_API_KEY": env.info.api_key}
    result = CliRunner().invoke(main, ["review", *args], env=envvars)
    if ok:
        assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_review_loop_end_to_end(env: Env, openai_server: OpenAIServer) -> None:
    """`greval review` against the embedded Argilla, on verdicts judged once with token log-probabilities
    (`--logprobs`; the test server answers them): round 1 pushes the most doubtful verdicts whole plus a
    stratified random control; people label through the REST API (round 1) and the SDK (round 2); `review
    status` pulls and prints the design-weighted figures (checked here against a hand-made Hájek estimate
    from the store) and a stopping advice; round 2 pushes only new items and keeps the earlier ones in the
    design; with part of round 2 unlabelled, status says so and corrects for it."""
    spec = parse_spec(SUPPORTED_SPEC)
    assert isinstance(spec, Spec)
    from greval.runner.options import RunOptions

    path = env.tmp / "review.sqlite"
    openai_server.configure(logprobs="on")  # confidence from one call: the judge's token log-probabilities
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("OPENAI_API_KEY", TEST_KEY)
            cfg = JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url, timeout=10)
            with Store(path) as st:
                summary = run([spec], rag_records(60), st, cfg, options=RunOptions(logprobs=5))
                assert summary.failed == 0
                rows = st.query("SELECT record_id, label, confidence, token_confidence FROM verdicts")
    finally:
        openai_server.configure(logprobs="null")
    judged = {r["record_id"]: r["label"] for r in rows}
    doubt = {r["record_id"]: r["token_confidence"] for r in rows}
    assert set(judged.values()) == {"Yes", "No"}
    assert all(r["confidence"] is None for r in rows) and len(set(doubt.values())) > 30

    def truth(rid: str) -> str:  # people disagree with the judge on every 3rd record
        return judged[rid] if int(rid[1:]) % 3 else ("No" if judged[rid] == "Yes" else "Yes")

    base = ["--store", str(path), "--spec", spec.name]
    first = _review(env, *base, "--batch", "20", "--control-share", "0.25").output
    assert "Round 1" in first and "20 new item(s)" in first and "answer_supported-review" in first
    ids = _server_ids(env, "answer_supported-review")
    assert len(ids) == 20
    with Store(path) as st:
        push_id, _, _ = st.latest_push_to(spec.name, "answer_supported-review", "review") or ("", "", "")
        units = st.push_units(push_id)
        rid_of = {r["record_hash"]: r["record_id"] for r in st.query("SELECT record_hash, record_id FROM verdicts")}
    uncertain = sorted(rid_of[h] for (h, _), (s, _) in units.items() if s == "uncertain")
    assert uncertain == sorted(sorted(doubt, key=lambda r: doubt[r])[:15])  # the 15 least confident, taken whole
    assert all(s.startswith("control:") and p < 1 for (s, p) in units.values() if s != "uncertain")

    for rid, uuid in ids.items():
        _respond(env, "rita", uuid, "submitted", {"verdict": {"value": truth(rid)}})
    status = _review(env, "status", *base, "--target", "kappa±0.05", "--bootstrap", "300").output
    assert "20 of 20 selected items labelled" in status and "continue: label the 40 remaining item(s)" in status

    # The weighted accuracy by hand: Σ w·[judge == human] / Σ w over the labelled units, w = 1/π.
    num = den = 0.0
    for (h, _), (_, p) in units.items():
        rid = rid_of[h]
        num += (judged[rid] == truth(rid)) / p
        den += 1 / p
    with Store(path) as st:
        from greval.flows.review import review_status

        got = review_status(st, None, spec.name, resamples=300)
    acc = got.estimate("accuracy")
    assert acc is not None and acc.weighted == pytest.approx(num / den)
    assert acc.unweighted == pytest.approx(sum(judged[r] == truth(r) for r in ids) / 20)

    second = _review(env, *base, "--batch", "20").output
    assert "Round 2" in second and "20 new item(s)" in second and "holds 40 of 60" in second
    ids2 = _server_ids(env, "answer_supported-review")
    assert len(ids2) == 40 and set(ids) <= set(ids2)  # nothing pushed twice
    with Store(path) as st:
        push_id, _, _ = st.latest_push_to(spec.name, "answer_supported-review", "review") or ("", "", "")
        units = st.push_units(push_id)
    for record in _records(env, "answer_supported-review"):  # what people see is the design as it is now
        meta = dict(record.metadata)
        stratum, p = next(v for (h, _), v in units.items() if rid_of[h] == meta["record_id"])
        assert meta["selection"] == stratum and meta["inclusion_probability"] == pytest.approx(p)
    assert "--dataset" not in second and "greval review status --store" in second
    blind = _review(env, *base, "--batch", "5", "--blind", ok=False)
    assert blind.exit_code == 2 and "--blind as before" in blind.output
    new = sorted(set(ids2) - set(ids))
    # Round 2's labels go through the Argilla SDK (the owner logs rita's answers on her behalf).
    dataset = env.client().datasets("answer_supported-review", workspace=env.info.workspace)
    rita = _user(env, "rita")["id"]
    to_log = []
    for record in dataset.records(with_suggestions=True):
        rid = dict(record.metadata)["record_id"]
        if rid in new[:10]:
            record.responses.add(rg.Response("verdict", truth(rid), user_id=rita, status="submitted"))
            to_log.append(record)
    assert len(to_log) == 10
    dataset.records.log(to_log)
    later = _review(env, "status", *base, "--target", "accuracy±0.2", "--bootstrap", "300").output
    assert "30 of 40 selected items labelled" in later and "no human label yet" in later
    assert "stop:" in later or "continue:" in later

    bad = _review(env, "status", *base, "--target", "kappa=0.05", ok=False)
    assert bad.exit_code == 2 and "FIGURE±WIDTH" in bad.output and "Traceback" not in bad.output


# ------------------------------------------------------------------------ metadata properties (issue 17)
def test_new_datasets_declare_the_filters_and_older_datasets_keep_every_property(env: Env) -> None:
    """A new dataset declares only the metadata properties reviewers filter on and keeps the rest as extra
    metadata (hidden from annotators); a dataset made before, with every value a property and no extra
    metadata allowed, is still pushed to and pulled from."""
    spec = env.specs["answer_alignment"]
    push = ["push", "--store", str(env.store_path), "--spec", spec.name, "--select", "random", "--n", "3"]
    env.cli(*push, "--dataset", "aa-props")
    client = env.client()
    new = client.datasets("aa-props", workspace=env.info.workspace)
    assert [p.name for p in new.settings.metadata] == [name for name, _, _ in ds.METADATA]
    assert new.settings.allow_extra_metadata is True
    meta = dict(next(iter(new.records)).metadata)
    assert set(meta) >= set(ds.EXTRA_METADATA) and meta["spec_hash"] == spec.hash

    old_settings = ds.build_settings(spec, client)
    for name in ds.EXTRA_METADATA:
        kind = rg.FloatMetadataProperty if name == "inclusion_probability" else rg.TermsMetadataProperty
        old_settings.metadata.add(kind(client=client, name=name, visible_for_annotators=name in {"item_id", "judge"}))
    old_settings.allow_extra_metadata = False
    rg.Dataset(name="aa-old", settings=old_settings, workspace=env.info.workspace, client=client).create()
    env.cli(*push, "--dataset", "aa-old")
    records = _records(env, "aa-old")
    assert len(records) == 3
    assert all(set(dict(r.metadata)) >= set(ds.EXTRA_METADATA) for r in records)
    pulled = env.cli("pull", "--store", str(env.store_path), "--spec", spec.name, "--dataset", "aa-old")
    assert "submitted" in pulled.output


# -------------------------------------------------------------------------------------------- conversations
CHAT_TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "Hi, I'm Ann and I eat no meat. Book a table for two on Friday."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", "function": {"name": "find_table", "arguments": '{"seats": 2}'}}],
    },
    {"role": "tool", "tool_call_id": "call_1", "name": "find_table", "content": "Green Leaf, 19:00"},
    {"role": "assistant", "content": "Booked: Green Leaf, Friday 19:00, for two."},
    {"role": "user", "content": "Do they have desserts?"},
    {"role": "assistant", "content": "Their steak is the best in town, Ann."},
]


def test_a_conversation_is_a_chat_field_and_each_assistant_turn_a_record(env: Env, openai_server: OpenAIServer) -> None:
    """A per-turn metric in the real Argilla: the conversation is a chat field (every turn a message with its role,
    its id first, tool calls written out), each assistant turn one record with the turn under review, the judge's
    label as the suggestion; an annotator's answer on a turn comes back as that turn's human label."""
    [spec] = resolve_specs(["turn_relevance"])
    assert isinstance(spec, Spec)
    path = env.tmp / "chats.sqlite"
    rec = Record.from_mapping({"id": "chat-1", "conversation": CHAT_TURNS, "system": "A"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        cfg = JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url, timeout=10)
        with Store(path) as st:
            assert run([spec], [rec], st, cfg).failed == 0
    out = env.cli("push", "--store", str(path), "--spec", spec.name).output
    assert "Pushed 3 of 3 items" in out

    dataset = env.client().datasets(spec.name, workspace=env.info.workspace)
    fields = {f.name: f for f in dataset.settings.fields}
    assert isinstance(fields["conversation"], rg.ChatField) and fields[ds.ITEM_FIELD].title == (
        "Under review: assistant turn"
    )
    assert "question" not in fields and "answer" not in fields  # a conversation metric reads neither
    assert "reading the conversation up to it" in (dataset.settings.guidelines or "")
    with env.http() as http:  # the server's own view of the field: a chat field
        got = http.get(f"/api/v1/datasets/{dataset.id}/fields").json()["items"]
    assert {f["name"]: f["settings"]["type"] for f in got}["conversation"] == "chat"

    recs = {dict(r.metadata)["item_id"]: r for r in _records(env, spec.name)}
    assert sorted(recs) == ["t2", "t4", "t6"]
    chat = recs["t4"].fields.to_dict()["conversation"]  # the SDK reads a chat field as messages
    assert chat == [
        {"role": "user", "content": "**[t1]** Hi, I'm Ann and I eat no meat. Book a table for two on Friday."},
        {"role": "assistant", "content": '**[t2]**\n\n→ tool call `find_table({"seats": 2}) [call_1]`'},
        {"role": "tool", "content": "**[t3]** Green Leaf, 19:00 *(find_table, call_1)*"},
        {"role": "assistant", "content": "**[t4]** Booked: Green Leaf, Friday 19:00, for two."},
        {"role": "user", "content": "**[t5]** Do they have desserts?"},
        {"role": "assistant", "content": "**[t6]** Their steak is the best in town, Ann."},
    ]
    assert recs["t4"].fields[ds.ITEM_FIELD] == (
        "**Assistant turn t4** (turn 4, assistant)\n\n**[t4]** Booked: Green Leaf, Friday 19:00, for two."
    )
    with Store(path) as st:
        stored = {r["item_id"]: r["label"] for r in st.query("SELECT item_id, label FROM verdicts")}
    assert {i: r.suggestions[ds.QUESTION].value for i, r in recs.items()} == stored

    answer = next(lab for lab in spec.scale.names if lab != stored["t6"])  # type: ignore[union-attr]
    _respond(env, "frank", str(recs["t6"]._server_id), "submitted", {"verdict": {"value": answer}})
    env.cli("pull", "--store", str(path), "--spec", spec.name)
    with Store(path) as st:
        labels = st.query("SELECT record_id, item_id, label FROM human_labels WHERE spec_name=?", (spec.name,))
    assert [(r["record_id"], r["item_id"], r["label"]) for r in labels] == [("chat-1", "t6", answer)]

"""Teams of reviewers (issue 43): reviewers as real Argilla users, a push with overlap assigning each record to
N of them, and each reviewer's progress read back from Argilla.

Real argilla-server 2.8.0 (embedded, one per module), real argilla SDK, real verdicts from the local
OpenAI-compatible test server. Reviewers log in with the password greval wrote to their file (as a person
would) and answer through the REST endpoints Argilla's UI uses.
"""

from __future__ import annotations

import json
import stat
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from greval.annotation import dataset as ds
from greval.annotation import server
from greval.annotation.assign import ASSIGNED, assign
from greval.annotation.errors import AnnotationError
from greval.annotation.progress import BREAK_SECONDS, median_gap
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import Spec, resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY

rg = pytest.importorskip("argilla")

SPEC = "answer_alignment"


def _records(n: int) -> list[Record]:
    return [
        Record.from_mapping(
            {"id": f"r{i}", "question": f"Question {i}?", "answer": f"Answer {i}.", "expected_answer": f"E{i}."}
        )
        for i in range(n)
    ]


@dataclass
class Env:
    info: server.ServerInfo
    store_path: Path
    tmp: Path
    spec: Spec
    keys: dict[str, str] = field(default_factory=dict)  # reviewer -> API key (read after logging in)

    def cli(self, *args: str, ok: bool = True, external: bool = False, key: str | None = None) -> Any:
        """``greval annotate ARGS`` through the main CLI; the embedded server by its data directory, or
        (``external``, or another user's ``key``) by URL and key as any other Argilla."""
        from greval.cli import main

        env = {"ARGILLA_API_URL": None, "ARGILLA_API_KEY": None, "COLUMNS": "200"}
        external = external or key is not None
        where = ["--api-url", self.info.url, "--api-key", key or self.info.api_key] if external else []
        where = where or ["--data-dir", str(self.info.data_dir)]
        result = CliRunner().invoke(main, ["annotate", *args, *where], env=env)
        if ok:
            assert result.exit_code == 0, (result.output, result.exception)
        return result

    def http(self, api_key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.info.url, headers={"X-Argilla-Api-Key": api_key or self.info.api_key}, timeout=30
        )


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, openai_server: OpenAIServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("reviewers")
    spec = next(s for s in resolve_specs([SPEC]) if isinstance(s, Spec))
    store_path = tmp / "store.sqlite"
    openai_server.reset()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        cfg = JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url, timeout=10)
        with Store(store_path) as st:
            assert run([spec], _records(12), st, cfg).failed == 0
    with server.running_server(data=tmp / "argilla") as info:
        yield Env(info=info, store_path=store_path, tmp=tmp, spec=spec)


def _passwords(env: Env, path: Path | None = None) -> dict[str, dict[str, str]]:
    path = path or env.info.data_dir / "reviewers.json"
    return dict(json.loads(path.read_text())[env.info.url])


def _login(env: Env, name: str, password: str) -> str:
    """A reviewer logs in with username and password (Argilla's /token), and reads their own API key."""
    with httpx.Client(base_url=env.info.url, timeout=30) as http:
        resp = http.post("/api/v1/token", data={"username": name, "password": password})
        assert resp.status_code == 201, resp.text
        me = http.get("/api/v1/me", headers={"Authorization": f"Bearer {resp.json()['access_token']}"})
    assert me.status_code == 200 and me.json()["username"] == name
    return str(me.json()["api_key"])


# ------------------------------------------------------------------------------------- assignment
def test_assignment_is_balanced_distinct_seeded_and_keeps_what_exists() -> None:
    ids = [f"id{i:02d}" for i in range(12)]
    a = assign(ids, ["ann1", "ann2", "ann3"], 2, seed=7)
    assert set(a) == set(ids) and all(len(set(p)) == 2 for p in a.values())
    assert Counter(p for ps in a.values() for p in ps) == {"ann1": 8, "ann2": 8, "ann3": 8}
    assert assign(list(reversed(ids)), ["ann3", "ann1", "ann2"], 2, seed=7) == a  # order of inputs does not matter
    assert any(assign(ids, ["ann1", "ann2", "ann3"], 2, seed=s) != a for s in range(1, 6))  # the seed does
    odd = assign(ids[:7], ["a", "b", "c"], 2, seed=1)
    loads = Counter(p for ps in odd.values() for p in ps)
    assert sum(loads.values()) == 14 and max(loads.values()) - min(loads.values()) <= 1
    # A record keeps its reviewers; a fourth reviewer joins: the new records go to the least loaded.
    more = assign([*ids, "id12", "id13"], ["ann1", "ann2", "ann3", "ann4"], 2, seed=7, existing=a)
    assert {k: more[k] for k in ids} == a and "ann4" in more["id12"] and "ann4" in more["id13"]
    with pytest.raises(AnnotationError, match=r"overlap\W* 3 needs at least 3 annotators; the workspace has 2: a, b"):
        assign(ids, ["a", "b"], 3)


def test_median_gap_leaves_breaks_out() -> None:
    assert median_gap([0.0, 10.0, 30.0, 30.0 + BREAK_SECONDS + 1, 40.0 + BREAK_SECONDS]) == (10.0, 3)
    assert median_gap([5.0]) == (None, 0)


# ------------------------------------------------------------------------------------------ users
def _cells(out: str, columns: int) -> list[list[str]]:
    """The body rows of a rich table, as cell texts."""
    lines = [line for line in out.splitlines() if line.count("│") == columns + 1]
    return [[c.strip() for c in line.split("│")[1:-1]] for line in lines]


def test_users_add_writes_a_private_password_and_never_prints_it(env: Env) -> None:
    for name in ("ann1", "ann2", "ann3"):
        out = env.cli("users", "add", name, "--role", "annotator").output
        assert f"Added {name} as annotator" in out and "readable by you only" in out
    out = env.cli("users", "add", "judy", "--role", "adjudicator").output
    assert f"workspace '{env.info.workspace}-adjudication'" in out
    path = env.info.data_dir / "reviewers.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    saved = _passwords(env)
    assert {n: v["role"] for n, v in saved.items()} == {
        "ann1": "annotator",
        "ann2": "annotator",
        "ann3": "annotator",
        "judy": "adjudicator",
    }
    for name, v in saved.items():
        assert v["password"] not in out
        env.keys[name] = _login(env, name, v["password"])  # the written password is the real one
    log = (env.info.data_dir / server.LOG_FILE).read_text()
    assert not any(v["password"] in log for v in saved.values())

    listed = env.cli("users", "list").output
    rows = {r[0]: r[1:] for r in _cells(listed, 3)}
    assert rows["ann1"] == ["annotator", "annotator"] and rows["judy"] == ["adjudicator", "annotator"]
    assert rows[env.info.username] == ["-", "owner"]

    dup = env.cli("users", "add", "ann1", "--role", "annotator", ok=False)
    assert dup.exit_code == 2 and "an Argilla user 'ann1' already exists" in dup.output
    assert len(dup.output.strip().splitlines()) == 1


def test_users_add_on_an_external_server_with_its_own_passwords_file(env: Env) -> None:
    """The same command by URL and key (any Argilla), into another workspace (team-b, created)."""
    pw = env.tmp / "private" / "team.json"
    add = ("users", "add", "ext1", "--role", "annotator", "--workspace", "team-b", "--passwords-file", str(pw))
    out = env.cli(*add, external=True).output
    assert "Added ext1 as annotator (Argilla user, workspace 'team-b')" in out and str(pw) in out
    assert stat.S_IMODE(pw.stat().st_mode) == 0o600 and stat.S_IMODE(pw.parent.stat().st_mode) == 0o700
    _login(env, "ext1", _passwords(env, pw)["ext1"]["password"])
    rows = {r[0]: r[1:] for r in _cells(env.cli("users", "list", "--workspace", "team-b", external=True).output, 3)}
    assert rows["ext1"] == ["annotator", "annotator"] and rows["ann1"] == ["-", "annotator"]
    bad = env.cli("users", "add", "no way", "--role", "annotator", ok=False)
    assert bad.exit_code == 2 and "reviewer name 'no way': use letters" in bad.output
    junk = env.tmp / "junk.json"
    junk.write_text("not json")
    res = env.cli("users", "add", "ext2", "--role", "annotator", "--passwords-file", str(junk), ok=False)
    assert res.exit_code == 2 and "junk.json: not a reviewers' passwords file" in res.output
    assert "ext2" not in {r[0] for r in _cells(env.cli("users", "list").output, 3)}  # no user without its password


# ------------------------------------------------------------------------------------ push --overlap
def _dataset(env: Env) -> list[dict[str, Any]]:
    with env.http() as http:
        found = [d for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == SPEC]
        assert len(found) == 1
        items = http.get(f"/api/v1/datasets/{found[0]['id']}/records", params={"include": "responses"}).json()
    return list(items["items"])


def test_push_with_overlap_assigns_two_of_three_balanced_and_a_repush_duplicates_nothing(env: Env) -> None:
    out = env.cli("push", "--store", str(env.store_path), "--spec", SPEC, "--overlap", "2", "--seed", "3").output
    assert "Pushed 12 of 12 items" in out and "Assigned to reviewers (records each): ann1 8, ann2 8, ann3 8." in out
    recs = _dataset(env)
    assert len(recs) == 12
    assigned = {r["external_id"]: r["metadata"][ASSIGNED] for r in recs}
    assert all(len(set(p)) == 2 and set(p) <= {"ann1", "ann2", "ann3"} for p in assigned.values())
    dataset = rg.Argilla(api_url=env.info.url, api_key=env.info.api_key).datasets(SPEC, workspace=env.info.workspace)
    assert dataset.settings.distribution.min_submitted == 2
    # ann1 sees the property (visible to annotators) and can filter their own queue by it.
    with env.http(env.keys["ann1"]) as http:
        meta = http.get(f"/api/v1/me/datasets/{dataset.id}/metadata-properties").json()["items"]
    assert ASSIGNED in {m["name"] for m in meta}

    again = env.cli("push", "--store", str(env.store_path), "--spec", SPEC, "--overlap", "2", "--seed", "99").output
    assert "Pushed 12 of 12 items" in again
    after = _dataset(env)
    assert len(after) == 12 and {r["external_id"]: r["metadata"][ASSIGNED] for r in after} == assigned
    plain = env.cli("push", "--store", str(env.store_path), "--spec", SPEC).output  # without --overlap: kept too
    assert "Pushed 12 of 12 items" in plain
    assert {r["external_id"]: r["metadata"][ASSIGNED] for r in _dataset(env)} == assigned

    bad = env.cli(
        "push", "--store", str(env.store_path), "--spec", SPEC, "--overlap", "2", "--reviewers", "ann1,zed", ok=False
    )
    assert bad.exit_code == 2 and "zed not an annotator" in bad.output


# ----------------------------------------------------------------------------------------- status
def _answer(env: Env, user: str, record_id: str, status: str, label: str | None) -> None:
    values = {ds.QUESTION: {"value": label}} if label is not None else {}
    with env.http(env.keys[user]) as http:
        resp = http.post(f"/api/v1/records/{record_id}/responses", json={"status": status, "values": values})
    assert resp.status_code == 201, resp.text


def _table(out: str) -> dict[str, list[str]]:
    return {r[0]: r[1:] for r in _cells(out, 7)}


def test_status_per_reviewer_matches_argilla(env: Env) -> None:
    recs = sorted(_dataset(env), key=lambda r: r["external_id"])
    mine = {u: [r for r in recs if u in r["metadata"][ASSIGNED]] for u in ("ann1", "ann2", "ann3")}
    labels = ["Correct", "Incorrect"]
    for k, r in enumerate(mine["ann1"][:4]):  # four answers a second apart: about 1 s per label
        _answer(env, "ann1", r["id"], "submitted", labels[k % 2])
        time.sleep(1.0)
    _answer(env, "ann1", mine["ann1"][4]["id"], "discarded", None)
    _answer(env, "ann2", mine["ann2"][0]["id"], "submitted", "Correct")
    _answer(env, "ann2", mine["ann2"][1]["id"], "draft", "Correct")

    out = env.cli("status", "--spec", SPEC).output
    table = _table(out)
    with env.http() as http:
        did = next(d["id"] for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == SPEC)
        progress = {u["username"]: u for u in http.get(f"/api/v1/datasets/{did}/users/progress").json()["users"]}
    for user in ("ann1", "ann2"):
        p = progress[user]
        want = {s: p["completed"][s] + p["pending"][s] for s in ("submitted", "discarded", "draft")}
        assigned, submitted, discarded, drafts, _, _ = table[user]
        assert (int(submitted), int(discarded), int(drafts)) == (want["submitted"], want["discarded"], want["draft"])
        assert int(assigned) == len(mine[user]) == 8
    assert table["ann1"][:5] == ["8", "4", "1", "0", "3"] and table["ann2"][:5] == ["8", "1", "0", "1", "7"]
    assert table["ann3"][:5] == ["8", "0", "0", "0", "8"] and table["ann3"][5] == "-"
    med = float(table["ann1"][5].split()[0])
    assert 0.9 <= med < 5 and "(n=4)" in table["ann1"][5]  # 3 gaps of ~1 s, then the discard right after
    done = sum(1 for r in _dataset(env) if sum(x["status"] == "submitted" for x in r["responses"]) >= 2)
    assert f"Dataset 'answer_alignment': {done} of 12 records completed" in out
    assert "median gap between a reviewer's consecutive submitted or discarded answers" in out


# ------------------------------------------------------------------------------------- guidelines
RATED: dict[str, Any] = {
    "name": "coherence",
    "description": "How coherent the answer is.",
    "steps": ["Read the answer.", "Rate it on the scale."],
    "inputs": ["question", "answer"],
    "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
}


def test_guidelines_come_from_the_spec_and_follow_its_changes(env: Env) -> None:
    """Description, steps, ranges and the few-shot examples reach Argilla's guidelines and the question; a
    changed spec updates both on the existing (published) dataset; an unchanged one touches nothing."""
    from greval.annotation.argilla import connect, ensure_dataset
    from greval.spec import parse_spec

    first = parse_spec(RATED)
    assert isinstance(first, Spec)
    conn = connect(env.info.url, env.info.api_key, workspace=env.info.workspace)
    try:
        handle = ensure_dataset(conn, first, "coherence-review", None)
        assert handle.created and handle.updated == ()
        changed = parse_spec(
            {
                **RATED,
                "description": "How coherent and well ordered the answer is.\nJump-free reasoning counts.",
                "scale": {**RATED["scale"], "ranges": {"1-2": "incoherent", "3": "fair", "4-5": "coherent"}},
                "examples": [
                    {
                        "inputs": {"question": "Why is the sky blue?", "answer": "Rayleigh scattering of sunlight."},
                        "output": {"reasoning": "One clear causal step.", "score": 5},
                    }
                ],
            }
        )
        assert isinstance(changed, Spec)
        assert ensure_dataset(conn, changed, "coherence-review", None).updated == ("guidelines", "question")
        assert ensure_dataset(conn, changed, "coherence-review", None).updated == ()
    finally:
        conn.close()
    back = rg.Argilla(api_url=env.info.url, api_key=env.info.api_key).datasets(
        "coherence-review", workspace=env.info.workspace
    )
    text = back.settings.guidelines
    assert "How coherent and well ordered the answer is." in text and "1. Read the answer." in text
    assert "- 1-2: incoherent" in text and "## Examples (the judge's few-shot examples)" in text
    assert "Rayleigh scattering of sunlight." in text and '"score": 5' in text
    q = back.settings.questions[ds.QUESTION]
    assert q.title == "How coherent and well ordered the answer is." and "incoherent" in (q.description or "")


# ----------------------------------------------------------------------------------- adjudication
def _submitted(rec: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in rec["responses"] if r["status"] == "submitted"]


def test_adjudication_round_settles_disputes_and_the_gold_follows(env: Env, tmp_path: Path) -> None:
    """Reviewers disagree on some records: those (and only those) go to judy's adjudication dataset, showing
    every label and comment and the judge's verdict; ann1 cannot answer there; judy's labels come back as the
    gold of `greval agreement --gold adjudicated:judy`, every reviewer's label kept."""
    from greval.cli import main

    users = {}
    with env.http() as http:
        users = {u["id"]: u["username"] for u in http.get("/api/v1/users").json()["items"]}
    recs = sorted(_dataset(env), key=lambda r: r["external_id"])
    for k, r in enumerate(rec for rec in recs if any(users[x["user_id"]] == "ann1" for x in _submitted(rec))):
        other = next(p for p in r["metadata"][ASSIGNED] if p != "ann1")
        if any(users[x["user_id"]] == other for x in r["responses"]):
            continue
        ann1 = next(x for x in _submitted(r) if users[x["user_id"]] == "ann1")["values"][ds.QUESTION]["value"]
        flip = {"Correct": "Incorrect", "Incorrect": "Correct"}[ann1] if k < 2 else ann1
        with env.http(env.keys[other]) as http:
            body = {"status": "submitted", "values": {ds.QUESTION: {"value": flip}, ds.COMMENT: {"value": f"c{k}"}}}
            assert http.post(f"/api/v1/records/{r['id']}/responses", json=body).status_code == 201
    recs = sorted(_dataset(env), key=lambda r: r["external_id"])
    disputed = {
        r["external_id"]: r
        for r in recs
        if len(_submitted(r)) >= 2 and len({x["values"][ds.QUESTION]["value"] for x in _submitted(r)}) > 1
    }
    reviewed = sum(1 for r in recs if len(_submitted(r)) >= 2)
    assert len(disputed) >= 2

    out = env.cli("adjudicate", "--store", str(env.store_path), "--spec", SPEC).output
    assert f"{len(disputed)} of {reviewed} records reviewed by two or more people are disputed" in out
    assert f"'{SPEC}-adjudication' in workspace '{env.info.workspace}-adjudication' (created)" in out
    again = env.cli("adjudicate", "--store", str(env.store_path), "--spec", SPEC).output
    assert "(updated)" in again
    with env.http() as http:
        adj = next(d for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == f"{SPEC}-adjudication")
        items = http.get(f"/api/v1/datasets/{adj['id']}/records", params={"include": "responses"}).json()["items"]
    assert sorted(i["external_id"] for i in items) == sorted(disputed)  # no duplicates after the second run
    for item in items:
        shown = item["fields"][ds.REVIEWS_FIELD]
        for x in _submitted(disputed[item["external_id"]]):
            label = x["values"][ds.QUESTION]["value"]
            assert f"| {users[x['user_id']]} | **{label}** |" in shown
            comment = (x["values"].get(ds.COMMENT) or {}).get("value")
            assert comment is None or comment in shown
        assert f"| judge (openai:judge-test) | **{item['metadata']['judge_verdict']}** |" in shown
    # Reviewers cannot answer in the adjudication round; judy can.
    first = items[0]["id"]
    verdict = {"status": "submitted", "values": {ds.QUESTION: {"value": "Incorrect"}}}
    with env.http(env.keys["ann1"]) as http:
        assert http.post(f"/api/v1/records/{first}/responses", json=verdict).status_code == 403
    judy = {}
    for n, item in enumerate(items):
        judy[item["metadata"]["record_id"]] = "Incorrect" if n % 2 == 0 else "Correct"
        body = {"status": "submitted", "values": {ds.QUESTION: {"value": judy[item["metadata"]["record_id"]]}}}
        with env.http(env.keys["judy"]) as http:
            assert http.post(f"/api/v1/records/{item['id']}/responses", json=body).status_code == 201

    env.cli("pull", "--store", str(env.store_path), "--spec", SPEC)
    pulled = env.cli("adjudicate", "--store", str(env.store_path), "--spec", SPEC, "--pull").output
    assert f"{len(disputed)} disputed records, {len(disputed)} adjudicated (judy {len(disputed)})" in pulled
    with Store(env.store_path) as st:
        rows = st.human_labels(SPEC)
    assert {r["record_id"]: r["label"] for r in rows if r["annotator"] == "judy"} == judy
    assert {r["dataset"] for r in rows if r["annotator"] == "judy"} == {f"{SPEC}-adjudication"}
    raw = sum(len(_submitted(r)) for r in recs)
    assert sum(1 for r in rows if r["annotator"] != "judy" and r["status"] == "submitted") == raw  # all kept

    report = tmp_path / "agreement.json"
    args = ["agreement", "--store", str(env.store_path), "--spec", SPEC, "--bootstrap", "0"]
    args += ["--dataset", SPEC, "--dataset", f"{SPEC}-adjudication", "--gold", "adjudicated:judy"]
    res = CliRunner().invoke(main, [*args, "--json", str(report)])
    assert res.exit_code == 0, res.output
    rev = json.loads(report.read_text())["reviewers"]
    assert rev["counts"]["adjudicated"] == len(disputed)
    settled = {g["item"]: g["label"] for g in rev["gold_labels"] if g["source"] == "adjudicator"}
    assert settled == judy, rev["gold_labels"]
    assert "judy" not in {row["name"] for row in rev["rows"]}  # she settles; she is not one of the reviewers


def test_adjudication_without_disagreements_is_one_line(env: Env) -> None:
    env.cli("push", "--store", str(env.store_path), "--spec", SPEC, "--dataset", "calm", "--overlap", "2")
    res = env.cli("adjudicate", "--store", str(env.store_path), "--spec", SPEC, "--dataset", "calm", ok=False)
    assert res.exit_code == 2 and res.output.strip() == (
        "error: nothing to adjudicate in dataset 'calm': 0 record(s) have two or more submitted answers and none of "
        "them disagree"
    )


def test_pull_names_answers_by_a_user_the_key_cannot_name_and_keeps_nothing_under_an_id(env: Env) -> None:
    """An admin's key names the workspace's members only: the answers of a reviewer who has left the workspace
    are skipped with one note naming the user's id and the count (before, they were stored silently under the
    id, a phantom second reviewer once an owner's pull names the user); an owner's pull keeps them."""
    env.cli("push", "--store", str(env.store_path), "--spec", SPEC, "--dataset", "unnamed")
    env.cli("users", "add", "leaver", "--role", "annotator")
    env.keys["leaver"] = _login(env, "leaver", _passwords(env)["leaver"]["password"])
    with env.http() as http:
        ws_id = next(
            w["id"] for w in http.get("/api/v1/me/workspaces").json()["items"] if w["name"] == env.info.workspace
        )
        body = {"username": "lead", "first_name": "lead", "role": "admin", "password": "lead-password-1"}
        lead_id = http.post("/api/v1/users", json=body).json()["id"]
        assert http.post(f"/api/v1/workspaces/{ws_id}/users", json={"user_id": lead_id}).status_code == 201
        did = next(d["id"] for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == "unnamed")
        recs = http.get(f"/api/v1/datasets/{did}/records").json()["items"]
        leaver_id = next(u["id"] for u in http.get("/api/v1/users").json()["items"] if u["username"] == "leaver")
    lead_key = _login(env, "lead", "lead-password-1")
    for r in recs[:2]:
        _answer(env, "leaver", r["id"], "submitted", "Correct")
    _answer(env, "ann1", recs[0]["id"], "submitted", "Incorrect")
    with env.http() as http:
        assert http.delete(f"/api/v1/workspaces/{ws_id}/users/{leaver_id}").status_code == 200

    pull = ("pull", "--store", str(env.store_path), "--spec", SPEC, "--dataset", "unnamed")
    res = env.cli(*pull, key=lead_key)
    notes = [line for line in res.output.splitlines() if line.startswith("note:")]
    assert notes == [
        f"note: 2 answer(s) by Argilla user {leaver_id} skipped, 0 kept: this API key cannot name that user (only "
        "an owner's key lists every user); pull with an owner's key to keep them"
    ]
    assert "Stored 1 answers" in res.output
    with Store(env.store_path) as st:
        rows = st.human_labels(SPEC, dataset="unnamed")
    assert [r["annotator"] for r in rows] == ["ann1"]
    env.cli(*pull)  # the owner's key names everyone: the answers are kept under the reviewer's name
    with Store(env.store_path) as st:
        rows = st.human_labels(SPEC, dataset="unnamed")
    assert Counter(r["annotator"] for r in rows) == {"leaver": 2, "ann1": 1}

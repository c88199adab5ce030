"""The embedded Argilla server end to end: real argilla-server 2.8.0, real argilla SDK, our search engine.

One server per module (temporary data dir, free port). The first run creates the server's venv
(about a minute and a half); later runs reuse it.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from greval.annotation import server
from greval.cli.annotate import annotate

rg = pytest.importorskip("argilla")

pytestmark = [pytest.mark.slow, pytest.mark.argilla]

DATASET = "greval-server-test"

# external id -> (question, answer, metric, judge_score, vector, verdict suggestion (value, score) | None)
ROWS: dict[str, tuple[str, str, str, float | None, list[float], tuple[str, float] | None]] = {
    "r0": (
        "What is the capital of France?",
        "Paris is the capital.",
        "faithfulness",
        0.9,
        [1.0, 0.0, 0.0],
        ("pass", 0.9),
    ),
    "r1": (
        "Who wrote Hamlet?",
        "Shakespeare wrote Hamlet.",
        "faithfulness",
        0.2,
        [0.9, 0.1, 0.0],
        ("fail", 0.3),
    ),
    "r2": (
        "Boiling point of water?",
        "100 degrees Celsius at sea level.",
        "relevance",
        0.5,
        [0.0, 1.0, 0.0],
        ("pass", 0.6),
    ),
    "r3": ("Capital of Spain?", "Madrid.", "relevance", None, [0.0, 0.9, 0.1], ("fail", 0.1)),
    "r4": (
        "Largest planet?",
        "Jupiter is the largest planet.",
        "faithfulness",
        0.7,
        [0.0, 0.0, 1.0],
        ("pass", 0.8),
    ),
    "r5": ("Speed of light?", "About 300000 km/s.", "correctness", None, [0.1, 0.1, 0.9], None),
}


@dataclass
class Env:
    """Shared state of the module: the server and what the tests created in it."""

    info: server.ServerInfo
    ids: dict[str, str]  # external id -> record id
    dataset_id: str = ""
    users: dict[str, dict[str, str]] | None = None  # username -> {"id", "api_key"}


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with tempfile.TemporaryDirectory(prefix="greval-argilla-test-") as tmp:
        info = server.start(server.free_port(), Path(tmp) / "data")
        state = Env(info=info, ids={})
        try:
            yield state
        finally:
            server.stop(state.info.data_dir)


def _client(info: server.ServerInfo, api_key: str | None = None) -> Any:
    return rg.Argilla(api_url=info.url, api_key=api_key or info.api_key)


def _http(info: server.ServerInfo, api_key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": api_key or info.api_key}, timeout=30)


def _search(env: Env, body: dict[str, Any], user: str | None = None, limit: int = 50) -> list[str]:
    """Run the UI's search endpoint as ``user`` (owner by default); return external ids in order."""
    key = env.users[user]["api_key"] if user and env.users else None
    with _http(env.info, key) as http:
        resp = http.post(f"/api/v1/me/datasets/{env.dataset_id}/records/search", params={"limit": limit}, json=body)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    ext = [item["record"]["external_id"] for item in data["items"]]
    assert data["total"] >= len(ext)
    return ext


def _status_filter(*statuses: str) -> dict[str, Any]:
    return {"type": "terms", "scope": {"entity": "response", "property": "status"}, "values": list(statuses)}


def test_status_and_cli_status(env: Env) -> None:
    assert server.healthy(env.info.url)
    st = server.status(env.info.data_dir)
    assert st.running and st.url == env.info.url and st.pid == env.info.pid
    result = CliRunner().invoke(annotate, ["status", "--data-dir", str(env.info.data_dir)])
    assert result.exit_code == 0
    assert result.output.startswith(f"running: {env.info.url}")
    creds = env.info.data_dir / server.CREDENTIALS_FILE
    assert creds.stat().st_mode & 0o777 == 0o600
    log = (env.info.data_dir / server.LOG_FILE).read_text()
    assert env.info.api_key not in log and env.info.password not in log
    assert "api_key" not in repr(env.info) or env.info.api_key not in repr(env.info)


def test_push_and_read_back_exactly(env: Env) -> None:
    client = _client(env.info)
    settings = rg.Settings(
        fields=[rg.TextField(name="question"), rg.TextField(name="answer")],
        questions=[
            rg.LabelQuestion(name="verdict", labels=["pass", "fail"]),
            rg.RatingQuestion(name="quality", values=[1, 2, 3, 4, 5]),
            rg.TextQuestion(name="comment", required=False),
        ],
        metadata=[rg.TermsMetadataProperty(name="metric"), rg.FloatMetadataProperty(name="judge_score")],
        vectors=[rg.VectorField(name="emb", dimensions=3)],
    )
    dataset = rg.Dataset(name=DATASET, settings=settings, workspace=env.info.workspace, client=client)
    dataset.create()
    env.dataset_id = str(dataset.id)

    records = []
    for ext, (question, answer, metric, score, vector, suggestion) in ROWS.items():
        metadata: dict[str, Any] = {"metric": metric}
        if score is not None:
            metadata["judge_score"] = score
        suggestions = []
        if suggestion:
            suggestions.append(rg.Suggestion("verdict", suggestion[0], score=suggestion[1], agent="judge-a"))
            suggestions.append(rg.Suggestion("quality", 5 if suggestion[0] == "pass" else 2, agent="judge-a"))
        records.append(
            rg.Record(
                id=ext,
                fields={"question": question, "answer": answer},
                metadata=metadata,
                vectors={"emb": vector},
                suggestions=suggestions,
            )
        )
    dataset.records.log(records)

    back = list(client.datasets(DATASET, workspace=env.info.workspace).records(with_vectors=True))
    assert len(back) == len(ROWS)
    for rec in back:
        question, answer, metric, score, vector, suggestion = ROWS[str(rec.id)]
        env.ids[str(rec.id)] = str(rec._server_id)
        assert rec.fields["question"] == question and rec.fields["answer"] == answer
        expected_meta: dict[str, Any] = {"metric": metric}
        if score is not None:
            expected_meta["judge_score"] = score
        assert dict(rec.metadata) == expected_meta
        assert rec.vectors["emb"] == vector
        got = {s.question_name: (s.value, s.score, s.agent) for s in rec.suggestions}
        if suggestion:
            assert got == {
                "verdict": (suggestion[0], suggestion[1], "judge-a"),
                "quality": (5 if suggestion[0] == "pass" else 2, None, "judge-a"),
            }
        else:
            assert got == {}


def test_two_users_respond(env: Env) -> None:
    client = _client(env.info)
    workspace = client.workspaces(env.info.workspace)
    env.users = {}
    for name in ("ann1", "ann2"):
        user = rg.User(username=name, password="annotator-pass-123", role="annotator", client=client).create()
        workspace.add_user(user)
        with _http(env.info) as http:  # the SDK's User model has no api_key; the owner can read it over REST
            api_key = http.get(f"/api/v1/users/{user.id}").json()["api_key"]
        env.users[name] = {"id": str(user.id), "api_key": api_key}

    # ann1 labels through the REST endpoints the UI uses: submit, submit, discard, draft.
    plan = [
        ("r0", "submitted", {"verdict": {"value": "pass"}, "quality": {"value": 5}}),
        (
            "r1",
            "submitted",
            {"verdict": {"value": "fail"}, "quality": {"value": 2}, "comment": {"value": "wrong"}},
        ),
        # A discard without values makes the 2.8.0 SDK crash when reading responses (values=None), so send {}.
        ("r2", "discarded", {}),
        ("r3", "draft", {"verdict": {"value": "fail"}}),
    ]
    with _http(env.info, env.users["ann1"]["api_key"]) as http:
        for ext, status_, values in plan:
            body: dict[str, Any] = {"status": status_}
            if values is not None:
                body["values"] = values
            resp = http.post(f"/api/v1/records/{env.ids[ext]}/responses", json=body)
            assert resp.status_code == 201, resp.text

    # ann2's responses come through the SDK (the owner logs them on ann2's behalf, as a push would).
    dataset = client.datasets(DATASET, workspace=env.info.workspace)
    ann2 = env.users["ann2"]["id"]
    to_log = []
    for rec in dataset.records:
        if str(rec.id) in {"r0", "r4"}:
            rec.responses.add(rg.Response("verdict", "pass", user_id=ann2, status="submitted"))
            rec.responses.add(rg.Response("quality", 4 if str(rec.id) == "r0" else 3, user_id=ann2, status="submitted"))
            to_log.append(rec)
    dataset.records.log(to_log)

    back = {str(r.id): r for r in dataset.records(with_responses=True)}
    r0 = {
        (str(r.user_id), r.question_name, r.value, getattr(r.status, "value", r.status)) for r in back["r0"].responses
    }
    ann1 = env.users["ann1"]["id"]
    assert r0 == {
        (ann1, "verdict", "pass", "submitted"),
        (ann1, "quality", 5, "submitted"),
        (ann2, "verdict", "pass", "submitted"),
        (ann2, "quality", 4, "submitted"),
    }
    r1 = {(r.question_name, r.value) for r in back["r1"].responses}
    assert r1 == {("verdict", "fail"), ("quality", 2), ("comment", "wrong")}


def _check_search(env: Env) -> None:
    """What the UI shows, checked against expected results; reused after the restart."""
    everyone = ["r0", "r1", "r2", "r3", "r4", "r5"]
    by_insert = [{"scope": {"entity": "record", "property": "inserted_at"}, "order": "asc"}]

    # Per-user queues: response-status filters are scoped to the current user.
    assert _search(env, {"filters": {"and": [_status_filter("pending")]}, "sort": by_insert}, "ann1") == [
        "r4",
        "r5",
    ]
    assert _search(env, {"filters": {"and": [_status_filter("submitted")]}, "sort": by_insert}, "ann1") == [
        "r0",
        "r1",
    ]
    assert _search(env, {"filters": {"and": [_status_filter("discarded")]}}, "ann1") == ["r2"]
    assert _search(env, {"filters": {"and": [_status_filter("draft")]}}, "ann1") == ["r3"]
    assert _search(env, {"filters": {"and": [_status_filter("pending")]}, "sort": by_insert}, "ann2") == [
        "r1",
        "r2",
        "r3",
        "r5",
    ]
    assert _search(env, {"filters": {"and": [_status_filter("pending", "draft")]}, "sort": by_insert}, "ann1") == [
        "r3",
        "r4",
        "r5",
    ]
    # The default (unsorted) queue is shuffled per user, deterministically, like Elasticsearch's random_score.
    queue = _search(env, {"filters": {"and": [_status_filter("pending")]}}, "ann2")
    assert sorted(queue) == ["r1", "r2", "r3", "r5"]
    assert queue == _search(env, {"filters": {"and": [_status_filter("pending")]}}, "ann2")

    # Text search: all terms must match (AND), optionally in one field.
    assert sorted(_search(env, {"query": {"text": {"q": "capital"}}})) == ["r0", "r3"]
    assert _search(env, {"query": {"text": {"q": "capital", "field": "answer"}}}) == ["r0"]
    assert _search(env, {"query": {"text": {"q": "largest planet"}}}) == ["r4"]
    assert _search(env, {"query": {"text": {"q": "capital paris"}}}) == ["r0"]
    assert _search(env, {"query": {"text": {"q": "nonexistentword"}}}) == []

    # Metadata terms and range filters, combined with a user's queue.
    meta_terms = {"type": "terms", "scope": {"entity": "metadata", "metadata_property": "metric"}}
    score_range = {"type": "range", "scope": {"entity": "metadata", "metadata_property": "judge_score"}}
    assert _search(env, {"filters": {"and": [{**meta_terms, "values": ["relevance"]}]}, "sort": by_insert}) == [
        "r2",
        "r3",
    ]
    assert _search(env, {"filters": {"and": [{**score_range, "ge": 0.5}]}, "sort": by_insert}) == [
        "r0",
        "r2",
        "r4",
    ]
    assert _search(env, {"filters": {"and": [{**score_range, "ge": 0.3, "le": 0.8}]}, "sort": by_insert}) == [
        "r2",
        "r4",
    ]
    both = {"and": [_status_filter("pending"), {**meta_terms, "values": ["faithfulness"]}]}
    assert _search(env, {"filters": both}, "ann1") == ["r4"]

    # Suggestion filters: value and score.
    sugg = {"entity": "suggestion", "question": "verdict"}
    assert _search(
        env, {"filters": {"and": [{"type": "terms", "scope": sugg, "values": ["pass"]}]}, "sort": by_insert}
    ) == ["r0", "r2", "r4"]
    score_scope = {**sugg, "property": "score"}
    assert _search(
        env, {"filters": {"and": [{"type": "range", "scope": score_scope, "ge": 0.5}]}, "sort": by_insert}
    ) == ["r0", "r2", "r4"]
    rating = {"entity": "suggestion", "question": "quality"}
    assert _search(env, {"filters": {"and": [{"type": "range", "scope": rating, "le": 2}]}, "sort": by_insert}) == [
        "r1",
        "r3",
    ]

    # Response value filter, scoped to the current user.
    resp_verdict = {
        "type": "terms",
        "scope": {"entity": "response", "question": "verdict"},
        "values": ["pass"],
    }
    assert _search(env, {"filters": {"and": [resp_verdict]}, "sort": by_insert}, "ann1") == ["r0"]
    assert _search(env, {"filters": {"and": [resp_verdict]}, "sort": by_insert}, "ann2") == ["r0", "r4"]

    # Sorting: missing values last in both directions; several keys.
    by_score = {"scope": {"entity": "metadata", "metadata_property": "judge_score"}}
    assert _search(env, {"sort": [{**by_score, "order": "asc"}]}) == ["r1", "r2", "r4", "r0", "r3", "r5"]
    assert _search(env, {"sort": [{**by_score, "order": "desc"}]}) == ["r0", "r4", "r2", "r1", "r3", "r5"]
    by_metric = {"scope": {"entity": "metadata", "metadata_property": "metric"}, "order": "asc"}
    assert _search(env, {"sort": [by_metric, {**by_score, "order": "desc"}]}) == [
        "r5",
        "r0",
        "r4",
        "r1",
        "r2",
        "r3",
    ]
    by_sugg_score = {"scope": {**sugg, "property": "score"}, "order": "desc"}
    assert _search(env, {"sort": [by_sugg_score]}) == ["r0", "r4", "r2", "r1", "r3", "r5"]
    assert sorted(_search(env, {})) == everyone

    # Paging keeps the total.
    with _http(env.info) as http:
        resp = http.post(
            f"/api/v1/me/datasets/{env.dataset_id}/records/search",
            params={"limit": 2, "offset": 2},
            json={"sort": [{**by_score, "order": "asc"}]},
        )
    data = resp.json()
    assert data["total"] == 6
    assert [i["record"]["external_id"] for i in data["items"]] == ["r4", "r0"]

    # Similarity search, by record and by value, with a filter.
    def similar(vector: dict[str, Any], limit: int, filters: dict[str, Any] | None = None) -> list[str]:
        body: dict[str, Any] = {"query": {"vector": {"name": "emb", **vector}}}
        if filters:
            body["filters"] = filters
        return _search(env, body, limit=limit)

    assert similar({"record_id": env.ids["r0"]}, 2) == ["r1", "r5"]
    assert similar({"value": [0.0, 0.0, 1.0]}, 3) == ["r4", "r5", "r3"]
    assert similar({"value": [0.0, 0.0, 1.0], "order": "least_similar"}, 1) == ["r0"]
    assert similar({"value": [0.0, 1.0, 0.0]}, 1, {"and": [{**meta_terms, "values": ["faithfulness"]}]}) == ["r1"]


def _check_counts(env: Env, completed: int) -> None:
    with _http(env.info) as http:
        progress = http.get(f"/api/v1/datasets/{env.dataset_id}/progress").json()
        assert (progress["total"], progress["completed"], progress["pending"]) == (
            6,
            completed,
            6 - completed,
        )
        props = {
            p["name"]: p["id"]
            for p in http.get(f"/api/v1/me/datasets/{env.dataset_id}/metadata-properties").json()["items"]
        }
        metric = http.get(f"/api/v1/metadata-properties/{props['metric']}/metrics").json()
        assert metric["total"] == 6
        assert metric["values"] == [
            {"term": "faithfulness", "count": 3},
            {"term": "relevance", "count": 2},
            {"term": "correctness", "count": 1},
        ]
        score = http.get(f"/api/v1/metadata-properties/{props['judge_score']}/metrics").json()
        assert math.isclose(score["min"], 0.2) and math.isclose(score["max"], 0.9)
    assert env.users
    with _http(env.info, env.users["ann1"]["api_key"]) as http:
        mine = http.get(f"/api/v1/me/datasets/{env.dataset_id}/metrics").json()["responses"]
    assert mine == {"total": 6, "submitted": 2, "discarded": 1, "draft": 1, "pending": 2}


def test_search_engine_behaviour(env: Env) -> None:
    _check_search(env)
    _check_counts(env, completed=3)


def test_status_recomputed_in_process_after_dataset_update(env: Env) -> None:
    """Changing the distribution runs an rq job; it must run inside the server and update the index."""
    with _http(env.info) as http:
        resp = http.patch(
            f"/api/v1/datasets/{env.dataset_id}",
            json={"distribution": {"strategy": "overlap", "min_submitted": 2}},
        )
        assert resp.status_code == 200, resp.text
        for _ in range(50):
            progress = http.get(f"/api/v1/datasets/{env.dataset_id}/progress").json()
            if progress["completed"] == 1:
                break
            time.sleep(0.1)
    _check_counts(env, completed=1)  # only r0 has two submitted responses
    done = {"type": "terms", "scope": {"entity": "record", "property": "status"}, "values": ["completed"]}
    assert _search(env, {"filters": {"and": [done]}}) == ["r0"]


def test_port_taken_is_one_line_exit_2(env: Env, tmp_path: Path) -> None:
    """Another data directory's server on the port: one line naming it (greval's, with its data directory)."""
    port = int(env.info.url.rsplit(":", 1)[1])
    result = CliRunner().invoke(annotate, ["up", "--port", str(port), "--data-dir", str(tmp_path / "other")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: port") and "Traceback" not in result.output
    holder = f"greval's Argilla server of another data directory, {env.info.data_dir} (pid {env.info.pid})"
    assert f"is taken by {holder}" in lines[0], lines[0]


def test_a_port_held_by_another_program_is_named(tmp_path: Path) -> None:
    """Issue 40, item 7: a port held by a program that is not greval's (a real listener: Python's HTTP server)
    is named by its command line and pid, where `up` says the port is taken; a free port has no holder."""
    port = server.free_port()
    assert server.port_holder("127.0.0.1", port) is None
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while server.port_free("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.05)
        holder = f"python -m http.server {port} --bind 127.0.0.1 (pid {proc.pid})"
        assert server.port_holder("127.0.0.1", port) == holder
        result = CliRunner().invoke(annotate, ["up", "--port", str(port), "--data-dir", str(tmp_path / "d")])
    finally:
        proc.terminate()
        proc.wait()
    assert result.exit_code == 2, result.output
    assert (
        result.output.strip()
        == f"error: port {port} on 127.0.0.1 is taken by {holder}; choose another with --port or stop it"
    )


def test_restart_keeps_everything(env: Env) -> None:
    port = int(env.info.url.rsplit(":", 1)[1])
    assert server.stop(env.info.data_dir)
    assert not server.status(env.info.data_dir).running
    env.info = server.start(port, env.info.data_dir)
    client = _client(env.info)
    dataset = client.datasets(DATASET, workspace=env.info.workspace)
    records = {str(r.id): r for r in dataset.records(with_responses=True, with_vectors=True)}
    assert set(records) == set(ROWS)
    assert records["r3"].vectors["emb"] == ROWS["r3"][4]
    assert len(records["r0"].responses) == 4
    _check_search(env)
    _check_counts(env, completed=1)


def test_server_log_has_no_errors_or_secrets(env: Env) -> None:
    log = (env.info.data_dir / server.LOG_FILE).read_text()
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert env.info.api_key not in log and env.info.password not in log


# --------------------------------------------------------------------------- concurrent `up`, private data dir


def _greval(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "greval", "annotate", *args], capture_output=True, text=True, timeout=timeout
    )


def _serve_pids(data: Path) -> set[int]:
    """Live serve.py processes (not zombies) whose --data-dir is ``data``."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"serve.py") for a in argv) and os.fsencode(str(data)) in argv:
            pids.add(int(proc.name))
    return pids


def _kill_all(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds server processes through /proc")
def test_two_concurrent_ups_leave_one_server_that_down_stops(tmp_path: Path) -> None:
    data = (tmp_path / "data").resolve()
    port = server.free_port()
    cmd = [sys.executable, "-m", "greval", "annotate", "up", "--port", str(port), "--data-dir", str(data)]
    try:
        procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        # The first line of stdout names the pid.
        outputs = [(out.partition("\n")[0], err) for out, err in (p.communicate(timeout=400) for p in procs)]
        codes = [p.returncode for p in procs]
        assert codes == [0, 0], outputs
        assert all("Traceback" not in out + err for out, err in outputs), outputs

        alive = _serve_pids(data)
        assert len(alive) == 1, (alive, outputs)
        (pid,) = alive
        # Both report the one server (the second waited for the first, then found it running).
        assert all(f"(pid {pid})" in out for out, _ in outputs), outputs
        st = server.status(data)
        assert st.running and st.pid == pid and st.url == f"http://127.0.0.1:{port}"
        status_out = _greval("status", "--data-dir", str(data))
        assert status_out.returncode == 0 and status_out.stdout.startswith("running:"), status_out

        down = _greval("down", "--data-dir", str(data))
        assert down.returncode == 0 and "Argilla stopped." in down.stdout, down
        deadline = time.monotonic() + 10
        while _serve_pids(data) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _serve_pids(data)
        assert server.port_free("127.0.0.1", port)
        assert not server.status(data).running
    finally:
        _kill_all(_serve_pids(data))


def test_data_dir_is_private_also_for_an_older_store(tmp_path: Path) -> None:
    """The database holds the owner's API key in plain text: nothing in the data dir may be group/other readable.
    `up` prints where the credentials are and the command that shows them, never the password or the API key
    (a canary: before, both were printed at every start); `credentials` prints them when asked."""
    data = (tmp_path / "data").resolve()
    # A store as older versions left it: 0755 directories, 0644 files.
    (data / "old-sub").mkdir(parents=True)
    for path in (data / server.LOG_FILE, data / "old-sub" / "file"):
        path.write_text("old\n")
        path.chmod(0o644)
    for d in (data, data / "old-sub"):
        d.chmod(0o755)
    try:
        result = CliRunner().invoke(annotate, ["up", "--port", str(server.free_port()), "--data-dir", str(data)])
        assert result.exit_code == 0, result.output
        assert (data / "argilla.db").exists()
        creds = server.read_credentials(data)
        assert len(creds["password"]) >= 12 and len(creds["api_key"]) >= 24
        assert creds["password"] not in result.output and creds["api_key"] not in result.output
        assert f"credentials: {data / server.CREDENTIALS_FILE} (readable by you only)" in result.output
        assert f"greval annotate credentials --data-dir {data}" in result.output
        shown = CliRunner().invoke(annotate, ["credentials", "--data-dir", str(data)])
        assert shown.exit_code == 0 and creds["password"] in shown.output and creds["api_key"] in shown.output
        leaky = []
        for root, dirs, files in os.walk(data):
            for name in [*dirs, *files, "."]:
                path = Path(root) / name
                mode = path.lstat().st_mode
                if stat.S_IMODE(mode) & 0o077:
                    leaky.append(f"{path.relative_to(data)} {stat.S_IMODE(mode):o}")
        assert not leaky, leaky
    finally:
        server.stop(data)
        _kill_all(_serve_pids(data))


def test_credentials_before_any_start_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(annotate, ["credentials", "--data-dir", str(tmp_path / "never")])
    assert result.exit_code == 2, result.output
    assert "no credentials in" in result.output and "greval annotate up" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------- greval's settings cache (issue 17)


def _settings_cache_module() -> Any:
    """argilla_server/ingest_patch.py, loaded from its file (it runs in the server's venv, not importable here)."""
    import importlib.util

    path = server.serve_script().parent / "ingest_patch.py"
    spec = importlib.util.spec_from_file_location(f"greval_test_ingest_patch_{time.monotonic_ns()}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class _Row:
    id: str
    dataset_id: str
    settings: dict[str, Any]


def test_settings_cache_reuses_equal_settings_and_reparses_changed_ones() -> None:
    cache = _settings_cache_module().SettingsCache(max_entries=3)
    parsed: list[dict[str, Any]] = []

    def parse(settings: dict[str, Any]) -> dict[str, Any]:
        parsed.append(settings)
        return dict(settings)

    row = _Row("p1", "d1", {"type": "terms", "values": ["a", "b"]})
    first = cache.get("metadata", row, parse)
    assert cache.get("metadata", row, parse) is first and len(parsed) == 1
    # The dataset's settings change (an update, or a property deleted and made again): parsed afresh.
    row.settings["values"] = ["a", "b", "c"]
    assert cache.get("metadata", row, parse) == {"type": "terms", "values": ["a", "b", "c"]} and len(parsed) == 2
    # Same content, other dataset / other kind: separate entries; the least recently used is dropped.
    cache.get("metadata", _Row("p1", "d2", dict(row.settings)), parse)
    cache.get("question", _Row("p1", "d1", dict(row.settings)), parse)
    assert len(parsed) == 4 and len(cache) == 3
    cache.get("metadata", _Row("p1", "d1", {"type": "terms", "values": ["a", "b"]}), parse)
    assert len(parsed) == 5 and len(cache) == 3


def test_settings_cache_is_not_applied_to_another_server_version(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Only argilla-server 2.8.0's own properties are replaced; any other version keeps its own, with a log line."""
    import logging
    import types

    class Stock:
        def __init__(self, settings: dict[str, Any]) -> None:
            self.id, self.dataset_id, self.settings = "q1", "d1", settings

        @property
        def parsed_settings(self) -> Any:  # as argilla-server 2.8.0's (never called here: only inspected)
            import pydantic

            return pydantic.TypeAdapter(dict).validate_python(self.settings)

    class Question(Stock):
        parsed_settings = Stock.__dict__["parsed_settings"]

    class MetadataProperty(Stock):
        parsed_settings = Stock.__dict__["parsed_settings"]

    built: list[object] = []

    class TypeAdapter:
        def __init__(self, kind: object) -> None:
            built.append(kind)
            self.kind = kind

        def validate_python(self, settings: dict[str, Any]) -> tuple[object, dict[str, Any]]:
            return self.kind, dict(settings)

    fakes = {
        "argilla_server": types.ModuleType("argilla_server"),
        "argilla_server._version": types.SimpleNamespace(__version__="2.9.0"),
        "argilla_server.api.schemas.v1.questions": types.SimpleNamespace(QuestionSettings="QS"),
        "argilla_server.models.database": types.SimpleNamespace(MetadataProperty=MetadataProperty, Question=Question),
        "argilla_server.models.metadata_properties": types.SimpleNamespace(MetadataPropertySettings="MS"),
        "pydantic": types.SimpleNamespace(TypeAdapter=TypeAdapter),
    }
    for name, module in fakes.items():
        monkeypatch.setitem(sys.modules, name, module)
    for parent in ("argilla_server.api", "argilla_server.api.schemas", "argilla_server.api.schemas.v1"):
        monkeypatch.setitem(sys.modules, parent, types.ModuleType(parent))
    monkeypatch.setitem(sys.modules, "argilla_server.models", types.ModuleType("argilla_server.models"))
    caplog.set_level(logging.INFO, logger="greval.serve")
    records = caplog.records
    cache_module = _settings_cache_module()
    assert cache_module.apply_settings_cache() is False
    assert "argilla-server 2.9.0 (written for 2.8.0)" in records[-1].getMessage()
    assert Question.__dict__["parsed_settings"] is Stock.__dict__["parsed_settings"] and built == []

    monkeypatch.setitem(sys.modules, "argilla_server._version", types.SimpleNamespace(__version__="2.8.0"))
    assert cache_module.apply_settings_cache() is True
    assert "settings cache applied" in records[-1].getMessage()
    q = Question({"type": "label_selection", "options": [{"value": "yes"}]})
    assert q.parsed_settings == ("QS", q.settings) and q.parsed_settings is q.parsed_settings
    m = MetadataProperty({"type": "float"})
    assert m.parsed_settings == ("MS", {"type": "float"})
    assert built == ["QS", "MS"]  # one adapter per settings type, not one per access
    # A class whose parsed_settings is no longer 2.8.0's (patched twice, or changed) is left alone.
    assert cache_module.apply_settings_cache() is False
    assert "parsed_settings is not argilla-server 2.8.0's" in records[-1].getMessage()


def test_embedded_server_applies_the_settings_cache_and_still_validates(env: Env) -> None:
    """The server greval starts says the cache is on; records are still checked against the dataset's
    settings (a metadata value of the wrong type and a suggestion outside the labels are refused), and a
    changed question is validated with its new settings."""
    log = (env.info.data_dir / server.LOG_FILE).read_text()
    assert "settings cache applied (argilla-server 2.8.0)" in log
    assert "webhook skip applied (argilla-server 2.8.0)" in log
    client = _client(env.info)
    settings = rg.Settings(
        fields=[rg.TextField(name="text", client=client)],
        questions=[rg.LabelQuestion(name="label", labels=["yes", "no"], client=client)],
        metadata=[rg.FloatMetadataProperty(name="score", client=client)],
        allow_extra_metadata=False,
    )
    dataset = rg.Dataset(name="cache-check", settings=settings, workspace=env.info.workspace, client=client).create()
    did = str(dataset.id)
    with _http(env.info) as http:
        questions = http.get(f"/api/v1/datasets/{did}/questions").json()["items"]
        qid = questions[0]["id"]

        def upsert(metadata: dict[str, Any], value: str) -> httpx.Response:
            item = {
                "external_id": "c1",
                "fields": {"text": "t"},
                "metadata": metadata,
                "suggestions": [{"question_id": qid, "value": value, "type": "model"}],
            }
            return http.put(f"/api/v1/datasets/{did}/records/bulk", json={"items": [item]})

        for _ in range(2):  # the second time from the cache
            assert upsert({"score": 0.5}, "yes").status_code == 200
            assert upsert({"score": "high"}, "yes").status_code == 422
            assert upsert({"score": 0.5}, "maybe").status_code == 422
        # The labels' texts change: the question's settings are new content, parsed again.
        options = [{"value": "yes", "text": "Yes!"}, {"value": "no", "text": "No!"}]
        resp = http.patch(
            f"/api/v1/questions/{qid}", json={"settings": {"type": "label_selection", "options": options}}
        )
        assert resp.status_code == 200, resp.text
        assert upsert({"score": 0.7}, "no").status_code == 200
        assert upsert({"score": 0.7}, "Yes!").status_code == 422


def test_webhook_check_asks_once_per_session_within_its_ttl() -> None:
    import asyncio

    asked: list[object] = []
    hooks: list[str] = []

    async def ask(db: object) -> list[str]:
        asked.append(db)
        return list(hooks)

    check = _settings_cache_module().WebhookCheck(ask, ttl=60.0)

    class Session:
        pass

    one, two = Session(), Session()

    async def scenario() -> list[bool]:
        out = [await check.any_enabled(one), await check.any_enabled(one)]
        hooks.append("on")
        out += [await check.any_enabled(one), await check.any_enabled(two)]
        check.ttl = 0.0
        out.append(await check.any_enabled(one))
        return out

    assert asyncio.run(scenario()) == [False, False, False, True, True]
    assert asked == [one, two, one]


def test_records_still_reach_an_enabled_webhook(env: Env) -> None:
    """With the webhook skip applied, a webhook that is enabled still gets every record event of a bulk upsert."""
    import http.server
    import json
    import threading

    got: list[dict[str, Any]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            got.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    client = _client(env.info)
    settings = rg.Settings(
        fields=[rg.TextField(name="text", client=client)],
        questions=[rg.LabelQuestion(name="label", labels=["yes", "no"], client=client)],
    )
    dataset = rg.Dataset(name="webhook-check", settings=settings, workspace=env.info.workspace, client=client).create()
    did = str(dataset.id)
    with _http(env.info) as http_client:
        items = [{"external_id": f"w{i}", "fields": {"text": f"t{i}"}} for i in range(3)]
        resp = http_client.put(f"/api/v1/datasets/{did}/records/bulk", json={"items": items})
        assert resp.status_code == 200, resp.text  # no webhook yet: nothing is sent
        hook = http_client.post(
            "/api/v1/webhooks",
            json={"url": f"http://127.0.0.1:{httpd.server_address[1]}/hook", "events": ["record.created"]},
        )
        assert hook.status_code == 201, hook.text
        try:
            more = [{"external_id": f"w{i}", "fields": {"text": f"t{i}"}} for i in range(3, 6)]
            resp = http_client.put(f"/api/v1/datasets/{did}/records/bulk", json={"items": more})
            assert resp.status_code == 200, resp.text
            deadline = time.monotonic() + 30
            while len(got) < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            http_client.delete(f"/api/v1/webhooks/{hook.json()['id']}")
            httpd.shutdown()
    assert sorted(e["data"]["external_id"] for e in got) == ["w3", "w4", "w5"]
    assert {e["type"] for e in got} == {"record.created"}

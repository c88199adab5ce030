"""Two reviewers and an adjudicator label by clicks in the real Argilla web UI (headless Chromium), signed in
with the passwords `greval annotate users add` wrote; `status` counts what they did, the disputed records go to
the adjudicator, and her labels become the gold.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.annotation import server
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import Spec, resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY
from tests.test_annotation import rag_records
from tests.test_annotation_browser import ARGS, CHROMIUM, open_dataset, pytestmark  # noqa: F401  (same markers and skips)

SPEC = "answer_alignment"
CHOICE = {"ann1": "Correct", "ann2": "Incorrect", "judy": "Correct", "tri1": "Correct", "tri2": "Incorrect"}
CHOICE["tri3"] = "Correct"


@pytest.fixture(scope="module")
def info(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.ServerInfo]:
    with server.running_server(data=tmp_path_factory.mktemp("argilla-team")) as i:
        yield i


def _cli(info: server.ServerInfo, *args: str) -> str:
    from greval.cli import main

    env = {"ARGILLA_API_URL": None, "ARGILLA_API_KEY": None, "COLUMNS": "200"}
    res = CliRunner().invoke(main, ["annotate", *args, "--data-dir", str(info.data_dir)], env=env)
    assert res.exit_code == 0, (res.output, res.exception)
    return res.output


def _mine(page: Any, who: str) -> None:
    """Filters → Metadata → Assigned to → ``who``: the reviewer's own queue, by clicks as a person filters it."""
    page.get_by_role("button", name="Filters").click()
    for step in ("Metadata", "Assigned to", who):
        page.get_by_text(step, exact=True).first.click(timeout=30_000)
    page.wait_for_url(f"**metadata=assigned_to.{who}**", timeout=30_000)
    page.keyboard.press("Escape")


def _label_all(
    browser: Any, info: server.ServerInfo, who: str, password: str, dataset: str, n: int, shot: Path, mine: bool = False
) -> str:
    """``who`` signs in, opens ``dataset`` (``mine``: filtered to the records assigned to them) and submits
    ``CHOICE[who]`` on each of its ``n`` records by clicks; the text of the first record's page."""
    page = open_dataset(browser, info.url, who, password, dataset)
    if mine:
        _mine(page, who)
    text = ""
    for k in range(n):
        page.get_by_text(f"{k + 1} of {n}").first.wait_for(timeout=30_000)
        choice = page.locator(f"input[id='verdict_{CHOICE[who]}']")
        choice.wait_for(state="attached", timeout=30_000)
        if not choice.is_checked():  # the judge's suggestion is pre-selected; clicking it again would clear it
            page.locator(f"label[for='verdict_{CHOICE[who]}']").click()
        if k == 0:
            page.screenshot(path=str(shot), full_page=True)
            text = str(page.inner_text("body"))
        page.click("button.button--submit")
        page.wait_for_timeout(1200)
    # the UI counts this person's n answers (its counter follows the last submit a moment later: waited for)
    page.wait_for_function(r"n => new RegExp('Submitted\\s*' + n + '\\b').test(document.body.innerText)", arg=n)
    assert re.search(rf"Submitted\s*{n}\b", page.inner_text("body"))
    page.close()
    return text


def test_two_reviewers_and_an_adjudicator_label_by_clicks(
    info: server.ServerInfo, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.sync_api import sync_playwright

    from greval.cli import main

    spec = resolve_specs([SPEC])[0]
    assert isinstance(spec, Spec)
    store_path = tmp_path / "store.sqlite"
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.reset()
    with Store(store_path) as st:
        run([spec], rag_records(3), st, JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url))
    for name, role in (("ann1", "annotator"), ("ann2", "annotator"), ("judy", "adjudicator")):
        _cli(info, "users", "add", name, "--role", role)
    passwords = json.loads((info.data_dir / "reviewers.json").read_text())[info.url]
    out = _cli(info, "push", "--store", str(store_path), "--spec", SPEC, "--overlap", "2")
    assert "Assigned to reviewers (records each): ann1 3, ann2 3." in out

    keep = Path("/tmp/greval-browser-shots")
    keep.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for who in ("ann1", "ann2"):
                shot = tmp_path / f"team-{who}.png"
                _label_all(browser, info, who, passwords[who]["password"], SPEC, 3, shot)
                shutil.copy(shot, keep / shot.name)
            status = _cli(info, "status", "--spec", SPEC)
            assert f"Dataset '{SPEC}': 3 of 3 records completed" in status
            rows = {
                c[0]: c[1:6]
                for c in (
                    [x.strip() for x in line.split("│")[1:-1]] for line in status.splitlines() if line.count("│") == 8
                )
            }
            assert rows["ann1"] == ["3", "3", "0", "0", "0"] and rows["ann2"] == ["3", "3", "0", "0", "0"]

            adj = _cli(info, "adjudicate", "--store", str(store_path), "--spec", SPEC)
            assert "3 of 3 records reviewed by two or more people are disputed" in adj
            shot = tmp_path / "team-judy.png"
            text = _label_all(browser, info, "judy", passwords["judy"]["password"], f"{SPEC}-adjudication", 3, shot)
            shutil.copy(shot, keep / shot.name)
            assert "Reviews" in text and "ann1" in text and "ann2" in text and "judge (openai:judge-test)" in text
        finally:
            browser.close()

    _cli(info, "pull", "--store", str(store_path), "--spec", SPEC)
    pulled = _cli(info, "adjudicate", "--store", str(store_path), "--spec", SPEC, "--pull")
    assert "3 disputed records, 3 adjudicated (judy 3)" in pulled
    report = tmp_path / "agreement.json"
    args = ["agreement", "--store", str(store_path), "--spec", SPEC, "--bootstrap", "0", "--dataset", SPEC]
    args += ["--dataset", f"{SPEC}-adjudication", "--gold", "adjudicated:judy", "--json", str(report)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    gold = json.loads(report.read_text())["reviewers"]["gold_labels"]
    assert sorted((g["label"], g["source"]) for g in gold) == [("Correct", "adjudicator")] * 3
    with Store(store_path) as st:
        labels = st.query("SELECT annotator, label FROM human_labels WHERE status='submitted' ORDER BY annotator")
    assert [(r["annotator"], r["label"]) for r in labels] == [
        *[("ann1", "Correct")] * 3,
        *[("ann2", "Incorrect")] * 3,
        *[("judy", "Correct")] * 3,
    ]


def _status_rows(status: str) -> dict[str, list[str]]:
    cells = ([x.strip() for x in line.split("│")[1:-1]] for line in status.splitlines() if line.count("│") == 8)
    return {c[0]: c[1:6] for c in cells}


def test_three_reviewers_with_overlap_two_label_their_own_queues_by_clicks(
    info: server.ServerInfo, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three reviewers, each record assigned to two of them: each filters Argilla's queue to their own records
    (Filters → Metadata → Assigned to → name) and labels them by clicks; `annotate status` shows what Argilla's
    own progress endpoint counts, the assignment greval made, and every record completed."""
    import httpx

    spec = resolve_specs([SPEC])[0]
    assert isinstance(spec, Spec)
    store_path, dataset, team = tmp_path / "store.sqlite", "three-reviewers", ("tri1", "tri2", "tri3")
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.reset()
    with Store(store_path) as st:
        run([spec], rag_records(3), st, JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url))
    for name in team:
        _cli(info, "users", "add", name, "--role", "annotator")
    passwords = json.loads((info.data_dir / "reviewers.json").read_text())[info.url]
    push = ["push", "--store", str(store_path), "--spec", SPEC, "--dataset", dataset, "--overlap", "2"]
    out = _cli(info, *push, "--reviewers", ",".join(team))
    assert "Assigned to reviewers (records each): tri1 2, tri2 2, tri3 2." in out

    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            for who in team:
                _label_all(browser, info, who, passwords[who]["password"], dataset, 2, tmp_path / f"{who}.png", True)
        finally:
            browser.close()

    status = _cli(info, "status", "--spec", SPEC, "--dataset", dataset)
    rows = _status_rows(status)
    with httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": info.api_key}, timeout=30) as http:
        did = next(d["id"] for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == dataset)
        progress = {u["username"]: u for u in http.get(f"/api/v1/datasets/{did}/users/progress").json()["users"]}
        records = http.get(f"/api/v1/datasets/{did}/records", params={"include": "responses"}).json()["items"]
        names = {u["id"]: u["username"] for u in http.get("/api/v1/users").json()["items"]}
    assigned = {who: sum(who in r["metadata"]["assigned_to"] for r in records) for who in team}
    for who in team:
        p = progress[who]
        want = [p["completed"][s] + p["pending"][s] for s in ("submitted", "discarded", "draft")]
        assert [int(x) for x in rows[who][1:4]] == want == [2, 0, 0], (who, rows[who], p)
        assert int(rows[who][0]) == assigned[who] == 2 and rows[who][4] == "0"
    # Each record was answered by exactly the two reviewers assigned to it (the filter showed each their own).
    for r in records:
        answered = sorted(names[x["user_id"]] for x in r["responses"] if x["status"] == "submitted")
        assert answered == sorted(r["metadata"]["assigned_to"]), r["external_id"]
    assert f"Dataset '{dataset}': 3 of 3 records completed" in status

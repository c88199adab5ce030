"""Agents reviewed by people (issue 45): a per-step trajectory spec pushed to Argilla (one Argilla record per
agent step, the trajectory shown step by step, the judge's verdict as the suggestion), answered by two
reviewers through the Argilla SDK, pulled back as per-step human labels, and `greval agreement` on them.

Real argilla-server 2.8.0 (embedded, one for this module), real argilla SDK, real verdicts from the local
OpenAI-compatible test server (scripted per step).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sklearn.metrics as skm
from click.testing import CliRunner

from greval.annotation import dataset as ds
from greval.annotation import server
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import Spec, resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY

import greval.cli.annotate_sync  # noqa: F401  (attaches push / pull)  # isort: skip

rg = pytest.importorskip("argilla")

pytestmark = [pytest.mark.slow, pytest.mark.argilla]


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


#: Two trips (OpenAI message lists). trip-1's steps: s1 user, s2 s3 calls, s4 s5 results, s6 call, s7 result,
#: s8 final answer; trip-2's: s1 user, s2 call, s3 result, s4 call, s5 result, s6 final answer.
TRIPS = [
    {"id": "trip-1", "trajectory": [
        {"role": "user", "content": "Which is warmer today, Paris or Lyon? Book two nights there."},
        {"role": "assistant", "tool_calls": [call("c1", "get_weather", city="Paris"),
                                             call("c2", "get_weather", city="Lyon")]},
        {"role": "tool", "tool_call_id": "c1", "content": "Paris: 18 C, cloudy"},
        {"role": "tool", "tool_call_id": "c2", "content": "Lyon: 24 C, sunny <b>hot</b>"},
        {"role": "assistant", "tool_calls": [call("c3", "book_hotel", city="Lyon", nights=2,
                                                  guest={"name": "Ada", "tags": ["quiet"]})]},
        {"role": "tool", "tool_call_id": "c3", "content": "Booked: Hotel Rhone, 2 nights"},
        {"role": "assistant", "content": "Lyon is warmer (24 C). Hotel Rhone is booked for two nights."}]},
    {"id": "trip-2", "trajectory": [
        {"role": "user", "content": "Book one night in Nice if it is sunny there."},
        {"role": "assistant", "tool_calls": [call("c1", "book_hotel", city="Nice", nights=0)]},
        {"role": "tool", "tool_call_id": "c1", "content": "Error: nights must be at least 1"},
        {"role": "assistant", "tool_calls": [call("c2", "get_weather", city="Nice")]},
        {"role": "tool", "tool_call_id": "c2", "content": "Nice: 21 C, sunny"},
        {"role": "assistant", "content": "It is sunny in Nice, and your night is booked."}]},
]  # fmt: skip

TRIPS_BY_ID = {t["id"]: t for t in TRIPS}
#: The judge's verdict on each agent step (scripted).
JUDGED = {
    "trip-1": {"s2": "Useful", "s3": "Useful", "s6": "Useful", "s8": "Useful"},
    "trip-2": {"s2": "Harmful", "s4": "Useful", "s6": "Harmful"},
}


def step_verdicts(labels: dict[str, str]) -> dict[str, Any]:
    return {"verdicts": [{"id": s, "reason": f"why {s} is {lab}", "label": lab} for s, lab in labels.items()]}


@dataclass
class Env:
    info: server.ServerInfo
    store_path: Path
    spec: Spec
    records: dict[str, Record]

    def cli(self, *args: str, ok: bool = True) -> Any:
        from greval.cli import main

        env = {"ARGILLA_API_URL": self.info.url, "ARGILLA_API_KEY": self.info.api_key}
        result = CliRunner().invoke(main, list(args), env=env)
        if ok:
            assert result.exit_code == 0, (result.output, result.exception)
        return result

    def client(self, api_key: str | None = None) -> Any:
        return rg.Argilla(api_url=self.info.url, api_key=api_key or self.info.api_key)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, openai_server: OpenAIServer) -> Iterator[Env]:
    tmp = tmp_path_factory.mktemp("annotation_trajectory")
    spec = next(s for s in resolve_specs(["step_usefulness"]) if isinstance(s, Spec))
    records = {t["id"]: Record.from_mapping(t) for t in TRIPS}
    store_path = tmp / "store.sqlite"
    openai_server.reset()
    openai_server.script(
        [
            {"match": f"Item ids: {', '.join(labels)}", "action": {"type": "respond", "content": step_verdicts(labels)}}
            for labels in JUDGED.values()
        ]
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        cfg = JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url, timeout=10)
        with Store(store_path) as st:
            assert run([spec, *resolve_specs(["agent_task_completion"])], list(records.values()), st, cfg).failed == 0
    openai_server.reset()
    with server.running_server(data=tmp / "argilla") as info:
        yield Env(info=info, store_path=store_path, spec=spec, records=records)


def _records(env: Env, name: str) -> list[Any]:
    dataset = env.client().datasets(name, workspace=env.info.workspace)
    assert dataset is not None
    return list(dataset.records(with_suggestions=True, with_responses=True))


def _by_step(env: Env, name: str) -> dict[tuple[str, str], Any]:
    return {(dict(r.metadata)["record_id"], dict(r.metadata)["item_id"]): r for r in _records(env, name)}


# ----------------------------------------------------------------------------------------------- push
def test_a_per_step_spec_is_pushed_one_argilla_record_per_agent_step(env: Env) -> None:
    """`greval annotate push` of step_usefulness (target each: steps) made a KeyError ('steps' had no title for
    the field under review); now each agent step is one Argilla record with the judge's verdict suggested."""
    out = env.cli("annotate", "push", "--store", str(env.store_path), "--spec", env.spec.name).output
    assert "Pushed 7 of 7 items" in out, out
    got = _by_step(env, env.spec.name)
    assert set(got) == {(rid, sid) for rid, labels in JUDGED.items() for sid in labels}
    for (rid, sid), rec in got.items():
        assert rec.suggestions[ds.QUESTION].value == JUDGED[rid][sid]
        assert rec.fields[ds.REASON_FIELD] == f"why {sid} is {JUDGED[rid][sid]}"
    dataset = env.client().datasets(env.spec.name, workspace=env.info.workspace)
    fields = {f.name: f for f in dataset.settings.fields}
    assert fields[ds.ITEM_FIELD].title == "Under review: agent step"
    assert fields["trajectory"].use_markdown and fields[ds.ITEM_FIELD].use_markdown
    assert "answer" not in fields  # a trajectory spec reads the trajectory, not an answer field it never had
    assert "Each record is one agent step" in (dataset.settings.guidelines or "")

    booking = got["trip-1", "s6"].fields
    assert booking[ds.ITEM_FIELD].startswith("**Step 6** · tool call `book_hotel` · id `s6` · call `c3`\n\n```json\n")
    pretty = json.dumps({"city": "Lyon", "nights": 2, "guest": {"name": "Ada", "tags": ["quiet"]}}, indent=2)
    assert f"```json\n{pretty}\n```" in booking[ds.ITEM_FIELD]  # the arguments as indented JSON, nested ones too
    shown = booking["trajectory"]
    heads = [line for line in shown.splitlines() if line.startswith(("**Step", "<details>"))]
    # every step, numbered
    assert len(heads) == 8 and all(re.search(rf"Step {n}\b", h) for n, h in enumerate(heads, start=1))
    assert heads[5].endswith("**◀ under review**") and sum("under review" in h for h in heads) == 1
    # a tool result folded, its text escaped (a tool's output cannot inject markup into the page)
    assert "<details><summary>Step 5 · tool result (get_weather, c2) · id s5</summary>" in shown
    assert "<pre>Lyon: 24 C, sunny &lt;b&gt;hot&lt;/b&gt;</pre>\n\n</details>" in shown
    assert got["trip-2", "s6"].fields[ds.ITEM_FIELD] == (
        "**Step 6** · final answer · id `s6`\n\nIt is sunny in Nice, and your night is booked."
    )


def test_a_record_level_trajectory_spec_is_one_argilla_record_per_trajectory(env: Env) -> None:
    """agent_task_completion (one verdict per trajectory): the same step-by-step field, no step marked."""
    env.cli("annotate", "push", "--store", str(env.store_path), "--spec", "agent_task_completion")
    got = {dict(r.metadata)["record_id"]: r for r in _records(env, "agent_task_completion")}
    assert set(got) == set(TRIPS_BY_ID) and all(dict(r.metadata)["item_id"] == "-" for r in got.values())
    shown = got["trip-2"].fields["trajectory"]
    assert shown.startswith("**Step 1** · user · id `s1`\n\nBook one night in Nice") and "under review" not in shown
    assert "**Step 2** · tool call `book_hotel` · id `s2` · call `c1`\n\n```json\n" in shown
    assert "<details><summary>Step 3 · tool result (book_hotel, c1) · id s3</summary>" in shown
    assert ds.ITEM_FIELD not in got["trip-2"].fields


# ------------------------------------------------------------------------------------------- review
#: What the two reviewers answer, step by step: alice differs from the judge on trip-1's s3 (the second
#: weather call, redundant to her) and trip-2's s6; bob answers trip-2 only and agrees with the judge.
ALICE = {**{("trip-1", s): lab for s, lab in JUDGED["trip-1"].items()}, ("trip-1", "s3"): "Redundant",
         **{("trip-2", s): lab for s, lab in JUDGED["trip-2"].items()}, ("trip-2", "s6"): "Useful"}  # fmt: skip
BOB = {("trip-2", s): lab for s, lab in JUDGED["trip-2"].items()}


def _annotator(env: Env, name: str) -> str:
    """A new annotator of the workspace: their user id."""
    client = env.client()
    user = rg.User(username=name, password="annotator-pass-123", role="annotator", client=client).create()
    client.workspaces(env.info.workspace).add_user(user)
    return str(user.id)


def _answer_through_the_sdk(env: Env, name: str, answers: dict[tuple[str, str], str]) -> None:
    """``name``'s answers logged through the Argilla SDK (by the owner on their behalf, as a team lead importing
    answers does: argilla-server 2.8 forbids an annotator's key to list a dataset's records through the SDK)."""
    user_id = _annotator(env, name)
    dataset = env.client().datasets(env.spec.name, workspace=env.info.workspace)
    answered = []
    for record in dataset.records(with_responses=True):
        meta = dict(record.metadata)
        label = answers.get((meta["record_id"], meta["item_id"]))
        if label is not None:
            record.responses.add(rg.Response(ds.QUESTION, label, user_id=user_id, status="submitted"))
            answered.append(record)
    assert len(answered) == len(answers)
    dataset.records.log(answered)


def test_per_step_answers_come_back_as_per_step_labels_and_agreement_is_per_step(env: Env, tmp_path: Path) -> None:
    _answer_through_the_sdk(env, "alice", ALICE)
    _answer_through_the_sdk(env, "bob", BOB)
    out = env.cli("annotate", "pull", "--store", str(env.store_path), "--spec", env.spec.name).output
    assert "10 submitted" in out, out
    with Store(env.store_path) as st:
        rows = st.query("SELECT * FROM human_labels WHERE spec_name=? AND status='submitted'", (env.spec.name,))
    got = {(r["annotator"], r["record_id"], r["item_id"]): r["label"] for r in rows}
    want = {("alice", *k): v for k, v in ALICE.items()} | {("bob", *k): v for k, v in BOB.items()}
    assert got == want
    assert {r["record_hash"] for r in rows if r["record_id"] == "trip-1"} == {env.records["trip-1"].hash}

    # `greval agreement` pairs each step's verdict with its people's majority (a tie is no majority), step by step
    report = tmp_path / "agreement.json"
    res = env.cli("agreement", "--store", str(env.store_path), "--spec", env.spec.name, "--bootstrap", "0",
                  "--json", str(report))  # fmt: skip
    judge = {(rid, sid): lab for rid, labels in JUDGED.items() for sid, lab in labels.items()}
    majority = {}
    for step in judge:
        said = Counter(who[step] for who in (ALICE, BOB) if step in who).most_common()
        if len(said) == 1 or said[0][1] > said[1][1]:
            majority[step] = said[0][0]
    assert len(majority) == 6  # trip-2's s6: alice Useful, bob Harmful
    assert f"{len(majority)} items compared of {len(judge)}" in res.output, res.output
    metrics = json.loads(report.read_text())["metrics"]
    pairs = [(judge[k], majority[k]) for k in sorted(majority)]
    assert metrics["accuracy"]["n"] == len(pairs)
    assert metrics["accuracy"]["value"] == pytest.approx(sum(j == h for j, h in pairs) / len(pairs))
    kappa = skm.cohen_kappa_score([h for _, h in pairs], [j for j, _ in pairs])
    assert metrics["cohen_kappa"]["value"] == pytest.approx(kappa)

    # per trajectory: `--level record` scores each trajectory the way the spec scores it from its steps (the share
    # of Useful steps), each person's from their own labels, the people's mean against the judge's
    res = env.cli("agreement", "--store", str(env.store_path), "--spec", env.spec.name, "--bootstrap", "0",
                  "--level", "record", "--json", str(report))  # fmt: skip
    share = lambda labels: sum(lab == "Useful" for lab in labels) / len(labels)  # noqa: E731
    errors = []
    for rid, labels in JUDGED.items():
        people = [share([who[k] for k in who if k[0] == rid]) for who in (ALICE, BOB) if any(k[0] == rid for k in who)]
        errors.append(abs(share(list(labels.values())) - sum(people) / len(people)))
    data = json.loads(report.read_text())
    assert data["counts"]["items_compared"] == len(JUDGED)
    assert data["metrics"]["mae"]["value"] == pytest.approx(sum(errors) / len(errors))


# ------------------------------------------------------------------------------------------ browser
CHROMIUM = "/usr/bin/chromium"


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)")
def test_a_person_reads_the_trajectory_and_labels_a_step_by_clicks_in_argilla(env: Env, tmp_path: Path) -> None:
    """Argilla's own page (headless Chromium): the trajectory field shows the steps numbered, the tool calls'
    arguments as code, the tool results folded (opened by a click); the person changes the judge's suggested
    label of the step under review by clicks, submits, and the pull stores that step's label."""
    playwright = pytest.importorskip("playwright.sync_api")
    from tests.test_annotation_browser import ARGS, open_dataset

    info, name = env.info, "steps-in-the-browser"  # a dataset of its own: nobody has answered it yet
    env.cli("annotate", "push", "--store", str(env.store_path), "--spec", env.spec.name, "--dataset", name)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = open_dataset(browser, info.url, info.username, info.password, name)
            page.get_by_text("Step 1", exact=False).first.wait_for(timeout=60_000)
            shown = page.locator("details").first
            assert shown.get_attribute("open") is None  # a tool result, folded
            assert not shown.locator("pre").is_visible()
            shown.locator("summary").click()
            # the first tool result of whichever trip Argilla shows first (its record order is its own)
            results = {m["content"] for t in TRIPS for m in t["trajectory"] if m["role"] == "tool"}
            assert shown.locator("pre").is_visible() and shown.locator("pre").inner_text() in results
            assert page.locator("pre code").count() >= 2  # the tool calls' arguments as code blocks
            head = page.locator("p", has_text="◀ under review").first.inner_text()  # the step in the trajectory
            rid = "trip-1" if "Paris" in page.content() else "trip-2"
            sid = re.search(r"id (s\d+)", head)[1]  # type: ignore[index]
            judged = JUDGED[rid][sid]
            assert page.locator(f"input[id='verdict_{judged}']").is_checked()  # the judge's verdict, suggested
            mine = next(lab for lab in ("Useful", "Redundant", "Harmful") if lab != judged)
            page.locator(f"label[for='verdict_{mine}']").click()
            page.screenshot(path=str(tmp_path / "argilla-trajectory.png"), full_page=True)
            page.click("button.button--submit")
            page.get_by_text("submitted", exact=False).first.wait_for(timeout=30_000)
            page.wait_for_timeout(1500)
        finally:
            browser.close()
    env.cli("annotate", "pull", "--store", str(env.store_path), "--spec", env.spec.name, "--dataset", name)
    with Store(env.store_path) as st:
        rows = st.query(
            "SELECT * FROM human_labels WHERE spec_name=? AND dataset=? AND status='submitted'", (env.spec.name, name)
        )
    assert [(r["annotator"], r["record_id"], r["item_id"], r["label"]) for r in rows] == [
        (info.username, rid, sid, mine)
    ]

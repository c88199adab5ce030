"""align's labelled units under a chosen gold (``greval align --gold``): each unit's label is the gold
``greval agreement --gold`` computes on the same labels (one function: greval.agreement.gold.choose_gold), and
the human ceiling is agreement's human–human figure, adjudicators left out as agreement leaves them out. A real
store judged through the local OpenAI-compatible test server (tests/align/scripted.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.agreement.models import GoldChoice
from greval.align.labels import LabelSet, load_labels
from greval.cli import main
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.align import scripted as sc
from tests.conftest import TEST_KEY

N = 24
DISPUTED = ("r0", "r3", "r8", "r13", "r21")


@pytest.fixture(scope="module")
def team(openai_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two reviewers labelled every record and disagree on five; judy settled those five (her label is the
    truth on r0, r3, r8, the other on r13, r21). Built once: the tests only read it."""
    openai_server.reset()
    openai_server.script(sc.rules(N))
    path = tmp_path_factory.mktemp("team") / "team.sqlite"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", TEST_KEY)
        sc.labelled_store(path, openai_server.base_url, N, annotators=2)
    flip = {"yes": "no", "no": "yes"}
    with Store(path) as st:
        rows = {(r["record_id"], r["annotator"]): r for r in st.human_labels("supported")}
        changed = [{**rows[rid, "person1"], "label": flip[rows[rid, "person1"]["label"]]} for rid in DISPUTED]
        judy = [
            {**rows[rid, "person0"], "annotator": "judy", "dataset": "supported-adjudication"}
            | ({} if n < 3 else {"label": flip[rows[rid, "person0"]["label"]]})
            for n, rid in enumerate(DISPUTED)
        ]
        st.put_human_labels([{**r, "spec_name": "supported"} for r in changed + judy])
    return path


def _labels(llm: Any, path: Path, gold: str | None) -> LabelSet:
    with Store(path) as st:
        choice = GoldChoice.parse(gold) if gold is not None else None
        return load_labels(st, "supported", None, sc.judge(llm.base_url).key, gold=choice)


def _agreement(path: Path, *args: str) -> dict[str, Any]:
    out = path.with_suffix(".json")
    res = CliRunner().invoke(
        main, ["agreement", "--store", str(path), "--spec", "supported", "--bootstrap", "0", *args, "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    return dict(json.loads(out.read_text()))


def _unit_labels(labels: LabelSet) -> dict[str, str]:
    names = labels.scale.labels or []
    return {u.record_id: names[int(u.human)] for u in labels.units}


@pytest.mark.parametrize("gold", ["adjudicated:judy", "dawid-skene", "person1"])
def test_each_unit_s_label_is_agreement_s_gold_and_the_ceiling_agreement_s(llm: Any, team: Path, gold: str) -> None:
    from sklearn.metrics import cohen_kappa_score

    labels = _labels(llm, team, gold)
    report = _agreement(team, "--gold", gold)
    want = {g["item"]: g["label"] for g in report["reviewers"]["gold_labels"] if g["label"] is not None}
    got = _unit_labels(labels)
    assert got == want and len(got) == N
    assert labels.gold == GoldChoice.parse(gold).describe()
    assert f"each unit's label is the gold ({labels.gold}), not people's consensus" in labels.notes
    shown = report["ceiling"]["human_pairwise_mean"]
    c = labels.ceiling
    assert c is not None and (c.value, c.n) == (shown["value"], shown["n"])
    if gold == "adjudicated:judy":
        with Store(team) as st:
            people = {(r["record_id"], r["annotator"]): r["label"] for r in st.human_labels("supported")}
        ids = sorted({rid for rid, _ in people})
        assert {rid: got[rid] for rid in DISPUTED} == {rid: people[rid, "judy"] for rid in DISPUTED}
        # The two reviewers' κ over every record both labelled (judy settles; she is not a third reviewer).
        kappa = cohen_kappa_score([people[i, "person0"] for i in ids], [people[i, "person1"] for i in ids])
        assert c.n == N and c.value == pytest.approx(kappa)


def test_without_a_gold_judy_is_one_more_reviewer_as_before(llm: Any, team: Path) -> None:
    """No --gold: the consensus of three on the disputed records (judy breaks the tie), the ceiling over every
    pair of the three — as `greval agreement` without --gold."""
    labels = _labels(llm, team, None)
    report = _agreement(team)
    shown = report["ceiling"]["human_pairwise_mean"]
    assert labels.gold is None and labels.ceiling is not None
    assert (labels.ceiling.value, labels.ceiling.n) == (shown["value"], shown["n"])
    assert labels.ceiling.value != _labels(llm, team, "adjudicated:judy").ceiling.value  # type: ignore[union-attr]


def test_the_command_takes_gold_and_a_gold_the_labels_cannot_give_is_one_line(llm: Any, team: Path) -> None:
    base = ["align", "--store", str(team), "--spec", "supported", "--judge", "openai:scripted-judge"]
    base += ["--base-url", llm.base_url, "--folds", "3", "--dry-run"]
    ok = CliRunner().invoke(main, [*base, "--gold", "adjudicated:judy"])
    assert ok.exit_code == 0, ok.output
    assert "each unit's label is the gold (adjudicated (judy; else majority)), not people's consensus" in ok.output
    assert "dry run: no model call made" in ok.output
    bad = CliRunner().invoke(main, [*base, "--gold", "nobody"])
    assert bad.exit_code == 2 and bad.output.strip().splitlines() == [
        "error: --gold 'nobody': no such annotator; annotators are judy, person0, person1"
    ]

"""The pages a person reads say one thing once (issue 40, items 3 and 9), checked in real headless Chromium:

- the prevalence-corrected share is one figure on the index, on the agreement page and in `greval agreement
  --store` (the judge's shares over every verdict, people's and the error rates over the labelled ones), with
  what a reader must know of it — a judge no better than chance — in its row; one page states one resample
  count;
- the agreement page's confusion heatmap writes every count readably (WCAG contrast of the rendered colours)
  and each count opens its records in the explorer; the charts' legends cover no bar; a κ where people gave
  one label says so instead of "0.000 [0.000, 0.000]";
- the explorer lists records in record-id order, keeps each row one line at 1280 px (the reason cut, not the
  table widened), and shows no empty item column for a record-level metric.

The store: 20 records of two systems judged through the local test server, whose answers are scripted per
record (the judge says "correct" on even record numbers), and people's labels imported as `greval annotate
import-labels` stores them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.agreement.models import AgreementReport, CategoricalReport
from greval.cli import main
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.report.agreement import HUMAN_SHARE, JUDGE_SHARE
from greval.report.format import best_first
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests import test_report_explorer

_page = test_report_explorer._page
browser = test_report_explorer.browser  # the module's Chromium (a fixture)

METRIC = "graphrag_qa_correct"
#: The records in the order the dataset lists them (not record-id order: the explorer sorts them).
IDS = [f"r{i}" for i in (7, 2, 15, 0, 11, 19, 4, 9, 13, 1, 17, 6, 10, 3, 18, 8, 5, 14, 12, 16)]
REASON = "The answer restates the gold answer's main point in other words and adds nothing it contradicts. " * 3
CHANCE = "judge no better than chance"


def _judge(rid: str) -> str:
    return "correct" if int(rid[1:]) % 2 == 0 else "incorrect"


def _store(llm: OpenAIServer, path: Path) -> Path:
    """The 20 records judged: system A is r0–r9, system B r10–r19."""
    llm.script(
        [
            {
                "match": f"ANSWER {rid}.",
                "action": {"type": "respond", "text": json.dumps({"reason": REASON, "label": _judge(rid)})},
            }
            for rid in IDS
        ]
    )
    recs = [
        Record.from_mapping(
            {"id": rid, "question": f"q {rid}?", "expected_answer": "gold", "answer": f"ANSWER {rid}."}
            | {"system": "A" if int(rid[1:]) < 10 else "B"}
        )
        for rid in IDS
    ]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        run(resolve_specs([METRIC]), recs, st, cfg, options=RunOptions(retry=RetryPolicy(base_delay=0.01)))
    return path


def _label(path: Path, human: Mapping[str, str], annotator: str = "ann1") -> None:
    with Store(path) as st:
        rows = st.query("SELECT record_hash, record_id FROM verdicts WHERE spec_name=?", (METRIC,))
        st.put_human_labels(
            {
                "spec_name": METRIC,
                "record_hash": r["record_hash"],
                "item_id": "",
                "annotator": annotator,
                "record_id": r["record_id"],
                "label": human[r["record_id"]],
                "status": "submitted",
                "source": "import",
            }
            for r in rows
            if r["record_id"] in human
        )


def _report(store: Path, out: Path, resamples: int = 200) -> Path:
    args = ["report", "--store", str(store), "-o", str(out), "--bootstrap", str(resamples)]
    res = CliRunner().invoke(main, args, terminal_width=250)
    assert res.exit_code == 0, res.output
    return out


def _agreement_cli(store: Path, out: Path) -> tuple[dict[str, Any], str]:
    """`greval agreement --store` on the metric: its JSON and what it printed."""
    args = ["agreement", "--store", str(store), "--spec", METRIC, "--bootstrap", "200", "--json", str(out)]
    args += ["--decimals", "3"]  # as the pages write them
    res = CliRunner().invoke(main, args, terminal_width=250)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.output


def _table(page: Any, heading: str) -> list[dict[str, str]]:
    """The rows (cell texts by column head) of the first table after the heading that starts with ``heading``."""
    head, rows = page.evaluate(
        """(heading) => {
            const h = [...document.querySelectorAll('h2')].find((e) => e.textContent.startsWith(heading));
            let t = h.nextElementSibling;
            while (t && t.tagName !== 'TABLE') t = t.nextElementSibling;
            const text = (cells) => [...cells].map((c) => c.innerText.trim());
            return [text(t.querySelectorAll('th')),
                    [...t.querySelectorAll('tr')].filter((r) => r.querySelector('td')).map((r) => text(r.children))];
        }""",
        heading,
    )
    return [dict(zip(head, r, strict=True)) for r in rows]


def _shown(browser: Any, out: Path) -> tuple[dict[str, str], dict[str, dict[str, str]], str, str]:
    """What the index and the agreement page show of the corrected share: the index's 'all' row, the page's
    prevalence rows by label, and both pages' text (the page's with its prevalence heading first)."""
    page = _page(browser)
    page.goto((out / "index.html").as_uri())
    [whole] = [r for r in _table(page, "Prevalence-corrected") if r["system"] == "all"]
    index_text = page.locator("body").inner_text()
    page.goto((out / f"{METRIC}.agreement.html").as_uri())
    prevalence = {r["label"]: r for r in _table(page, "Prevalence")}
    title = page.locator("h2", has_text="Prevalence").inner_text()
    assert page.errors == []
    return whole, prevalence, index_text, title + "\n" + page.locator("body").inner_text()


@pytest.mark.browser
def test_the_corrected_share_is_one_figure_on_both_pages(llm: OpenAIServer, browser: Any, tmp_path: Path) -> None:
    store = _store(llm, tmp_path / "s.sqlite")
    # people on six of system A's records: sensitivity 2/3, specificity 2/3 (better than chance)
    human = {"r0": "correct", "r1": "incorrect", "r2": "correct", "r3": "correct", "r4": "incorrect"}
    _label(store, human | {"r5": "incorrect"})
    out = _report(store, tmp_path / "six")
    whole, prevalence, index_text, agreement_text = _shown(browser, out)
    assert (whole["judged"], whole["labelled"]) == ("20", "6")
    assert "(rogan-gladen; 20 judged, 6 labelled)" in agreement_text  # the page's share is over every verdict too
    for label, row in prevalence.items():
        # the index's "label: raw → corrected [CI]" is the page's judge share → its corrected cell, to the digit
        assert f"{label}: {row[JUDGE_SHARE]} → {row['corrected [CI]']}" in whole["label: raw → corrected [CI]"]
        assert row["note"] and row["note"] in whole["note"]  # what the reader must know, in the row, both pages
    report = json.loads((out / "report.json").read_text())
    page_json = json.loads((out / f"{METRIC}.agreement.json").read_text())
    [every] = [c for c in report["metrics"][0]["corrected"] if c["system"] == "all"]
    assert [s["corrected"] for s in every["shares"]] == [
        e["value"] for e in page_json["categorical"]["prevalence"]["corrected"]
    ]
    # `greval agreement --store` (terminal and JSON) shows that prevalence too, with the same names: the judge's
    # shares over every judged record, people's over the labelled ones (it took the judge's over the labelled)
    cli_json, printed = _agreement_cli(store, tmp_path / "agreement.json")
    assert cli_json["categorical"]["prevalence"] == page_json["categorical"]["prevalence"]
    assert "(rogan-gladen; 20 judged, 6 labelled)" in printed
    assert JUDGE_SHARE in printed and HUMAN_SHARE in printed  # the shares named as the page names them
    for label, row in prevalence.items():
        cells = [row[JUDGE_SHARE], row[HUMAN_SHARE], row["corrected [CI]"].split()[0]]
        assert re.search(rf"{label}[\s│]+" + r"[\s│]+".join(map(re.escape, cells)), printed), printed
    # one resample count on each page: the index states the one its notes count in (as the agreement page does)
    for text in (index_text, agreement_text):
        counts = {int(n) for n in re.findall(r"\d+/(\d+) resamples", text)}
        counts |= {int(n) for n in re.findall(r"(\d+) resamples", text)}
        assert counts == {200}, counts

    # three more labels: the judge is now no better than chance, and the row says so (it read "0.500 → —")
    _label(store, human | {"r5": "incorrect", "r6": "incorrect", "r7": "correct", "r8": "incorrect"})
    out = _report(store, tmp_path / "nine")
    whole, prevalence, _, _ = _shown(browser, out)
    assert whole["label: raw → corrected [CI]"] == "correct: 0.500 → undefined; incorrect: 0.500 → undefined"
    assert CHANCE in whole["note"]
    assert {row["corrected [CI]"] for row in prevalence.values()} == {"undefined"}
    assert all(CHANCE in row["note"] for row in prevalence.values())


def _wcag(rgb: str) -> float:
    """WCAG 2 relative luminance of a computed CSS colour "rgb(r, g, b)" (written out here, not greval's)."""
    r, g, b = (int(x) / 255 for x in re.findall(r"\d+", rgb)[:3])

    def lin(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def _contrast(fg: str, bg: str) -> float:
    hi, lo = sorted((_wcag(fg), _wcag(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _overlaps(a: Any, b: Any) -> bool:
    return bool(a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1)


@pytest.mark.browser
def test_agreement_page_counts_read_and_open_their_records(llm: OpenAIServer, browser: Any, tmp_path: Path) -> None:
    store = _store(llm, tmp_path / "s.sqlite")
    # system A: the judge right on 8 of 10; system B: people said "correct" on every record (one label)
    human = {f"r{i}": _judge(f"r{i}") for i in range(10)} | {"r8": "incorrect", "r9": "correct"}
    _label(store, human | {f"r{i}": "correct" for i in range(10, 20)})
    out = _report(store, tmp_path / "report")
    rep = best_first(AgreementReport.model_validate_json((out / f"{METRIC}.agreement.json").read_text()))
    assert rep.categorical is not None
    cm = rep.categorical.confusion
    cell = {
        (h, j): n
        for h, row in zip(cm.labels, cm.counts, strict=True)
        for j, n in zip(cm.judge_labels, row, strict=True)
    }
    want = {("correct", "correct"): 9, ("correct", "incorrect"): 6, ("incorrect", "correct"): 1}
    assert cell == want | {("incorrect", "incorrect"): 4}  # rows people's label, columns the judge's
    counts = cm.counts
    page = _page(browser)
    page.goto((out / f"{METRIC}.agreement.html").as_uri())
    cells = page.eval_on_selector_all(
        "table.heatmap td",
        """els => els.map((td) => { const t = td.querySelector('a') || td;
            return [td.innerText.trim(), getComputedStyle(td).backgroundColor, getComputedStyle(t).color,
                    td.querySelector('a') ? td.querySelector('a').getAttribute('href') : null]; })""",
    )
    assert [int(c[0]) for c in cells] == [n for row in counts for n in row]
    for text, bg, fg, _ in cells:
        assert _contrast(fg, bg) >= 4.5, (text, fg, bg)  # a count is written to be read (it was white on near-white)
    assert len({bg for _, bg, _, _ in cells}) == 4  # shaded by count
    assert all(href for text, _, _, href in cells if text != "0")
    # a count opens its records: people said "correct", the judge "incorrect" — six records
    page.locator("table.heatmap a", has_text="6").click()
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#count").inner_text() == "6 of 20 records"
    assert page.errors == []
    # per system: people gave one label in B, whose κ says so (it read "0.000 [0.000, 0.000]")
    page.goto((out / f"{METRIC}.agreement.html").as_uri())
    systems = {r["system"]: r for r in _table(page, "By system")}
    assert systems["B"]["cohen_kappa"] == "undefined: one label"
    assert re.fullmatch(r"-?\d\.\d{3} \[.*\]", systems["A"]["cohen_kappa"])
    assert page.errors == []
    # the charts' legends stand beside the bars, covering none
    for fig in _figures(rep.categorical):
        _no_bar_under_the_legend(fig)


@pytest.mark.browser
def test_the_reviewers_page_shows_people_pair_by_pair_and_opens_their_disagreements(
    llm: OpenAIServer, browser: Any, tmp_path: Path
) -> None:
    """Two people labelled all 20 records and disagree on four: the agreement page links a reviewers page whose
    pair matrix holds scikit-learn's κ of the two over the 20, whose disagreement table lists exactly those four
    records (each person's label, the majority gold a tie, the judge's), and whose record links open each
    record's own page in the explorer."""
    from sklearn.metrics import cohen_kappa_score

    store = _store(llm, tmp_path / "s.sqlite")
    ann1 = {f"r{i}": _judge(f"r{i}") for i in range(20)}
    flip = {"correct": "incorrect", "incorrect": "correct"}
    disputed = {"r3", "r6", "r11", "r14"}
    ann2 = {r: flip[v] if r in disputed else v for r, v in ann1.items()}
    _label(store, ann1)
    _label(store, ann2, "ann2")
    out = _report(store, tmp_path / "report", resamples=100)
    page = _page(browser)
    page.goto((out / f"{METRIC}.agreement.html").as_uri())
    page.get_by_role("link", name="Reviewers").click()
    page.wait_for_url(f"**/{METRIC}.reviewers.html")
    ids = sorted(ann1)
    kappa = cohen_kappa_score([ann1[i] for i in ids], [ann2[i] for i in ids])
    matrix = page.locator("h3", has_text="People with each other").locator("xpath=following-sibling::table[1]")
    assert f"{kappa:.3f} [" in matrix.inner_text() and "(n = 20)" in matrix.inner_text()
    rows = _table(page, "Disagreements between reviewers")
    assert sorted(r["record"] for r in rows) == sorted(disputed)
    for r in rows:
        rid = r["record"]
        assert (r["ann1"], r["ann2"], r["judge"]) == (ann1[rid], ann2[rid], _judge(rid))
        assert r["gold"] == "tie: correct / incorrect"
    assert page.locator("h2", has_text="Disagreements between reviewers").inner_text().endswith("(4 of 4 shown)")
    assert page.errors == []
    first = rows[0]["record"]
    page.get_by_role("link", name=first, exact=True).click()
    page.wait_for_selector("body[data-ready=record]")
    assert page.locator("#record h2").first.inner_text() == f"Record {first}"
    assert page.errors == []


def _figures(cat: CategoricalReport) -> list[Any]:
    from greval.report.agreement import distribution_figure, reliability_figure

    return [distribution_figure(cat), reliability_figure(cat)]


def _no_bar_under_the_legend(fig: Any) -> None:
    import matplotlib.pyplot as plt

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    [ax] = fig.axes
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in ax.patches]
    assert bars and not any(_overlaps(legend, b) for b in bars)
    plt.close(fig)


def test_no_legend_covers_a_bar_whatever_the_shares() -> None:
    """Bars as tall as the axes on both sides (every share equal, every precision 1): the legend still covers
    none (matplotlib's loc="best" put it over a bar)."""
    from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
    from tests.test_report import frame

    for h, j in (
        (["a", "b"] * 4, ["a", "b"] * 4),
        (["a", "b"] * 4, ["b", "a"] * 4),
        (["a", "a", "b", "b"], ["a", "b", "a", "b"]),
    ):
        rep = compute_agreement(frame(h, j), AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=0))
        assert isinstance(rep.categorical, CategoricalReport)
        for fig in _figures(rep.categorical):
            _no_bar_under_the_legend(fig)


def _natural(rid: str) -> tuple[str, int]:
    return rid[0], int(rid[1:])


@pytest.mark.browser
def test_the_explorer_lists_records_in_id_order_one_line_each(llm: OpenAIServer, browser: Any, tmp_path: Path) -> None:
    store = _store(llm, tmp_path / "s.sqlite")
    _label(store, {"r0": "correct", "r3": "correct"})
    out = _report(store, tmp_path / "report", 50)
    page = _page(browser, 1280)
    page.goto((out / "explorer" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=list]")
    shown = page.locator("#table tbody td:first-child").all_inner_texts()
    assert shown == sorted(IDS, key=_natural)  # record-id order (the dataset lists them r7, r2, r15 …)
    assert page.locator("#table thead th").first.get_attribute("aria-sort") == "ascending"
    # 1280 px: the table fits its box and each row is one line; the long reason is cut, whole in its title
    box = page.evaluate(
        "(() => { const s = document.querySelector('.scroll'); return [s.scrollWidth, s.clientWidth]; })()"
    )
    assert box[0] <= box[1], box
    heights = page.evaluate(
        """() => [...document.querySelectorAll('#table tbody tr')].map((r) => r.getBoundingClientRect().height)"""
    )
    line = page.evaluate("parseFloat(getComputedStyle(document.querySelector('#table tbody td')).lineHeight)")
    assert max(heights) < 2 * line, (heights, line)
    reason = page.locator("#table tbody td.reason").first
    assert reason.get_attribute("title") == REASON.strip() or reason.get_attribute("title") == REASON
    cut = (
        "(() => { const r = document.querySelector('#table tbody td.reason'); return r.scrollWidth > r.clientWidth })()"
    )
    assert page.evaluate(cut)
    # a record-level metric's human labels: no item column (its cells were all empty)
    page.locator("#table tbody a", has_text="r0").first.click()
    page.wait_for_selector("body[data-ready=record]")
    assert page.locator("table.humans th").all_inner_texts() == ["annotator", "human label", "comment"]
    assert page.locator("table.humans td").first.inner_text() == "ann1"
    # sorting by the record column again turns it round
    page.goto((out / "explorer" / "index.html").as_uri() + "#m=0&sort=id&dir=desc")
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#table tbody td:first-child").all_inner_texts() == sorted(IDS, key=_natural, reverse=True)
    assert page.errors == []

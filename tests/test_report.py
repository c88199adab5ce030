"""The report stage: the report of a store (metrics, systems side by side, agreement pages; rendered in Chromium),
and the agreement pages' HTML / Markdown, which never show junk: missing values render as empty cells, the
"steps" column appears only for ordered scales, and every note the report carries reaches both renderings (and says
what the CLI says). Agreement reports are computed with `compute_agreement` on small frames, never built by hand.
"""

from __future__ import annotations

import html
import json
import re
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import bootstrap

from greval.agreement import AgreementOptions, AgreementReport, AgreementScale, compute_agreement
from greval.cli import main
from greval.cli.agreement import agreement
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.report.agreement import render_html, render_markdown
from greval.report.store_report import build, mean_ci
from greval.runner import RunOptions, run
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

# -------------------------------------------------------------------------------------------------------- report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _store(llm: OpenAIServer, path: Path) -> None:
    recs = [
        Record.from_mapping(
            {
                "id": f"r{i}",
                "question": f"q{i}?",
                "expected_answer": "e",
                "answer": f"a{i}",
                "chunks": [f"c{i}.{k}" for k in range(3)],
                "system": "local" if i % 2 else "basic",
                "llm_calls": 2 + i % 2,
                "latency": 1.5 * (1 + i % 2),
            }
        )
        for i in range(12)
    ]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        run(
            resolve_specs(["answer_alignment", "chunk_evaluation"]),
            recs,
            st,
            cfg,
            options=RunOptions(retry=RetryPolicy(base_delay=0.01)),
        )
        rows = st.query(
            "SELECT record_hash, record_id, label, spec_hash FROM verdicts WHERE spec_name='answer_alignment'"
        )
        labels = ["Correct", "Acceptable", "Not Acceptable", "Incorrect"]
        st.put_human_labels(
            {
                "spec_name": "answer_alignment",
                "record_hash": r["record_hash"],
                "item_id": "",
                "annotator": who,
                "record_id": r["record_id"],
                "label": r["label"] if (i + k) % 3 else labels[(i + k) % 4],
                "status": "submitted",
                "source": "import",
            }
            for i, r in enumerate(rows)
            for k, who in enumerate(["ann1", "ann2"])
        )


def test_mean_ci_matches_scipy_and_handles_degenerate_input() -> None:
    x = [0.1, 0.5, 0.9, 0.4, 0.7, 0.2]
    m = mean_ci(x)
    ref = bootstrap((np.array(x),), np.mean, n_resamples=2000, method="percentile", random_state=0)
    assert m.mean == pytest.approx(np.mean(x), abs=1e-12)
    assert (m.ci_low, m.ci_high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert mean_ci([]).mean is None and mean_ci([]).note == "no scores"
    assert mean_ci([0.3]).ci_low is None and mean_ci([0.3]).note
    assert mean_ci([1.0, 1.0]).std == 0.0


def test_report_compares_systems_and_links_agreement(llm: OpenAIServer, tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    _store(llm, store)
    rep = build(store, system_column="system", bootstrap_resamples=200, out_dir=tmp_path)
    by_metric = {m.metric: m for m in rep.metrics}
    assert set(by_metric) == {"answer_alignment", "chunk_evaluation"}
    assert by_metric["answer_alignment"].agreement is not None
    assert by_metric["chunk_evaluation"].agreement is None  # nobody labelled it
    systems = {(s.metric, s.system): s for s in rep.systems}
    assert systems[("answer_alignment", "basic")].judged == 6
    assert systems[("answer_alignment", "local")].efficiency == {"llm_calls": 3.0, "latency": 3.0}
    res = CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(tmp_path / "out"), "--bootstrap", "200"])
    assert res.exit_code == 0, res.output
    out = tmp_path / "out"
    assert {"index.html", "report.json", "report.md", "answer_alignment.agreement.html"} <= {
        p.name for p in out.iterdir()
    }
    assert json.loads((out / "report.json").read_text())["system_column"] == "system"
    index = (out / "index.html").read_text()
    assert "data:image/png;base64," in index and 'href="answer_alignment.agreement.html"' in index


@pytest.mark.slow
@pytest.mark.browser
def test_report_renders_in_headless_chromium(llm: OpenAIServer, tmp_path: Path) -> None:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    store = tmp_path / "s.sqlite"
    _store(llm, store)
    out = tmp_path / "out"
    assert (
        CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(out), "--bootstrap", "200"]).exit_code == 0
    )
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ]
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for name in ("index.html", "answer_alignment.agreement.html"):
            page.goto((out / name).as_uri())
            images = page.eval_on_selector_all(
                "img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])"
            )
            assert images and all(ok and w > 50 and h > 50 for ok, w, h in images), images
            assert page.locator("table").count() >= 1
            page.screenshot(path=str(tmp_path / f"{name}.png"), full_page=True)
        browser.close()
    assert (tmp_path / "index.html.png").stat().st_size > 10_000


# --------------------------------------------------------------------------------------- agreement report render

NO_BOOT = AgreementOptions(bootstrap=0)
JUNK = {"None", "nan", "NaN", "<NA>", "NaT", "NAType"}
CHANCE = "judge no better than chance (sensitivity + specificity ≤ 1): correction undefined"


def frame(h: Sequence[object], j: Sequence[object], **cols: Any) -> pd.DataFrame:
    return pd.DataFrame({"item": [f"i{n}" for n in range(len(h))], "judge": j, "human": h, **cols})


def cells(page: str) -> list[str]:
    return [html.unescape(c) for c in re.findall(r"<td(?:\s[^>]*)?>(.*?)</td>", page, flags=re.S)]


def headers(page: str) -> list[str]:
    return [html.unescape(c) for c in re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", page, flags=re.S)]


def gallery_rows(page: str) -> list[list[str]]:
    """Rows of the last table on the page (the disagreement gallery)."""
    table = page.rsplit("<table", 1)[1].split("</table>", 1)[0]
    return [cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]]


def notes_in(report: AgreementReport) -> list[str]:
    """Every note the report carries, outside the per-slice sub-reports."""
    found: list[str] = []

    def walk(x: object) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k == "slices":
                    continue
                if k == "note" and isinstance(v, str) and v:
                    found.append(v)
                elif k == "notes" and isinstance(v, list):
                    found.extend(n for n in v if n)
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(report.model_dump())
    return list(dict.fromkeys(found))


def in_markdown(note: str, md: str) -> bool:
    return note in md or note.replace("|", r"\|") in md


# ------------------------------------------------------------------------------------ missing values


@pytest.mark.parametrize(
    ("scale", "h", "j"),
    [
        (AgreementScale(labels=["a", "b"]), ["a", "b", "a", "b", "a"], ["b", "a", "b", "a", "b"]),
        (AgreementScale(labels=["a", "b"], ordered=True), ["a", "b", "a", "b", "a"], ["b", "a", "b", "a", "b"]),
        (AgreementScale(kind="value"), [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 4.0]),
    ],
    ids=["unordered", "ordered", "value"],
)
def test_missing_reason_and_comment_render_as_empty_cells(
    scale: AgreementScale, h: list[object], j: list[object]
) -> None:
    f = frame(
        h,
        j,
        reason=[None, np.nan, "because", None, "r4"],
        comment=pd.array([pd.NA, "ok", None, pd.NA, "c4"], dtype="string"),
        when=[pd.NaT, pd.Timestamp("2024-01-02"), pd.NaT, pd.NaT, pd.NaT],
    )
    rep = compute_agreement(f, scale, NO_BOOT)
    page = render_html(rep, f, extra=("reason", "comment", "when"))
    rows = gallery_rows(page)
    assert len(rows) == 5  # every item is a disagreement
    assert not JUNK & set(cells(page)), sorted(JUNK & set(cells(page)))
    flat = {c for r in rows for c in r}
    assert {"because", "r4", "ok", "c4", "2024-01-02 00:00:00"} <= flat
    gallery_head = headers(page)[-len(rows[0]) :]
    by_item = {r[gallery_head.index("item")]: r for r in rows}
    assert by_item["i0"][gallery_head.index("reason")] == ""
    assert by_item["i1"][gallery_head.index("reason")] == ""
    assert by_item["i0"][gallery_head.index("comment")] == ""
    assert by_item["i2"][gallery_head.index("comment")] == ""
    assert by_item["i0"][gallery_head.index("when")] == ""


def test_an_all_missing_comment_column_renders_as_empty_cells() -> None:
    f = frame(["a", "b", "a"], ["b", "a", "b"], reason=[None, None, None], comment=[np.nan, np.nan, np.nan])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)
    rows = gallery_rows(render_html(rep, f))
    assert rows and all(r[-1] == "" and r[-2] == "" for r in rows)


# ------------------------------------------------------------------------------------------- steps


def test_unordered_labels_have_no_steps_column_or_rows() -> None:
    f = frame(["a", "b", "c", "a", "c"], ["b", "a", "a", "a", None], reason=["x", "y", "z", "w", "v"])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b", "c"]), AgreementOptions(bootstrap=20))
    page = render_html(rep, f)
    md = render_markdown(rep)
    assert "steps" not in headers(page)
    assert "steps" not in md
    assert "mean_signed_steps" not in page
    assert gallery_rows(page)  # the gallery is still there, without the column


def test_ordered_labels_keep_the_steps_column_and_rows() -> None:
    f = frame(["a", "b", "c", "a", "c"], ["b", "a", "a", "a", None])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b", "c"], ordered=True), NO_BOOT)
    page = render_html(rep, f)
    md = render_markdown(rep)
    head = headers(page)
    assert "steps" in head
    rows = gallery_rows(page)
    gallery_head = head[-len(rows[0]) :]
    steps = {r[gallery_head.index("item")]: r[gallery_head.index("steps")] for r in rows}
    assert steps == {"i0": "1", "i1": "-1", "i2": "-2", "i4": ""}  # invalid answer: no distance, no junk
    assert "mean_signed_steps" in page and "| mean_signed_steps |" in md


# ------------------------------------------------------------------------------------------- notes


@pytest.mark.parametrize(
    ("labels", "h", "j", "why"),
    [
        (["a", "b"], ["a", "a", "b", "b"], ["a", "b", "a", "b"], CHANCE),
        (["a", "b"], ["a", "a", "a", "a"], ["a", "b", "a", "b"], "no human-labelled items for label code(s) [1]"),
        (["a", "b", "c"], ["a", "b", "c", "a", "b", "c"], ["a", "a", "c", "a", "a", "c"], "singular"),
    ],
    ids=["chance", "no-human-support", "singular"],
)
def test_undefined_prevalence_correction_is_explained(
    labels: list[str], h: list[object], j: list[object], why: str
) -> None:
    rep = compute_agreement(frame(h, j), AgreementScale(labels=labels), NO_BOOT)
    assert rep.categorical is not None and rep.categorical.prevalence is not None
    p = rep.categorical.prevalence
    assert all(e.value is None for e in p.corrected)
    explanation = p.note or p.corrected[0].note  # what the CLI prints
    assert explanation and why in explanation
    f = frame(h, j)
    assert html.escape(explanation) in render_html(rep, f)
    assert explanation in render_markdown(rep)


def test_cli_html_and_markdown_give_the_same_prevalence_explanation(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    pd.DataFrame({"j": ["a", "b", "a", "b"], "h": ["a", "a", "b", "b"]}).to_csv(data, index=False)
    page, md = tmp_path / "r.html", tmp_path / "r.md"
    args = [str(data), "--judge", "j", "--human", "h", "--labels", "a,b", "--bootstrap", "0"]
    res = CliRunner().invoke(agreement, [*args, "--html", str(page), "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    assert CHANCE in res.output
    assert html.escape(CHANCE) in page.read_text(encoding="utf-8")
    assert CHANCE in md.read_text(encoding="utf-8")


def test_clipped_prevalence_note_is_shown() -> None:
    # spec 0.9, sens 0.8 on the labelled items; 80 more items the judge calls "a" push Rogan–Gladen below 0.
    h = ["a"] * 10 + ["b"] * 10 + [None] * 80
    j = ["a"] * 9 + ["b"] + ["b"] * 8 + ["a"] * 2 + ["a"] * 80
    rep = compute_agreement(frame(h, j), AgreementScale(labels=["a", "b"]), NO_BOOT)
    assert rep.categorical is not None and rep.categorical.prevalence is not None
    note = rep.categorical.prevalence.note
    assert note and "clipped" in note
    assert html.escape(note) in render_html(rep, frame(h, j))
    assert note in render_markdown(rep)


def _ceiling_frame() -> pd.DataFrame:
    rows: list[dict[str, object]] = []
    for i in range(6):
        for who in ("p", "q"):
            rows.append({"item": f"x{i}", "annotator": who, "human": "a", "judge": "ab"[i % 2], "reason": None})
    return pd.DataFrame(rows)


def _mixed_frame() -> pd.DataFrame:
    rng = np.random.default_rng(5)
    rows: list[dict[str, object]] = []
    for i in range(30):
        truth = int(rng.integers(0, 3))
        for who in ("p", "q", "r"):
            if rng.random() < 0.7:
                lab = truth if rng.random() < 0.8 else int(rng.integers(0, 3))
                rows.append({"item": f"x{i}", "annotator": who, "human": "abc"[lab], "judge": "abc"[truth]})
    rows.append({"item": "lonely", "annotator": "p", "human": None, "judge": "zzz"})
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("make", "scale", "options"),
    [
        (_ceiling_frame, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=20)),
        (_mixed_frame, AgreementScale(labels=["a", "b", "c"], ordered=True), AgreementOptions(bootstrap=20)),
        (
            lambda: frame(["a", "a", "b", "b"], ["a", "b", "a", "b"]),
            AgreementScale(labels=["a", "b"]),
            AgreementOptions(bootstrap=10),
        ),
        (
            lambda: frame([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 1.0], group=["g0", "g0", "g1", "g1"]),
            AgreementScale(kind="value"),
            AgreementOptions(bootstrap=10, protocol="per-group"),
        ),
    ],
    ids=["constant-humans-ceiling", "ordered-three-annotators", "chance-prevalence", "value-per-group"],
)
def test_every_note_reaches_html_and_markdown(make: Any, scale: AgreementScale, options: AgreementOptions) -> None:
    f = make()
    rep = compute_agreement(f, scale, options)
    notes = notes_in(rep)
    assert notes
    page = render_html(rep, f)
    md = render_markdown(rep)
    missing_html = [n for n in notes if html.escape(n) not in page]
    missing_md = [n for n in notes if not in_markdown(n, md)]
    assert not missing_html, missing_html
    assert not missing_md, missing_md
    assert not JUNK & set(cells(page))


def test_ceiling_notes_are_shown() -> None:
    f = _ceiling_frame()
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)
    assert rep.ceiling is not None
    note = rep.ceiling.human_pairwise_mean.note
    assert rep.ceiling.human_pairwise_mean.value is None and note
    assert html.escape(note) in render_html(rep, f)
    assert note in render_markdown(rep)


def test_slice_rows_carry_the_notes_of_their_figures() -> None:
    f = frame(["a", "b", "a", "b", "a"], ["a", "b", "b", "b", "a"], lang=["en", "en", "en", "en", "de"])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=0, slices=["lang"]))
    de = rep.slices["lang"]["de"].metrics["cohen_kappa"]
    assert de.value is None and de.note
    page = render_html(rep, f)
    slice_table = page.split("<h2>By lang</h2>", 1)[1].split("</table>", 1)[0]
    assert html.escape(de.note) in slice_table
    assert de.note in render_markdown(rep)


# ------------------------------------------------------------------- per-group, threshold, resampling unit


def _per_group_frame() -> pd.DataFrame:
    h = ["a", "b", "a", "b", "a", "a", "b", "b", "a"]
    j = ["a", "b", "b", "b", "a", "b", "a", "b", "a"]
    return frame(h, j, group=["d1"] * 4 + ["d2"] * 3 + ["d3"] * 2)


def test_per_group_values_reach_terminal_json_html_and_markdown(tmp_path: Path) -> None:
    f = _per_group_frame()
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=20, protocol="per-group"))
    assert [g.group for g in rep.per_group] == ["d1", "d2", "d3"]
    page, md = render_html(rep, f), render_markdown(rep)
    table = page.split("<h2>Per group", 1)[1].split("</table>", 1)[0]
    for g in rep.per_group:
        acc = g.metrics["accuracy"].value
        assert acc is not None
        assert f"<td>{g.group}</td>" in table and f"<td>{acc:.3f}</td>" in table
        assert f"| {g.group} | {g.n} |" in md
    assert "resamples of items within groups (3)" in page and "resamples of items within groups (3)" in md
    data = tmp_path / "d.csv"
    f.rename(columns={"item": "id", "judge": "j", "human": "h", "group": "doc"}).to_csv(data, index=False)
    args = [str(data), "--judge", "j", "--human", "h", "--item", "id", "--group", "doc", "--protocol", "per-group"]
    res = CliRunner().invoke(agreement, [*args, "--bootstrap", "20", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    assert "per group (3" in res.output and "d2" in res.output


def test_threshold_reports_render_the_rule_and_a_gallery() -> None:
    f = pd.DataFrame(
        {
            "item": [f"i{n}" for n in range(6)],
            "human": ["yes", "no", "yes", "no", "yes", "no"],
            "score": [0.9, 0.1, 0.5, 0.5, 0.2, 0.7],
        }
    )
    opts = AgreementOptions(bootstrap=0, pos_label="yes", threshold=0.5, threshold_rule="gt")
    rep = compute_agreement(f, AgreementScale(labels=["no", "yes"]), opts)
    page, md = render_html(rep, f), render_markdown(rep)
    assert "yes when score &gt; 0.5, else no" in page and "yes when score > 0.5, else no" in md
    rows = gallery_rows(page)
    assert sorted(r[0] for r in rows) == ["i2", "i4", "i5"]  # 0.5 is not > 0.5: i2 is "no"; i4 "no"; i5 "yes"


@pytest.mark.parametrize(
    ("make", "scale", "options"),
    [
        (
            _per_group_frame,
            AgreementScale(labels=["a", "b"]),
            AgreementOptions(bootstrap=10, protocol="per-group", pos_label="b"),
        ),
        (
            lambda: frame(["a", "b", "a"], [None, "b", "b"], score=[0.2, None, 0.4]),
            AgreementScale(labels=["a", "b"]),
            AgreementOptions(bootstrap=10, pos_label="b", invalid="opposite"),
        ),
    ],
    ids=["categorical-per-group", "scores-opposite"],
)
def test_new_notes_reach_html_and_markdown(make: Any, scale: AgreementScale, options: AgreementOptions) -> None:
    f = make()
    rep = compute_agreement(f, scale, options)
    notes = notes_in(rep)
    assert notes
    page, md = render_html(rep, f), render_markdown(rep)
    assert not [n for n in notes if html.escape(n) not in page]
    assert not [n for n in notes if not in_markdown(n, md)]
    assert not JUNK & set(cells(page))


def test_consistency_markdown_lists_figures_and_confusion() -> None:
    from greval.agreement import compute_consistency
    from greval.report.agreement import render_consistency_markdown

    f = pd.DataFrame(
        {"item": ["q1", "q1", "q2", "q2", "q3"], "run": ["o", "s", "o", "s", "o"], "judge": ["A", "A", "A", "B", "B"]}
    )
    rep = compute_consistency(f, AgreementScale(labels=["A", "B"]), NO_BOOT)
    md = render_consistency_markdown(rep)
    assert "| consistency | 0.500 |" in md and "| A | 1 | 1 | 0 |" in md
    assert "1 item(s) appear in only one run: left out" in md


# ------------------------------------------------------------------------------------------ calibration


def test_calibration_reaches_html_markdown_json_and_the_terminal(tmp_path: Path) -> None:
    """The HTML page embeds the reliability diagram and shows the ECE the JSON holds; every calibration note
    (rows without a confidence) is on every rendering."""
    rng = np.random.default_rng(5)
    n = 300
    conf = rng.choice([1 / 3, 2 / 3, 1.0], n)
    h = rng.choice(["a", "b"], n)
    right = rng.random(n) < conf - 0.1
    j = np.where(right, h, np.where(h == "a", "b", "a"))
    f = frame(list(h), list(j), judge_confidence=[None, None, *conf[2:]])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=50))
    cal = rep.calibration
    assert cal is not None and cal.ece.value is not None and cal.n_without_confidence == 2
    page, md = render_html(rep, f), render_markdown(rep)
    section = page.split("<h2>Is the judge&#x27;s confidence calibrated?</h2>", 1)[1].split("<h2>", 1)[0]
    assert 'alt="reliability diagram" src="data:image/png;base64,' in section
    data = json.loads(rep.model_dump_json())["calibration"]
    shown = f"ECE {data['ece']['value']:.3f} [{data['ece']['ci_low']:.3f}, {data['ece']['ci_high']:.3f}]"
    assert shown in html.unescape(section) and shown in md
    assert [r[1] for r in _calibration_table(section)] == [str(b.count) for b in cal.bins if b.count]
    notes = notes_in(rep)
    assert any("have no judge confidence" in note for note in notes)
    assert not [note for note in notes if html.escape(note) not in page]
    assert not [note for note in notes if not in_markdown(note, md)]
    path = tmp_path / "f.csv"
    f.rename(columns={"judge_confidence": "conf"}).to_csv(path, index=False)
    out = tmp_path / "f.json"
    args = [str(path), "--judge", "judge", "--human", "human", "--confidence", "conf", "--bootstrap", "50"]
    res = CliRunner().invoke(agreement, [*args, "--decimals", "3", "--json", str(out)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert shown in flat and "2 row(s) with a judge and a human answer have no judge confidence" in flat
    assert json.loads(out.read_text())["calibration"]["ece"] == data["ece"]


def _calibration_table(section: str) -> list[list[str]]:
    table = section.split("<table", 1)[1].split("</table>", 1)[0]
    return [cells(r) for r in re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]]

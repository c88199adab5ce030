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
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from scipy.stats import bootstrap

from greval.agreement import AgreementOptions, AgreementReport, AgreementScale, compute_agreement
from greval.agreement.bootstrap import RESAMPLES
from greval.cli import main
from greval.cli.agreement import agreement
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.report.agreement import render_html, render_markdown
from greval.report.stats import mean_ci, score_ci
from greval.report.store_report import build
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

# -------------------------------------------------------------------------------------------------------- report

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def _store(
    llm: OpenAIServer, path: Path, shared_questions: bool = False, annotators: Sequence[str] = ("ann1", "ann2")
) -> None:
    """12 records of two systems (local, basic: odd and even ids), human labels of answer_alignment by
    ``annotators``; ``shared_questions``: both systems answer the same 6 questions (else each its own)."""
    recs = [
        Record.from_mapping(
            {
                "id": f"r{i}",
                "question": f"q{i // 2 if shared_questions else i}?",
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
            for k, who in enumerate(annotators)
        )


def _percentile_bootstrap(statistic: Any, n: int, resamples: int = RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """The percentile bootstrap written out: ``resamples`` draws of n record indices with replacement from
    numpy's default_rng(seed), the statistic of each, and the 2.5th and 97.5th percentiles (linear)."""
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    low, high = np.quantile([statistic(idx) for idx in draws], [0.025, 0.975])
    return float(low), float(high)


def test_mean_ci_is_the_percentile_bootstrap_and_handles_degenerate_input() -> None:
    """mean_ci resamples through greval.agreement.bootstrap (the one bootstrap): exactly the percentile bootstrap
    written out here, and statistically the same interval as scipy.stats.bootstrap's percentile method (which
    the report used before; its random draws differ, so the ends agree to Monte Carlo error)."""
    x = [0.1, 0.5, 0.9, 0.4, 0.7, 0.2]
    m = mean_ci(x)
    assert m.mean == pytest.approx(np.mean(x), abs=1e-12)
    low, high = _percentile_bootstrap(lambda idx: np.mean(np.asarray(x)[idx]), len(x))
    assert (m.ci_low, m.ci_high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))
    big = mean_ci(x, resamples=20_000)
    ref = bootstrap((np.array(x),), np.mean, n_resamples=20_000, method="percentile", random_state=0)
    assert big.ci_low == pytest.approx(ref.confidence_interval.low, abs=0.015)
    assert big.ci_high == pytest.approx(ref.confidence_interval.high, abs=0.015)
    assert mean_ci([]).mean is None and mean_ci([]).note == "no scores"
    assert mean_ci([0.3]).ci_low is None and mean_ci([0.3]).note
    assert mean_ci([1.0, 1.0]).std == 0.0


def test_pooled_score_ci_resamples_records_with_their_items() -> None:
    """A micro score's CI: records drawn with their item counts, each resample's Σ score·units / Σ units — the
    written-out ratio bootstrap exactly, and scipy's paired percentile bootstrap to Monte Carlo error."""
    rng = np.random.default_rng(5)
    scores, units = rng.uniform(0, 1, 40), rng.integers(1, 9, 40).astype(float)
    rows = [{"status": "ok", "score": s, "units": u} for s, u in zip(scores, units, strict=True)]
    ci = score_ci(rows, "micro")
    assert ci.mean == pytest.approx(float((scores * units).sum() / units.sum()), abs=1e-12)
    assert ci.note == f"pooled over {units.sum():g} items (micro)"
    low, high = _percentile_bootstrap(lambda idx: (scores[idx] * units[idx]).sum() / units[idx].sum(), len(rows))
    assert (ci.ci_low, ci.ci_high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12))

    def ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(num.sum(axis=axis) / den.sum(axis=axis))

    big = score_ci(rows, "micro", resamples=20_000)
    ref = bootstrap(
        (scores * units, units),
        ratio,
        paired=True,
        vectorized=True,
        n_resamples=20_000,
        method="percentile",
        random_state=0,
    )
    assert big.ci_low == pytest.approx(ref.confidence_interval.low, abs=0.01)
    assert big.ci_high == pytest.approx(ref.confidence_interval.high, abs=0.01)


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


@pytest.mark.parametrize("shared", [False, True], ids=["own-questions", "same-questions"])
def test_compare_systems_shows_the_agreement_difference(llm: OpenAIServer, tmp_path: Path, shared: bool) -> None:
    """`report --compare system=basic system=local` where people labelled: each side's agreement is the figure
    `greval agreement --slice system` gives that system, B − A is their difference, paired by question when
    both systems answer the same questions and an independent bootstrap difference when each answers its own
    (the page and the terminal say which)."""
    store = tmp_path / "s.sqlite"
    _store(llm, store, shared_questions=shared, annotators=())
    labels = ["Correct", "Acceptable", "Not Acceptable", "Incorrect"]
    with Store(store) as st:  # one person: wrong on 3 of basic's 6 records, 1 of local's
        rows = st.query("SELECT record_hash, record_id, label FROM verdicts WHERE spec_name='answer_alignment'")
        st.put_human_labels(
            {
                "spec_name": "answer_alignment",
                "record_hash": r["record_hash"],
                "item_id": "",
                "annotator": "ann1",
                "record_id": r["record_id"],
                "label": labels[(labels.index(r["label"]) + (r["record_id"] in ("r0", "r2", "r4", "r3"))) % 4],
                "status": "submitted",
                "source": "import",
            }
            for r in rows
        )
    out = tmp_path / "cmp"
    args = ["report", "--store", str(store), "--compare", "system=basic", "system=local", "-o", str(out)]
    res = CliRunner().invoke(main, [*args, "--bootstrap", "200"], terminal_width=200)
    assert res.exit_code == 0, res.output
    m = next(
        m for m in json.loads((out / "comparison.json").read_text())["metrics"] if m["metric"] == "answer_alignment"
    )
    assert m["agreement_pairing"] == ("question" if shared else "independent")
    ag = tmp_path / "ag.json"
    args = ["agreement", "--store", str(store), "--spec", "answer_alignment", "--slice", "system"]
    res_ag = CliRunner().invoke(main, [*args, "--json", str(ag), "--bootstrap", "50"])
    assert res_ag.exit_code == 0, res_ag.output
    per = json.loads(ag.read_text())["slices"]["system"]
    accuracy = m["agreement"]["accuracy"]
    assert accuracy["a"] == pytest.approx(per["basic"]["metrics"]["accuracy"]["value"])
    assert accuracy["b"] == pytest.approx(per["local"]["metrics"]["accuracy"]["value"])
    assert (accuracy["a"], accuracy["b"]) == (pytest.approx(3 / 6), pytest.approx(5 / 6))
    assert accuracy["difference"] == pytest.approx(accuracy["b"] - accuracy["a"])  # every question on both sides
    low, high = accuracy["ci"]
    assert low is not None and high is not None and low <= accuracy["difference"] <= high and low < high
    assert (accuracy["n_a"], accuracy["n_b"]) == (6, 6)
    assert accuracy["n"] == (6 if shared else 12)
    page, flat = (out / "index.html").read_text(), " ".join(res.output.split())
    shown = "question" if shared else "— (independent)"
    assert f"<td>{shown}</td>" in page and "two independent bootstraps" in page
    assert "paired by record or question, else independent" in flat and shown in flat
    assert ("6 + 6" in flat) != shared


def test_two_versions_of_a_metric_get_their_own_pages_and_system_rows(llm: OpenAIServer, tmp_path: Path) -> None:
    """A store with two versions of answer_alignment (one word more in the second's instructions) judged on the
    same records: each version writes its own agreement page (NAME@HASH8.agreement.html, titled with its hash;
    one version keeps NAME.agreement.html), and each version's system rows are its own verdicts'."""
    from greval.report.tables import shares_rows

    store = tmp_path / "s.sqlite"
    _store(llm, store)
    spec = tmp_path / "answer_alignment.yaml"
    text = (Path(__file__).parents[1] / "metric_specs" / "answer_alignment.yaml").read_text()
    spec.write_text(text.replace("Judge agreement in meaning", "Judge agreement in meaning strictly"))
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(store) as st:
        run(
            resolve_specs([str(spec)]),
            list(st.records()),
            st,
            cfg,
            options=RunOptions(retry=RetryPolicy(base_delay=0.01)),
        )
        verdicts = st.query("SELECT spec_hash, record_hash, label FROM verdicts WHERE spec_name='answer_alignment'")
        system = {r.hash: r.data["system"] for r in st.records()}
    hashes = list(dict.fromkeys(r["spec_hash"] for r in verdicts))
    assert len(hashes) == 2
    out = tmp_path / "out"
    args = ["report", "--store", str(store), "-o", str(out), "--bootstrap", "50", "--all-versions"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    pages = {h: f"answer_alignment@{h[:8]}.agreement.html" for h in hashes}
    written = {p.name for p in out.iterdir()}
    assert set(pages.values()) <= written and "answer_alignment.agreement.html" not in written
    assert "chunk_evaluation.agreement.html" not in written  # nobody labelled it: no page, as before
    index = (out / "index.html").read_text()
    for h, page in pages.items():
        assert f"answer_alignment ({h})" in (out / page).read_text() and f'href="{page}"' in index
        assert (out / page.replace(".html", ".json")).exists() and (out / page.replace(".html", ".md")).exists()
    rep = build(store, system_column="system", bootstrap_resamples=50, all_versions=True)
    for m in (m for m in rep.metrics if m.metric == "answer_alignment"):
        mine = [v for v in verdicts if v["spec_hash"] == m.spec_hash]
        rows = [(where["system"], cells) for where, cells in shares_rows(m, rep) if "system" in where]
        assert sorted(name for name, _ in rows) == ["basic", "local"]  # this version's systems, not both's
        for name, cells in rows:
            assert cells[1] == str(sum(system[v["record_hash"]] == name for v in mine))
        got = {s.system: s for s in rep.systems if s.key == m.key}
        assert {k: s.shares.n for k, s in got.items() if s.shares} == {k: 6 for k in ("basic", "local")}
        counts = {k: {x.label: x.count for x in s.shares.shares} for k, s in got.items() if s.shares}
        for name in ("basic", "local"):
            want = Counter(v["label"] for v in mine if system[v["record_hash"]] == name)
            assert {k: v for k, v in counts[name].items() if v} == dict(want)
    assert f"answer_alignment@{hashes[0][:8]}" in index and f"answer_alignment@{hashes[1][:8]}" in index
    # Every table row and chart label names its version where two meet (the Metrics, score and shares tables).
    md = (out / "report.md").read_text()
    assert not re.search(r"^\| answer_alignment \|", md, re.M) and "### answer_alignment\n" not in md
    for h in hashes:
        assert f"| answer_alignment@{h[:8]} |" in md and f"### answer_alignment@{h[:8]}" in md


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
        (["a", "b"], ["a", "a", "a", "a"], ["a", "b", "a", "b"], "no human-labelled items for 'b'"),
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


# ------------------------------------------------------------------ dataset figures without human labels (issue 16)

FILMS = ["Alien", "Heat", "Up"]


def _qa_records() -> list[dict[str, Any]]:
    """Two methods × three films × four questions, and one record per method with no film."""
    rows: list[dict[str, Any]] = []
    for m, method in enumerate(["global", "local"]):
        for film in [*FILMS, None]:
            for q in range(4 if film else 1):
                i = len(rows)
                row: dict[str, Any] = {
                    "id": f"{method}-{film}-{q}",
                    "question": f"q{q} about {film}?",
                    "expected_answer": f"act {q % 3 + 1} of {film}",
                    "answer": f"{'act' if (i + m) % 3 else 'maybe'} {q % 3 + 1} of {film}, {method}",
                    "method": method,
                    "llm_calls": 2 + m + q % 2,
                    "tokens": 500 + 300 * m + 17 * q + i,
                }
                if film:
                    row["film"] = film
                rows.append(row)
    return rows


def _qa_store(llm: OpenAIServer, path: Path, specs: Sequence[str], labels: bool) -> list[dict[str, Any]]:
    """A GraphRAG-QA-style store; with ``labels``, a human label for every other graphrag_qa_correct record
    (the judge's label, flipped on every fifth)."""
    raw = _qa_records()
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        recs = [Record.from_mapping(r) for r in raw]
        run(resolve_specs(list(specs)), recs, st, cfg, options=RunOptions(retry=RetryPolicy(base_delay=0.01)))
        if labels:
            rows = st.query(
                "SELECT record_hash, record_id, label FROM verdicts "
                "WHERE spec_name='graphrag_qa_correct' AND status='ok' ORDER BY record_id"
            )
            flip = {"correct": "incorrect", "incorrect": "correct"}
            st.put_human_labels(
                {
                    "spec_name": "graphrag_qa_correct",
                    "record_hash": r["record_hash"],
                    "item_id": "",
                    "annotator": "ann1",
                    "record_id": r["record_id"],
                    "label": r["label"] if i % 5 else flip[r["label"]],
                    "status": "submitted",
                    "source": "import",
                }
                for i, r in enumerate(rows)
                if i % 2 == 0
            )
    return raw


def test_score_stats_match_numpy() -> None:
    from greval.report.stats import score_stats

    rng = np.random.default_rng(3)
    x = rng.gamma(2.0, 0.2, 57)
    s = score_stats(list(x), records=63, failed=4, skipped=2)
    assert s.n == 57 and s.records == 63
    assert s.mean.mean == pytest.approx(float(np.mean(x)), abs=1e-12)
    assert s.median == pytest.approx(float(np.median(x)), abs=1e-12)
    assert s.std == pytest.approx(float(np.std(x, ddof=1)), abs=1e-12)
    assert (s.min, s.max) == (float(x.min()), float(x.max()))
    for p in (5, 25, 75, 95):  # numpy's default method: linear interpolation between order statistics
        assert getattr(s, f"p{p}") == pytest.approx(float(np.percentile(x, p, method="linear")), abs=1e-12)
    # the 5th percentile of 57 values sits between the 3rd and 4th smallest: linear, not nearest or lower
    xs = np.sort(x)
    assert s.p5 == pytest.approx(xs[2] + 0.8 * (xs[3] - xs[2]), abs=1e-12)
    assert s.failure_rate == pytest.approx(4 / 63) and s.skip_rate == pytest.approx(2 / 63)
    assert (s.mean.ci_low, s.mean.ci_high) == (mean_ci(list(x)).ci_low, mean_ci(list(x)).ci_high)
    empty = score_stats([], records=3, failed=3)
    assert empty.n == 0 and empty.median is None and empty.p95 is None and empty.failure_rate == 1.0
    one = score_stats([0.4])
    assert one.median == one.p5 == one.p95 == 0.4 and one.std is None and one.records == 1
    assert score_stats([]).failure_rate is None


def test_group_table_matches_pandas_and_notes_missing_groups(llm: OpenAIServer, tmp_path: Path) -> None:
    from greval import load_results

    store = tmp_path / "s.sqlite"
    raw = _qa_store(llm, store, ["graphrag_qa_score", "rouge_l"], labels=False)
    out = tmp_path / "out"
    args = ["report", "--store", str(store), "-o", str(out), "--system-column", "method", "--group-column", "film"]
    res = CliRunner().invoke(main, [*args, "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    rep = json.loads((out / "report.json").read_text())
    assert rep["group_column"] == "film"
    # independently: the record rows, joined with the records' fields, grouped by pandas
    recs = load_results(store, level="record")
    fields = pd.DataFrame(raw).rename(columns={"id": "record_id"})
    frame = recs.merge(fields, on="record_id", how="left")
    frame = frame[frame["status"].isin(["ok", "partial"])]
    tables = {t["metric"]: t for t in rep["groups"]}
    assert set(tables) == {"graphrag_qa_score", "rouge_l"}
    flat = " ".join(res.output.split())
    md = (out / "report.md").read_text()
    page = (out / "index.html").read_text()
    for metric, table in tables.items():
        sub = frame[frame["spec"] == metric]
        expect = (
            sub.dropna(subset=["film"])
            .groupby(["method", "film"])
            .agg(n=("score", "size"), mean=("score", "mean"), calls=("llm_calls", "mean"), tokens=("tokens", "mean"))
        )
        got = {(c["system"], c["group"]): c for c in table["cells"]}
        assert set(got) == set(expect.index) and len(got) == 6
        for key, row in expect.iterrows():
            cell = got[key]
            assert cell["stats"]["n"] == row["n"] == 4
            assert cell["stats"]["mean"]["mean"] == pytest.approx(row["mean"], abs=1e-12)
            assert cell["efficiency"]["llm_calls"] == pytest.approx(row["calls"])
            assert cell["efficiency"]["tokens"] == pytest.approx(row["tokens"])
        assert table["missing_group"] == int(sub["film"].isna().sum()) == 2
        note = f"{metric}: 2 record(s) have no value in 'film': not in the system × group table"
        assert note in flat and note in md and html.escape(note) in page
        assert f'alt="{metric} heatmap by system and film"' in page


def test_report_html_json_and_markdown_carry_the_same_figures(llm: OpenAIServer, tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    _qa_store(llm, store, ["graphrag_qa_score", "rouge_l"], labels=False)
    out = tmp_path / "out"
    args = ["report", "--store", str(store), "-o", str(out), "--system-column", "method", "--group-column", "film"]
    assert CliRunner().invoke(main, [*args, "--bootstrap", "50"]).exit_code == 0
    rep = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    page = (out / "index.html").read_text()
    html_rows = [cells(r) for r in re.findall(r"<tr>(.*?)</tr>", page, flags=re.S)]

    def f3(x: float | None) -> str:
        return "—" if x is None else f"{x:.3f}"

    def expected(label: list[str], s: dict[str, Any]) -> list[str]:
        ci = f"[{s['mean']['ci_low']:.3f}, {s['mean']['ci_high']:.3f}]"
        keys = ("median", "std", "min", "p5", "p25", "p75", "p95", "max")
        rates = [f"{s['failure_rate']:.1%}", f"{s['skip_rate']:.1%}"]
        return [*label, str(s["n"]), f3(s["mean"]["mean"]), ci, *(f3(s[k]) for k in keys), *rates]

    checked = 0
    for m in rep["metrics"]:
        s = m["stats"]
        assert s["records"] == m["figures"]["records"] and s["n"] == m["figures"]["scored"]
        assert s["mean"]["mean"] == pytest.approx(m["figures"]["mean_score"], abs=1e-12)
        assert expected([m["metric"]], s) in html_rows
        assert "| " + " | ".join(expected([m["metric"], m["judge"]], s)) + " |" in md
        checked += 1
    for row in rep["systems"]:
        assert expected([row["metric"], row["system"]], row["stats"]) in html_rows
        assert "| " + " | ".join(expected([row["metric"], row["system"]], row["stats"])) + " |" in md
        checked += 1
    for t in rep["groups"]:
        for c in t["cells"]:
            s = c["stats"]
            ci = f"[{s['mean']['ci_low']:.3f}, {s['mean']['ci_high']:.3f}]"
            eff = [f"{c['efficiency'][k]:.2f}" for k in sorted(c["efficiency"])]
            want = [c["system"], c["group"], str(s["n"]), f3(s["mean"]["mean"]), ci, "0.0%", "0.0%", *eff]
            assert want in html_rows
            assert "| " + " | ".join(want) + " |" in md
            checked += 1
    assert checked == 2 + 4 + 12
    # every metric has its distribution figure, and a box plot per system
    for m in rep["metrics"]:
        assert f'alt="{m["metric"]} distribution"' in page
        assert f'alt="{m["metric"]} box plot by system"' in page
    rouge = next(m for m in rep["metrics"] if m["metric"] == "rouge_l")
    assert not rouge["figures"]["distribution"] and sum(rouge["histogram"].values()) == rouge["stats"]["n"]
    score = next(m for m in rep["metrics"] if m["metric"] == "graphrag_qa_score")
    assert score["figures"]["distribution"] and not score["histogram"]


def test_overview_figure_for_a_store_without_labels_or_systems(llm: OpenAIServer, tmp_path: Path) -> None:
    from greval.report.plots import PANELS

    store = tmp_path / "s.sqlite"
    _qa_store(llm, store, ["rouge_l"], labels=False)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(out), "--system-column", "nope"])
    assert res.exit_code == 0, res.output
    page = (out / "index.html").read_text()
    overview = page.split("<h2 id=overview>Overview</h2>", 1)[1].split("<h2", 1)[0]
    # only panels with something to show, each its own image; the rest left out with one line saying why
    assert re.findall(r'data-panel="([^"]+)"', overview) == ["score-0–1", "boxes-0–1", "outcomes"]
    assert overview.count('src="data:image/png;base64,') == 3
    assert "left out: dataset score by system (95% CI) — no systems: no record has a &#x27;nope&#x27; field" in overview
    assert "left out: label shares per metric (95% CI) — no judge metric with labels" in overview
    png = (out / "overview.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    md = (out / "report.md").read_text()
    assert "![overview](overview.png)" in md and "- left out: efficiency by system" in md
    assert len(PANELS) == 7
    rep = json.loads((out / "report.json").read_text())
    assert rep["systems"] == [] and rep["groups"] == [] and rep["metrics"][0]["corrected"] == []
    assert sum(rep["metrics"][0]["histogram"].values()) == rep["metrics"][0]["stats"]["n"] == 26


def test_prevalence_corrected_system_shares_match_rogan_gladen(llm: OpenAIServer, tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    raw = _qa_store(llm, store, ["graphrag_qa_correct"], labels=True)
    rep = build(store, system_column="method", bootstrap_resamples=200, out_dir=tmp_path)
    (metric,) = rep.metrics
    assert metric.agreement is not None
    with Store(store) as st:
        judge = {
            r["record_id"]: r["label"]
            for r in st.query("SELECT record_id, label FROM verdicts WHERE spec_name='graphrag_qa_correct'")
        }
        human = {r["record_id"]: r["label"] for r in st.human_labels("graphrag_qa_correct", submitted=True)}
    method = {r["id"]: r["method"] for r in raw}
    by_system = {c.system: c for c in metric.corrected}
    assert set(by_system) == {"all", "global", "local"}
    defined = 0
    for system, c in by_system.items():
        ids = [i for i in judge if system == "all" or method[i] == system]
        q = sum(judge[i] == "correct" for i in ids) / len(ids)  # over every verdict, labelled or not
        lab = [i for i in ids if i in human]
        pos = [i for i in lab if human[i] == "correct"]
        neg = [i for i in lab if human[i] == "incorrect"]
        share = {s.label: s for s in c.shares}
        assert share["correct"].raw == pytest.approx(q)
        assert c.n_judged == len(ids) and c.n_labelled == len(lab)
        if not pos or not neg:
            assert share["correct"].corrected is None and c.note
            continue
        sens = sum(judge[i] == "correct" for i in pos) / len(pos)
        spec = sum(judge[i] == "incorrect" for i in neg) / len(neg)
        assert sens + spec > 1
        pi = min(1.0, max(0.0, (q + spec - 1) / (sens + spec - 1)))
        assert share["correct"].corrected == pytest.approx(pi)
        assert share["incorrect"].corrected == pytest.approx(1 - pi)
        assert c.raw_score == pytest.approx(q) and c.corrected_score == pytest.approx(pi)
        defined += 1
    assert defined >= 2  # the whole store and at least one system have a defined correction
    system_means = {s.system: s.score.mean for s in rep.systems}
    assert by_system["global"].raw_score == pytest.approx(system_means["global"])
    assert by_system["all"].shares[0].ci_low is not None or by_system["all"].note
    from greval.report.html import render_markdown as render_report_markdown

    assert "## Prevalence-corrected system scores" in render_report_markdown(rep)


def test_notes_name_option_fields_and_the_cli_shows_flags() -> None:
    """A stage's note names an option field (greval.errors.option); with_names writes every note of a report,
    at any depth, as the CLI's flag table says, for the terminal and the pages; the model keeps the field."""
    from greval.errors import option
    from greval.report.format import with_names

    f = frame(["a", "b", "a", "b"], ["a", "b", "b", "b"])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)
    headline = next(iter(rep.metrics))
    noted = rep.model_copy(
        update={
            "notes": [f"pass {option('pair_by')} to compare runs"],
            "metrics": {**rep.metrics, headline: rep.metrics[headline].model_copy(update={"note": option("seed")})},
        }
    )
    shown = with_names(noted, {"pair_by": "--pair-by", "seed": "--seed"})
    assert shown.notes == ["pass --pair-by to compare runs"] and shown.metrics[headline].note == "--seed"
    assert noted.notes == ["pass `pair_by` to compare runs"]  # the report itself (and its JSON) keeps the field
    assert "pass --pair-by to compare runs" in render_html(shown, f) and "--seed" in render_markdown(shown)


# ------------------------------------------------------------------------------------------------- file modes
def test_every_file_greval_writes_for_the_user_is_0600_in_folders_it_makes_0700(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """Reports, explorers, comparisons, exports, agreement pages and JUnit files hold the user's records, verdicts
    and labels: each file 0600, each folder greval creates 0700, whatever the umask lets through (before: 0644 and
    0755). A folder that exists keeps its mode (it is the user's); a file greval replaces (written beside it,
    then renamed) is 0600 like a new one, and nothing half-written is left beside it."""
    import os
    import stat

    store = tmp_path / "s.sqlite"
    _store(llm, store)
    mine = tmp_path / "mine"
    mine.mkdir()
    mine.chmod(0o755)
    old = mine / "verdicts.csv"
    old.write_text("an older export\n")
    old.chmod(0o644)
    s = ["--store", str(store)]
    commands = [
        ["report", *s, "-o", str(mine / "new" / "report"), "--bootstrap", "50"],
        ["report", *s, "--compare", "system=basic", "system=local", "-o", str(mine / "cmp"), "--bootstrap", "50"],
        ["results", "export", *s, "-o", str(old)],
        ["results", "export", *s, "-o", str(mine / "exports" / "v.jsonl")],
        ["results", "export", *s, "-o", str(mine / "v.parquet"), "--level", "record"],
        ["agreement", *s, "--spec", "answer_alignment", "--html", str(mine / "pages" / "a.html"), "--bootstrap", "50"],
        [
            "agreement",
            *s,
            "--spec",
            "answer_alignment",
            "--json",
            str(mine / "a.json"),
            "--markdown",
            str(mine / "a.md"),
        ],
        ["gate", *s, "--spec", "answer_alignment", "--min", "kappa>=0.99", "--junit", str(mine / "ci" / "gate.xml")],
    ]
    mask = os.umask(0o022)
    try:
        for args in commands:
            res = CliRunner().invoke(main, args)
            assert res.exit_code == 0, (args, res.output)
    finally:
        os.umask(mask)
    modes = {
        str(p.relative_to(mine)): oct(stat.S_IMODE(p.stat().st_mode)) for p in mine.rglob("*") if not p.is_symlink()
    }
    files = {p for p in modes if (mine / p).is_file()}
    expected = {"verdicts.csv", "exports/v.jsonl", "v.parquet", "pages/a.html", "a.json", "a.md", "ci/gate.xml"}
    expected |= {"new/report/index.html", "new/report/report.json", "new/report/overview.png", "cmp/index.html"}
    expected |= {"new/report/answer_alignment.agreement.html", "new/report/explorer/index.html"}
    assert expected <= files and any(p.startswith("new/report/explorer/data/") for p in files)
    assert {p: m for p, m in modes.items() if m != ("0o600" if p in files else "0o700")} == {}
    assert not [p for p in files if p.endswith(".part")]
    assert oct(stat.S_IMODE(mine.stat().st_mode)) == "0o755"
    assert old.read_text().startswith("spec,")  # replaced by the export


def test_an_output_greval_cannot_write_is_one_line(llm: OpenAIServer, tmp_path: Path) -> None:
    """A report folder, export, page or JUnit file under a path greval cannot write (a file where a folder
    should be) is one line naming it, exit 2, no traceback (before: FileNotFoundError / NotADirectoryError)."""
    store = tmp_path / "s.sqlite"
    _store(llm, store)
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    s = ["--store", str(store)]
    commands = [
        ["report", *s, "-o", str(blocked / "report"), "--bootstrap", "20"],
        ["results", "export", *s, "-o", str(blocked / "v.csv")],
        ["agreement", *s, "--spec", "answer_alignment", "--html", str(blocked / "a.html"), "--bootstrap", "20"],
        ["gate", *s, "--spec", "answer_alignment", "--min", "kappa>=0.1", "--junit", str(blocked / "gate.xml")],
    ]
    for args in commands:
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 2 and "Traceback" not in res.output, (args, res.output)
        assert re.search(f"cannot write into {re.escape(str(blocked))}(/report)?: Not a directory", res.output)

"""The record explorer (issue 32) in real Chromium, opened from disk: the quick start's report has no empty
panel, its explorer filters to the disagreements and opens a record showing its question, chunks, the judge's
reason and the human label; record text that is markup renders as text; and every figure the explorer shows
equals what `greval results export` / `greval agreement` print for the same store."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.report_stores import HOSTILE, KINDS, kinds_store
from tests.test_report_adaptive import emptiness
from tests.test_store import AS_SCHEMA_6

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


@pytest.fixture(scope="module")
def quickstart(openai_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The quick start's workspace (judged by the test server, its human labels imported) and its report."""
    openai_server.reset()
    openai_server.configure(latency=0.0, json_schema=True, tools=True)
    work = tmp_path_factory.mktemp("qs") / "ws"
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", "sk-test")
    try:
        args = ["quickstart", "--dir", str(work), "--no-argilla", "--bootstrap", "50"]
        args += ["--judge", "openai:judge-test", "--base-url", openai_server.base_url]
        assert CliRunner().invoke(main, args).exit_code == 0
    finally:
        mp.undo()
    return work


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


def _page(browser: Any, width: int = 1280) -> Any:
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("dialog", lambda d: errors.append(f"dialog: {d.message}"))
    page.errors = errors
    # nothing may leave the machine: every request must be a file (any other is refused and counted an error)
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:")) else errors.append(f"network: {r.url}"))
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort())
    return page


def _report(store: Path, out: Path) -> Path:
    res = CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(out), "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    return out


@pytest.mark.browser
def test_quickstart_report_and_explorer_in_chromium(quickstart: Path, browser: Any, tmp_path: Path) -> None:
    out = _report(quickstart / "greval.sqlite", tmp_path / "report")
    page = _page(browser)
    page.goto((out / "index.html").as_uri())
    assert emptiness(page.content()) == []
    sizes = page.eval_on_selector_all("figure.panel img", "els => els.map(e => [e.complete, e.naturalWidth])")
    assert sizes and all(ok and w > 100 for ok, w in sizes)
    page.click("text=Explore the records")
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#count").inner_text() == "30 of 30 records"
    page.select_option("#f-agree", "disagree")
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('agree=disagree')")
    rows = page.locator("#table tbody tr")
    n = rows.count()
    assert n and page.locator("#count").inner_text() == f"{n} of 30 records"
    assert all(c == "disagree" for c in page.locator("#table tbody td.agree").all_inner_texts())
    rows.first.locator("a").click()
    page.wait_for_selector("body[data-ready=record]")
    rec = page.locator("#record")
    records = {json.loads(line)["id"]: json.loads(line) for line in (quickstart / "records.jsonl").open()}
    shown = records[rec.locator("h2").first.inner_text().removeprefix("Record ")]
    assert shown["question"] in rec.locator("[data-field=question]").inner_text()
    chunk = rec.locator("[data-field=chunks] li").first
    assert chunk.locator(".id").inner_text() and chunk.inner_text().strip()
    assert rec.locator("[data-field=reason] div").inner_text() not in ("", "—")
    human = rec.locator("table.humans tr").nth(1).inner_text()
    assert "begin-annotators" in human and "attributable" in human
    assert "disagree with people" in rec.inner_text()
    page.keyboard.press("Escape")
    page.wait_for_selector("body[data-ready=list]")
    assert "agree=disagree" in page.url
    # the keyboard: "/" to the search box, j to the next record of the filtered table, Tab through the links
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "q"
    page.locator("#table th button").first.focus()
    page.keyboard.press("j")
    page.wait_for_selector("body[data-ready=record]")
    assert "agree=disagree" in page.url and "record=" in page.url
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.tagName") in ("A", "BUTTON", "INPUT", "SELECT")
    page.keyboard.press("Escape")
    page.wait_for_selector("body[data-ready=list]")
    # a confusion-matrix cell of the agreement page opens the records it counts
    page.goto((out / "attribution.agreement.html").as_uri())
    cell = page.locator("table.heatmap a").nth(1)
    n = int(cell.inner_text())
    cell.click()
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#count").inner_text() == f"{n} of 30 records"
    assert all(c == "disagree" for c in page.locator("#table tbody td.agree").all_inner_texts())
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: no sideways scrolling of the page
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1
    assert page.errors == []


LAYOUT_SHIFTS = """() => {
  window.__shifts = [];
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__shifts.push({t: e.startTime, v: e.value, input: e.hadRecentInput,
      nodes: (e.sources || []).map((s) => s.node ? (s.node.id || s.node.nodeName) : "?")});
  }).observe({type: "layout-shift", buffered: true});
}"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1280, 390])
def test_filtering_the_explorer_shifts_no_layout(quickstart: Path, browser: Any, tmp_path: Path, width: int) -> None:
    """Typing in the search box and choosing a column filter moves nothing already on the page: the layout
    shifts Chromium reports (PerformanceObserver 'layout-shift', buffered) after the page settled add up to 0
    — counting those right after input too, which the CLS metric would forgive (typing is what filters)."""
    out = _report(quickstart / "greval.sqlite", tmp_path / "report")
    page = _page(browser, width)
    page.goto((out / "explorer" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=list]")
    page.evaluate(LAYOUT_SHIFTS)
    page.wait_for_timeout(300)  # settled: the shifts of loading are behind us
    t0 = page.evaluate("performance.now()")
    page.locator("#q").type("fully", delay=40)
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('q=fully')")
    typed = page.locator("#count").inner_text()
    page.select_option("#f-agree", "disagree")
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('agree=disagree')")
    assert page.locator("#count").inner_text() != typed  # the filters did filter
    page.locator("#q").fill("")
    page.locator("#q").type("zzz-no-such-text", delay=20)  # down to no row at all
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('q=zzz')")
    assert page.locator("#count").inner_text().startswith("0 of 30")
    page.click("text=Clear filters")
    page.wait_for_function("document.body.dataset.ready === 'list' && !location.hash.includes('agree')")
    page.wait_for_timeout(300)
    shifts = [s for s in page.evaluate("window.__shifts") if s["t"] > t0]
    assert sum(s["v"] for s in shifts) == 0, shifts
    assert page.errors == []


@pytest.mark.browser
def test_explorer_shows_markup_in_records_as_text(
    openai_server: OpenAIServer, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    openai_server.reset()
    openai_server.configure(latency=0.0, json_schema=True, tools=True)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    out = _report(kinds_store(openai_server, tmp_path / "k.sqlite"), tmp_path / "report")
    page = _page(browser)
    metric = next(i for i, line in enumerate(_meta(out)["metrics"]) if line["name"] == KINDS["categorical"])
    page.goto((out / "explorer" / "index.html").as_uri() + f"#m={metric}&q={HOSTILE}")
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#table tbody tr").count() == 1  # the full-text search found it in the record's text
    page.locator("#table tbody a").first.click()
    page.wait_for_selector("body[data-ready=record]")
    assert HOSTILE in page.locator("[data-field=answer]").inner_text()
    assert f"ann1 checked {HOSTILE}" in page.locator("table.humans").inner_text()
    assert page.evaluate("document.querySelectorAll('#record script').length") == 0
    # a per-item metric's human labels name their item (a record-level metric's have no item column)
    many = next(i for i, line in enumerate(_meta(out)["metrics"]) if line["name"] == KINDS["items"])
    page.goto((out / "explorer" / "index.html").as_uri() + f"#m={many}&agree=agree")
    page.wait_for_selector("body[data-ready=list]")
    page.locator("#table tbody a").first.click()
    page.wait_for_selector("body[data-ready=record]")
    assert page.locator("table.humans th").all_inner_texts() == ["item", "annotator", "human label", "comment"]
    assert re.fullmatch(r"k\d", page.locator("table.humans td").first.inner_text())
    assert page.errors == []  # no alert() dialog, no script error


def _meta(out: Path) -> dict[str, Any]:
    text = (out / "explorer" / "data" / "meta.js").read_text()
    meta: dict[str, Any] = json.loads(text.removeprefix("GREVAL.meta(").removesuffix(");\n"))
    return meta


def _rows(out: Path, metric: int) -> list[list[Any]]:
    rows: list[list[Any]] = []
    for f in sorted((out / "explorer" / "data").glob(f"m{metric}-*.js")):
        args = json.loads("[" + f.read_text().removeprefix("GREVAL.rows(").removesuffix(");\n") + "]")
        rows += args[2]
    return rows


def test_explorer_figures_equal_results_and_agreement(quickstart: Path, tmp_path: Path) -> None:
    """Each record's verdict and status, the counts per label and the disagreements the explorer shows equal
    `greval results export --level record` and `greval agreement --store --json` on the same store."""
    store = str(quickstart / "greval.sqlite")
    out = _report(Path(store), tmp_path / "report")
    meta = _meta(out)
    [m] = meta["metrics"]
    col = {c: i for i, c in enumerate(meta["columns"])}
    rows = _rows(out, 0)
    export = tmp_path / "records.csv"
    res = CliRunner().invoke(main, ["results", "export", "--store", store, "-o", str(export), "--level", "record"])
    assert res.exit_code == 0, res.output
    exported = {r["record_id"]: r for r in csv.DictReader(export.open())}
    assert {r[col["id"]]: r[col["verdict"]] for r in rows} == {k: v["label"] for k, v in exported.items()}
    assert Counter(r[col["status"]] for r in rows) == Counter(v["status"] for v in exported.values())
    assert m["figures"]["distribution"] == dict(Counter(v["label"] for v in exported.values()))
    assert m["figures"]["records"] == len(exported) == m["rows"]
    agreement = tmp_path / "agreement.json"
    args = ["agreement", "--store", store, "--spec", m["name"], "--json", str(agreement), "--bootstrap", "50"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    rep = json.loads(agreement.read_text())
    kappa = rep["metrics"]["cohen_kappa"]
    assert m["figures"]["agreement"].startswith(f"Cohen's κ {kappa['value']:.3f}")
    assert f"(n={kappa['n']})" in m["figures"]["agreement"]
    confusion = rep["categorical"]["confusion"]
    off_diagonal = sum(v for i, row in enumerate(confusion["counts"]) for j, v in enumerate(row) if i != j)
    assert sum(r[col["agree"]] == "disagree" for r in rows) == off_diagonal
    assert sum(r[col["agree"]] == "agree" for r in rows) == sum(confusion["counts"][i][i] for i in range(2))
    assert re.fullmatch(r"Fully attributable 0\.\d{3} \[.*\]; Not fully attributable .*", m["figures"]["summary"])


def _two_versions(quickstart: Path, server: OpenAIServer, tmp_path: Path) -> tuple[Path, str, str]:
    """A copy of the quick start's store with a second version of its metric (one word more in the
    instructions) judged on the same records: (store, A = NAME@HASH of the first, B = of the second)."""
    import shutil

    store = tmp_path / "two.sqlite"
    shutil.copyfile(quickstart / "greval.sqlite", store)
    spec = tmp_path / "attribution.yaml"
    text = (quickstart / "attribution.yaml").read_text()
    spec.write_text(text.replace("Judge the response against", "Judge the response strictly against"))
    args = ["run", str(quickstart / "records.jsonl"), "-s", str(spec), "--store", str(store)]
    args += ["--judge", "openai:judge-test", "--base-url", server.base_url]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    db = sqlite3.connect(store)
    hashes = [h for (h,) in db.execute("SELECT spec_hash FROM verdicts GROUP BY spec_hash ORDER BY MIN(rowid)")]
    db.close()
    assert len(hashes) == 2
    return store, f"attribution@{hashes[0]}", f"attribution@{hashes[1]}"


def test_comparison_of_two_runs_shows_agreement_paired_by_record(
    quickstart: Path, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of the same records (the quick start's, and one of a second spec version): the agreement
    difference pairs by record and equals `greval agreement --spec A --spec B`'s paired comparison."""
    from greval.store.store import Store

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    store, a, b = _two_versions(quickstart, openai_server, tmp_path)
    with Store(str(store)) as st:
        first, second = [r["run_id"] for r in st.runs()][-2:]
    out = tmp_path / "cmp"
    args = ["report", "--store", str(store), "--compare", first, second, "-o", str(out), "--bootstrap", "50"]
    res = CliRunner().invoke(main, args, terminal_width=200)
    assert res.exit_code == 0, res.output
    [m] = json.loads((out / "comparison.json").read_text())["metrics"]
    assert m["agreement_pairing"] == "record"
    ag = tmp_path / "ag.json"
    args = ["agreement", "--store", str(store), "--spec", a, "--spec", b, "--json", str(ag), "--bootstrap", "50"]
    assert CliRunner().invoke(main, args).exit_code == 0
    rep = json.loads(ag.read_text())
    for d in rep["differences"]:
        mine = m["agreement"][d["metric"]]
        assert mine["difference"] == pytest.approx(d["estimate"]["value"])
        assert mine["ci"] == pytest.approx([d["estimate"]["ci_low"], d["estimate"]["ci_high"]])
        assert mine["n"] == rep["common_items"] == 30
    assert "<td>record</td><td>30</td>" in (out / "index.html").read_text() and "Cohen's κ" in res.output


@pytest.mark.browser
def test_comparison_of_two_spec_versions_shows_changed_verdicts_first(
    quickstart: Path, openai_server: OpenAIServer, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    store, a, b = _two_versions(quickstart, openai_server, tmp_path)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(
        main, ["report", "--store", str(store), "--compare", a, b, "-o", str(out), "--bootstrap", "50"]
    )
    assert res.exit_code == 0, res.output
    comp = json.loads((out / "comparison.json").read_text())
    [m] = comp["metrics"]
    rows = {r[1]: r for r in _rows(out, 0)}
    assert m["changed"] == sum(r[-1] == "changed" for r in rows.values()) > 0 and m["compared"] == 30
    # the agreement difference is greval agreement's paired comparison of the same two versions
    ag = tmp_path / "ag.json"
    args = ["agreement", "--store", str(store), "--spec", a, "--spec", b, "--json", str(ag), "--bootstrap", "50"]
    assert CliRunner().invoke(main, args).exit_code == 0
    kappa = next(d for d in json.loads(ag.read_text())["differences"] if d["metric"] == "cohen_kappa")
    assert m["agreement"]["cohen_kappa"]["difference"] == pytest.approx(kappa["estimate"]["value"])
    assert m["agreement"]["cohen_kappa"]["ci"] == pytest.approx(
        [kappa["estimate"]["ci_low"], kappa["estimate"]["ci_high"]]
    )
    page = _page(browser)
    page.goto((out / "index.html").as_uri())
    assert emptiness(page.content()) == []
    page.click("text=changed verdict(s) of 30")
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#count").inner_text() == f"{m['changed']} of 30 records"
    page.click("text=Clear filters")
    page.wait_for_function("document.body.dataset.ready === 'list' && !location.hash.includes('changed')")
    first = page.locator("#table tbody tr").first
    assert "changed" in (first.get_attribute("class") or "")
    cells = first.locator("td").all_inner_texts()
    assert cells[1] == "changed" and cells[2] != cells[3]  # A's verdict and B's, side by side
    first.locator("a").click()
    page.wait_for_selector("body[data-ready=record]")
    assert (
        f"B: {b}" in page.locator("#record").inner_text() and "changed from A" in page.locator("#record").inner_text()
    )
    assert page.errors == []


@pytest.mark.browser
def test_serve_shows_the_report_and_explorer_under_ui(
    llm: OpenAIServer, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`greval serve`'s /ui: the store's report and explorer, rebuilt when new verdicts arrive; no file outside
    the report folder is reachable."""
    import httpx

    from greval.report.explorer import served
    from tests.test_serve import rows, serving, ui_until

    monkeypatch.setattr(served, "CHECK_EVERY", 0.0)
    monkeypatch.setattr(served, "MIN_GAP", 0.0)
    store = tmp_path / "served.sqlite"
    with serving(llm, store) as url, httpx.Client(base_url=url, timeout=60) as http:
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(3)}).status_code == 200
        assert http.get("/ui").headers["location"] == "/ui/"
        r = ui_until(http, "/ui/", "Report of the store as of")  # built in the background (tests/test_serve.py)
        assert "greval report" in r.text and "explorer/index.html" in r.text
        meta = http.get("/ui/explorer/data/meta.js")
        assert meta.headers["content-type"].startswith("text/javascript") and '"records":3' in meta.text
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(2, 3)}).status_code == 200
        ui_until(http, "/ui/explorer/data/meta.js", '"records":5')  # rebuilt: the store changed
        for bad in ("/ui/../../etc/passwd", "/ui/%2e%2e/%2e%2e/etc/passwd", "/ui/nothing.js"):
            assert http.get(bad).status_code == 404, bad
        page = browser.new_page()
        page.goto(url + "/ui/explorer/index.html#m=0")
        page.wait_for_selector("body[data-ready=list]")
        assert page.locator("#count").inner_text() == "5 of 5 records"
        # a record page's prompt, loaded on demand from /ui, is what the judge was sent for that record
        sent = _sent(llm)
        for rec in range(5):
            page.goto(url + f"/ui/explorer/index.html#m=0&record={rec}")
            page.wait_for_selector("body[data-ready=record]")
            [shown] = _shown_prompt(page)
            assert shown in sent
            sent.remove(shown)
        assert sent == []
        page.close()


@pytest.mark.browser
def test_a_record_page_shows_the_judges_samples(
    quickstart: Path, openai_server: OpenAIServer, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge asked three times per record (--samples 3): the record page lists the three answers."""
    import shutil

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    store = tmp_path / "samples.sqlite"
    shutil.copyfile(quickstart / "greval.sqlite", store)
    args = ["run", str(quickstart / "records.jsonl"), "-s", str(quickstart / "attribution.yaml"), "--store", str(store)]
    args += ["--judge", "openai:judge-test", "--base-url", openai_server.base_url, "--samples", "3"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    out = _report(store, tmp_path / "report")
    col = _meta(out)["columns"].index("samples")
    found = [(i, r) for i in range(len(_meta(out)["metrics"])) for r in _rows(out, i) if r[col]]
    assert found and all(len(r[col]) == 3 for _, r in found)
    metric, row = found[0]
    page = _page(browser)
    page.goto((out / "explorer" / "index.html").as_uri() + f"#m={metric}&record={row[0]}")
    page.wait_for_selector("body[data-ready=record]")
    shown = page.locator("[data-field=samples]").inner_text()
    assert "the judge's 3 samples" in shown and row[col][0]["label"] in shown
    assert page.errors == []


def test_a_per_item_metric_s_confidence_is_its_least_sure_item_s(llm: OpenAIServer, tmp_path: Path) -> None:
    """Judged three times per item (--samples 3: confidence is the share of samples agreeing), a per-item
    metric's record row shows its least sure item's confidence (before: its first item's), and a record metric's
    row its verdict's."""
    store = _judged_store(llm, tmp_path, "--samples", "3")
    # the test server's three samples of one prompt agree (confidence 1.0): two items are made less sure, as two
    # of three samples agreeing would leave them
    with sqlite3.connect(store) as db:
        db.execute("UPDATE verdicts SET confidence=0.667 WHERE item_id='c2' AND record_id IN ('r0', 'r2')")
        db.execute("UPDATE verdicts SET confidence=0.333 WHERE item_id='c1' AND record_id='r2'")
    out = _report(store, tmp_path / "report")
    meta = _meta(out)
    col = meta["columns"].index("confidence")
    with Store(store) as st:
        stored = st.query("SELECT spec_name, record_hash, item_id, confidence FROM verdicts WHERE status='ok'")
    varied = 0
    for i, m in enumerate(meta["metrics"]):
        if m["name"] not in ("chunk_evaluation", "answer_alignment"):
            continue
        for r in _rows(out, i):
            mine = [v for v in stored if v["spec_name"] == m["name"] and v["record_hash"] in _hashes(store, r[1])]
            confs = [v["confidence"] for v in mine]
            assert None not in confs and r[col] == min(confs), (m["name"], r[1], confs)
            varied += len(set(confs)) > 1
    assert varied, "no per-item record whose items' confidences differ: the test shows nothing"


def _judged_store(llm: OpenAIServer, tmp_path: Path, *extra: str) -> Path:
    """Three records judged by the test server on a record metric, a per-item metric and a computed one."""
    data = tmp_path / "records.jsonl"
    rows = [
        {
            "id": f"r{i}",
            "question": f"What does passage {i} say about <b>film {i}</b>?",
            "expected_answer": f"It says film {i} came out in 19{80 + i}.",
            "answer": f"Film {i} came out in 19{80 + i}, it says.",
            "chunks": [f"Film {i} was released in 19{80 + i}.", f"Unrelated text {i}."],
        }
        for i in range(3)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = tmp_path / "s.sqlite"
    args = ["run", str(data), "-s", "answer_alignment", "-s", "chunk_evaluation", "-s", "rouge_l"]
    args += ["--store", str(store), "--judge", "openai:judge-test", "--base-url", llm.base_url, *extra]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return store


def _shown_prompt(page: Any) -> list[list[list[str]]]:
    """The calls a record page shows after "Show the prompt": each call's [role, content] messages, once per time
    it was sent."""
    page.locator("#show-prompt").focus()
    page.keyboard.press("Enter")  # keyboard reachable
    page.wait_for_selector("body[data-prompt=shown]")
    calls = page.eval_on_selector_all(
        "[data-call]",
        """els => els.map(c => [c.querySelector('h3').textContent,
            [...c.querySelectorAll('.msg')].map(m => [m.dataset.role, m.querySelector('pre').textContent])])""",
    )
    out = []
    for head, msgs in calls:
        times = int(re.search(r"sent (\d+) times", head)[1]) if "sent" in head else 1  # type: ignore[index]
        out += [msgs] * times
    return out


def _sent(llm: OpenAIServer) -> list[list[list[str]]]:
    return [[[m["role"], m["content"]] for m in body["messages"]] for body in llm.requests()]


@pytest.mark.browser
@pytest.mark.parametrize("case", ["samples", "fallback"])
def test_a_record_page_shows_exactly_the_messages_the_judge_was_sent(
    case: str, llm: OpenAIServer, browser: Any, tmp_path: Path
) -> None:
    """Every record page's "Show the prompt", over every metric and record, shows the request bodies the test
    server received — each call once per time it was sent (--samples 2; a retry after a 500), per item call for
    chunk_evaluation, per method when the server refuses json_schema and tools (the judge falls back to JSON mode,
    whose system message carries the schema) — and a computed metric says in one line that no prompt was sent."""
    if case == "fallback":
        llm.configure(json_schema=False, tools=False)
        llm.script([{"match": "film 1", "times": 1, "action": {"type": "fault", "status": 500}}])
    store = _judged_store(llm, tmp_path, *(["--samples", "2"] if case == "samples" else []))
    sent = _sent(llm)
    assert len(sent) == 12 if case == "samples" else len(sent) > 6  # 3 records × 2 judge metrics (× 2 samples)
    out = _report(store, tmp_path / "report")
    meta = _meta(out)
    page = _page(browser)
    shown: list[list[list[str]]] = []
    for i, m in enumerate(meta["metrics"]):
        for row in _rows(out, i):
            page.goto((out / "explorer" / "index.html").as_uri() + f"#m={i}&record={row[0]}")
            page.wait_for_selector("body[data-ready=record]")
            if m["kind"] == "computed":
                assert (
                    page.locator("[data-prompt=none]").inner_text() == "Computed without a judge: no prompt was sent."
                )
                continue
            shown += _shown_prompt(page)
            page.evaluate("delete document.body.dataset.prompt")
    key = json.dumps
    assert sorted(map(key, shown)) == sorted(map(key, sent))
    if case == "fallback":  # JSON mode's system message (with the schema) was shown, and a call sent twice
        assert any("valid against this JSON schema" in call[0][1] for call in shown)
        assert len(shown) > len({key(c) for c in shown})
    assert page.errors == []
    # the static part is written once per metric version, the records' parts apart, loaded only when asked
    data = out / "explorer" / "data"
    assert len(list(data.glob("p*.js"))) == 2 and len(list(data.glob("q*.js"))) == 2


@pytest.mark.browser
def test_the_records_costs_sum_to_the_run_s_cost(
    llm: OpenAIServer, browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The explorer's per-record costs (Price.cost of each judgement's tokens, cached ones reported by the test
    server's prefix cache, at the user's price table) add up to the run's cost as `greval results runs` shows
    it; a store migrated from schema 5 shows upper bounds and says why; a judge without a price shows no $0."""
    import shutil

    from greval.llm.prices import RunCost, cost_text, load_prices, run_cost

    prices = tmp_path / "prices.yaml"
    prices.write_text("judge-test: {input: 100, cached_input: 10, output: 1000}\n")
    monkeypatch.setenv("GREVAL_PRICES", str(prices))
    llm.configure(prefix_cache=True)
    store = _judged_store(llm, tmp_path)
    old = tmp_path / "v5.sqlite"
    shutil.copyfile(store, old)
    out = _report(store, tmp_path / "report")
    meta = _meta(out)
    col = {c: i for i, c in enumerate(meta["columns"])}
    rows = [r for i in range(len(meta["metrics"])) for r in _rows(out, i)]
    with Store(store) as st:
        [run] = st.runs()
        judged = {(g["spec_key"], g["record_hash"]): g for g in st.query("SELECT * FROM judgements")}
    summary = json.loads(run["summary"])
    assert sum(m["tokens_cached"] for m in summary["metrics"]) > 0
    expected = run_cost([{**m, "judge": summary["judge"]} for m in summary["metrics"]], load_prices())
    costs = [r[col["cost"]] for r in rows if r[col["cost"]] is not None]
    assert len(costs) == 6 and all(g["tokens_cached"] is not None for g in judged.values())
    assert expected.usd and sum(costs) == pytest.approx(expected.usd, rel=1e-12)  # the same sum, float rounding
    shown = cost_text(RunCost(usd=sum(costs)))
    assert shown == cost_text(expected) and not any(r[col["cost_text"]].startswith("≤") for r in rows)
    listed = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "250"})
    assert listed.exit_code == 0 and shown in listed.output, listed.output
    # a many-metric's tokens are its judgement's, once (not once per item)
    many = next(i for i, m in enumerate(meta["metrics"]) if m["many"])
    for r in _rows(out, many):
        mine = [g for g in judged.values() if g["record_hash"] in _hashes(store, r[col["id"]])]
        assert r[col["tokens"]] in {g["tokens_in"] + g["tokens_out"] for g in mine}

    # the same store as schema 5 wrote it, its calls logged before greval counted cached tokens: none recorded ->
    # an upper bound, said as such
    db = sqlite3.connect(old)
    db.executescript(
        "ALTER TABLE judgements DROP COLUMN tokens_cached; UPDATE meta SET value='5' WHERE key='schema_version';"
        + ";".join(AS_SCHEMA_6)
    )
    for rowid, calls in db.execute("SELECT rowid, calls FROM judgements").fetchall():
        older = [{k: v for k, v in c.items() if k != "tokens_cached"} for c in json.loads(calls)]
        db.execute("UPDATE judgements SET calls=? WHERE rowid=?", (json.dumps(older), rowid))
    db.commit()
    db.close()
    out5 = _report(old, tmp_path / "report5")
    rows5 = [r for i in range(len(meta["metrics"])) for r in _rows(out5, i)]
    bounds = [r for r in rows5 if r[col["cost"]] is not None]
    assert bounds and all(r[col["cost_text"]].startswith("≤ $") for r in bounds)
    assert sum(r[col["cost"]] for r in bounds) > sum(costs)
    page = _page(browser)
    metric = _meta(out5)["metrics"].index(next(m for m in _meta(out5)["metrics"] if m["name"] == "answer_alignment"))
    page.goto((out5 / "explorer" / "index.html").as_uri() + f"#m={metric}")
    page.wait_for_selector("body[data-ready=list]")
    cell = (
        page.locator("#table tbody tr")
        .first.locator("td")
        .nth(page.locator("#table thead th").all_inner_texts().index("cost"))
    )
    assert cell.inner_text().startswith("≤ $") and "not recorded" in (cell.get_attribute("title") or "")
    assert "≤ $" in page.locator("#figures").inner_text()
    assert page.locator("#store").inner_text().endswith(f"costs at prices from {prices} over greval's list")
    page.locator("#table tbody a").first.click()
    page.wait_for_selector("body[data-ready=record]")
    said = page.locator("[data-field=cost]").inner_text()
    assert "cost ≤ $" in said and "cached prompt tokens were not recorded" in said

    # a judge no table prices: a dash and why, never $0
    prices.write_text("other-model: {input: 1, output: 1}\n")
    outx = _report(store, tmp_path / "reportx")
    mx = _meta(outx)["metrics"][metric]
    assert mx["cost_missing"] == "no price for openai:judge-test" and mx["figures"]["cost"] == "—"
    assert {r[col["cost_text"]] for r in _rows(outx, metric)} == {"—"}
    page.goto((outx / "explorer" / "index.html").as_uri() + f"#m={metric}&record=0")
    page.wait_for_selector("body[data-ready=record]")
    assert "cost — (no price for openai:judge-test)" in page.locator("[data-field=cost]").inner_text()
    assert page.errors == []

    # a price table greval cannot read: the page and the terminal both say so, naming the file
    prices.write_text("judge-test: {input: -1}\n")
    res = CliRunner().invoke(
        main, ["report", "--store", str(store), "-o", str(tmp_path / "r-bad"), "--bootstrap", "50"]
    )
    assert res.exit_code == 0 and "the explorer shows no cost per record" in res.output and str(prices) in res.output


def _hashes(store: Path, record_id: str) -> set[str]:
    with Store(store) as st:
        return {
            r["record_hash"] for r in st.query("SELECT record_hash FROM record_ids WHERE record_id=?", (record_id,))
        }


def test_a_prompt_that_cannot_be_rebuilt_exactly_says_why(tmp_path: Path) -> None:
    """A store written at schema 2 (tests/fixtures/store_v2.sqlite.gz: prompt layout 1, and answer_completeness
    reads two other metrics' verdicts): each metric's record pages say in one line why its prompt is not shown,
    and no prompt file is written for it (nothing approximate)."""
    import gzip

    store = tmp_path / "v2.sqlite"
    store.write_bytes(gzip.decompress((Path(__file__).parent / "fixtures" / "store_v2.sqlite.gz").read_bytes()))
    out = _report(store, tmp_path / "report")
    notes = {m["name"]: m["prompt"] for m in _meta(out)["metrics"]}
    assert notes.pop("answer_completeness").startswith(
        "This metric's prompt held the verdicts of chunk_evaluation, triple_evaluation as they were when it was judged"
    )
    assert set(notes) == {"answer_alignment", "chunk_evaluation", "triple_evaluation"}
    assert all(n.startswith("Judged with an earlier prompt layout than this greval's") for n in notes.values())
    assert list((out / "explorer" / "data").glob("[pq]*.js")) == []


@pytest.mark.browser
def test_a_record_page_shows_a_trajectory_step_by_step_with_its_verdicts(
    llm: OpenAIServer, browser: Any, tmp_path: Path
) -> None:
    """An agent's record (issue 45): its steps numbered, each tool call as code (the tool's name, its arguments as
    indented JSON), each tool result folded until opened, and beside each agent step the judge's per-step verdict,
    the computed metric's verdict on it and a person's label; markup in a tool's output stays text. The verdict's
    headline counts the steps' verdicts (it showed the first step's reason as the record's)."""
    from greval.spec import Spec, resolve_specs
    from tests.test_annotation_trajectory import JUDGED, TRIPS, step_verdicts

    llm.script(
        [
            {"match": f"Item ids: {', '.join(labels)}", "action": {"type": "respond", "content": step_verdicts(labels)}}
            for labels in JUDGED.values()
        ]
    )
    reference = [
        {"name": "get_weather", "arguments": {"city": "Nice"}},
        {"name": "book_hotel", "arguments": {"city": "Nice", "nights": 1}},
    ]
    rows = [{**t, "expected_trajectory": reference} if t["id"] == "trip-2" else t for t in TRIPS]
    data = tmp_path / "agents.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = tmp_path / "agents.sqlite"
    args = ["run", str(data), "-s", "step_usefulness", "-s", "first_wrong_step", "--store", str(store),
            "--judge", "openai:judge-test", "--base-url", llm.base_url]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    spec = next(s for s in resolve_specs(["step_usefulness"]) if isinstance(s, Spec))
    with Store(store) as st:
        rec_hash = st.query("SELECT record_hash FROM verdicts WHERE record_id='trip-2' LIMIT 1")[0]["record_hash"]
        label = {"spec_name": spec.name, "dataset": "import", "record_id": "trip-2", "record_hash": rec_hash,
                 "item_id": "s6", "annotator": "ann1", "spec_hash": spec.hash, "label": "Useful", "value": None,
                 "comment": "the booking did happen", "status": "submitted", "source": "import",
                 "answered_at": 1.0}  # fmt: skip
        st.put_human_labels([label])
    out = _report(store, tmp_path / "report")
    metrics = [m["name"] for m in _meta(out)["metrics"]]
    # the record's headline is its steps' verdicts counted, not its first step's reason ("why s2 is Harmful")
    col = {c: i for i, c in enumerate(_meta(out)["columns"])}
    [trip2] = [r for r in _rows(out, metrics.index("step_usefulness")) if r[col["id"]] == "trip-2"]
    n = len(JUDGED["trip-2"])
    counted = Counter(JUDGED["trip-2"].values())
    headline = "; ".join(f"{k} of {n} steps {lab}" for lab, k in counted.items()) + " — each step's reason is under it"
    assert trip2[col["reason"]] == headline
    page = _page(browser)
    for name in ("step_usefulness", "first_wrong_step"):
        page.goto((out / "explorer" / "index.html").as_uri() + f"#m={metrics.index(name)}&q=Nice")
        page.wait_for_selector("body[data-ready=list]")
        page.locator("#table tbody a").first.click()
        page.wait_for_selector("body[data-ready=record]")
        assert page.locator("#record h2").first.inner_text() == "Record trip-2"
        traj = page.locator("[data-field=trajectory]")  # (the reference trajectory is shown too, below it)
        steps = traj.locator("ol.steps > li")
        assert steps.count() == 6
        heads = [steps.nth(i).locator(".step-head").first.inner_text() for i in range(6)]
        assert [h.split(" · ")[0] for h in heads] == [f"Step {n}" for n in range(1, 7)]
        assert heads[1].startswith("Step 2 · tool call book_hotel s2 · call c1"), heads[1]
        args = traj.locator("[data-step=s2] pre.args code").inner_text()
        assert json.loads(args) == {"city": "Nice", "nights": 0} and args == json.dumps(json.loads(args), indent=2)
        result = traj.locator("[data-step=s3] details")
        assert result.get_attribute("open") is None and not traj.locator("[data-step=s3] pre.result").is_visible()
        result.locator("summary").click()
        assert traj.locator("[data-step=s3] pre.result").inner_text() == "Error: nights must be at least 1"
        side = {s: traj.locator(f"[data-step={s}] .side").inner_text() if traj.locator(f"[data-step={s}] .side").count()
                else "" for s in ("s1", "s2", "s3", "s4", "s6")}  # fmt: skip
        if name == "step_usefulness":  # each agent step its verdict; the user's step and the results none
            said = page.locator("section.judge [data-field=reason]").inner_text()
            assert said == f"the items' verdicts\n{headline}", said
            assert side["s1"] == side["s3"] == ""
            for sid, lab in JUDGED["trip-2"].items():
                assert side[sid].startswith(f"judge: {lab}\nwhy {sid} is {lab}"), side[sid]
            assert "human — ann1: Useful" in side["s6"]
        else:  # the computed metric's item is step:s2, its first wrong step
            assert side["s2"].startswith("judge: first wrong") and side["s4"] == ""
    # a tool's output that is markup stays text
    page.goto((out / "explorer" / "index.html").as_uri() + f"#m={metrics.index('step_usefulness')}&q=Paris")
    page.wait_for_selector("body[data-ready=list]")
    page.locator("#table tbody a").first.click()
    page.wait_for_selector("body[data-ready=record]")
    traj.locator("[data-step=s5] summary").click()
    assert traj.locator("[data-step=s5] pre.result").inner_text() == "Lyon: 24 C, sunny <b>hot</b>"
    assert page.locator("[data-field=trajectory] b").count() == 0
    page.set_viewport_size({"width": 390, "height": 844})  # a phone: the nested arguments wrap, no sideways scroll
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1
    assert page.errors == []


# ------------------------------------------------------------------------------------------------ a long table
LONG = 400  # records: many screens of rows


def _judged_report(server: OpenAIServer, work: Path, n: int) -> tuple[Path, Path]:
    """A store of ``n`` records judged by the test server on answer_alignment, and its report: (store, report)."""
    server.reset()
    server.configure(latency=0.0, json_schema=True, tools=True)
    data = work / "records.jsonl"
    rows = [
        {"id": f"v{i}", "question": f"What is item {i}?", "answer": f"Item {i}.", "expected_answer": f"It is {i}."}
        for i in range(n)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = work / "long.sqlite"
    args = ["run", str(data), "-s", "answer_alignment", "--store", str(store), "--judge", "openai:judge-test"]
    args += ["--base-url", server.base_url, "-c", "32"]
    # greval's data directory in the work folder: a file this size gets a row cache entry (greval.dataset.rowcache)
    res = CliRunner().invoke(main, args, env={"OPENAI_API_KEY": "sk-test", "GREVAL_HOME": str(work / "home")})
    assert res.exit_code == 0, res.output
    return store, _report(store, work / "report")


@pytest.fixture(scope="module")
def long_report(openai_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _judged_report(openai_server, tmp_path_factory.mktemp("long"), LONG)


def _exported(store: Path, tmp_path: Path) -> dict[str, str]:
    """`greval results export --level record`: record id -> its verdict."""
    out = tmp_path / "records.csv"
    res = CliRunner().invoke(main, ["results", "export", "--store", str(store), "-o", str(out), "--level", "record"])
    assert res.exit_code == 0, res.output
    return {r["record_id"]: r["label"] for r in csv.DictReader(out.open())}


DRAWN = """() => [...document.querySelectorAll('#table tbody tr')].map((tr) =>
  [parseInt(tr.getAttribute('aria-rowindex'), 10), tr.cells[0].innerText, tr.cells[1].innerText])"""


def _scroll_through(page: Any) -> tuple[list[list[Any]], int]:
    """Every row drawn while the page scrolls from the top of the table to its end, a screen at a time, in order
    of row index (each once); and the most rows drawn at once."""
    page.evaluate("window.scrollTo(0, 0)")
    seen: dict[int, list[Any]] = {}
    most = 0
    while True:
        page.wait_for_timeout(50)  # the window follows the scroll in the next frame
        drawn = page.evaluate(DRAWN)
        most = max(most, len(drawn))
        seen.update({i: row for i, *row in drawn})
        at_end = page.evaluate("window.scrollY + window.innerHeight >= document.documentElement.scrollHeight - 1")
        if at_end:
            return [seen[i] for i in sorted(seen)], most
        page.evaluate("window.scrollBy(0, window.innerHeight * 0.9)")


def _ids(rows: list[list[Any]]) -> list[str]:
    return [r[0] for r in rows]


def _natural(rid: str) -> int:
    return int(rid[1:])


@pytest.mark.browser
def test_a_long_table_draws_a_window_and_scrolling_reaches_every_record(
    long_report: tuple[Path, Path], browser: Any, tmp_path: Path
) -> None:
    """400 records: the table draws only the rows around the screen (a few dozen), the page is as tall as the
    whole table, and scrolling to its end draws every record once, in record-id order, each with the verdict
    `greval results export` gives it; a filter and a sort are scrolled through the same way."""
    store, out = long_report
    exported = _exported(store, tmp_path)
    page = _page(browser)
    page.goto((out / "explorer" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#count").inner_text() == f"{LONG} of {LONG} records"
    assert page.get_attribute("#table", "aria-rowcount") == str(LONG + 1)
    first = page.locator("#table tbody tr").count()
    assert 10 <= first <= 80  # a window, not the table
    row = page.evaluate("document.querySelector('#table tbody tr').getBoundingClientRect().height")
    table = page.evaluate("document.querySelector('#table tbody').getBoundingClientRect().height")
    assert table == pytest.approx(LONG * row, abs=LONG * 0.05 + 2)  # the rows not drawn keep their place
    rows, most = _scroll_through(page)
    assert most <= 80
    assert _ids(rows) == sorted(exported, key=_natural)  # every record, once, in record-id order
    assert {rid: verdict for rid, verdict in rows} == exported  # the verdicts export gives
    last = page.evaluate("document.querySelector('#table tbody tr:last-child').getBoundingClientRect().bottom")
    assert last <= page.evaluate("window.innerHeight") + 1  # the last row on screen at the page's end

    # a filter: the records export gives that label, every one reached
    label = sorted(set(exported.values()))[0]
    page.evaluate("window.scrollTo(0, 0)")
    page.select_option("#f-label", label)
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('label=')")
    wanted = sorted((rid for rid, v in exported.items() if v == label), key=_natural)
    assert page.locator("#count").inner_text() == f"{len(wanted)} of {LONG} records"
    assert _ids(_scroll_through(page)[0]) == wanted

    # a sort: the record column turned round, every record reached in that order
    page.click("text=Clear filters")
    page.wait_for_function("document.body.dataset.ready === 'list' && !location.hash.includes('label=')")
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#table thead button[data-sort=id]").click()  # record-id order is ascending: now descending
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('dir=desc')")
    assert _ids(_scroll_through(page)[0]) == sorted(exported, key=_natural, reverse=True)
    assert page.errors == []


@pytest.mark.browser
def test_the_keyboard_reaches_every_row_of_a_long_table(long_report: tuple[Path, Path], browser: Any) -> None:
    """Tab from row to row past the rows first drawn, the arrow keys, End and Home move the focus through the
    whole table (its rows drawn as the focus comes); j from a record page and Esc bring back to the table with
    that record's row on screen and focused."""
    _, out = long_report
    page = _page(browser)
    page.goto((out / "explorer" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=list]")
    ids = sorted((f"v{i}" for i in range(LONG)), key=_natural)
    focused = "document.activeElement.closest('#table tbody tr') && document.activeElement.innerText"
    drawn = page.locator("#table tbody tr").count()
    page.locator("#table tbody a").first.focus()
    for i in range(1, drawn + 20):  # past the rows drawn when the page opened
        page.keyboard.press("Tab")
        assert page.evaluate(focused) == ids[i]
    on_screen = """() => { const r = document.activeElement.getBoundingClientRect();
        return r.top >= 0 && r.bottom <= window.innerHeight; }"""
    assert page.evaluate(on_screen)
    page.keyboard.press("End")
    assert page.evaluate(focused) == ids[-1] and page.evaluate(on_screen)
    page.keyboard.press("ArrowUp")
    assert page.evaluate(focused) == ids[-2]
    page.keyboard.press("Home")
    assert page.evaluate(focused) == ids[0] and page.evaluate(on_screen)
    for i in range(1, 40):
        page.keyboard.press("ArrowDown")
        assert page.evaluate(focused) == ids[i]
    assert page.locator("#table tbody tr").count() <= 80
    # a record page, j to the next record twice, Esc: back at that record's row
    page.keyboard.press("Enter")
    page.wait_for_selector("body[data-ready=record]")
    assert page.locator("#record h2").first.inner_text() == f"Record {ids[39]}"
    for _ in range(2):
        page.evaluate("document.body.dataset.ready = ''")
        page.keyboard.press("j")
        page.wait_for_selector("body[data-ready=record]")
    assert page.locator("#record h2").first.inner_text() == f"Record {ids[41]}"
    page.keyboard.press("Escape")
    page.wait_for_selector("body[data-ready=list]")
    assert page.evaluate(focused) == ids[41] and page.evaluate(on_screen)
    assert page.errors == []


# ------------------------------------------------------------------------------------------------ 10,000 records
MANY = 10_000  # issue 46: the size the filter is measured at (scripts/bench_explorer.py)

NEXT_FRAME = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"

#: The rows drawn, the rows on the screen, and the row at the middle of the screen with the row the scroll position
#: says is there (row 0's place plus that many row heights: a row's height the median of the rows drawn).
AT_SCREEN = """() => {
  const body = document.querySelector('#table tbody'), rows = [...body.rows];
  const hs = rows.map((tr) => tr.getBoundingClientRect().height).sort((a, b) => a - b), h = hs[hs.length >> 1];
  const mid = window.innerHeight / 2, hit = document.elementFromPoint(200, mid).closest('#table tbody tr');
  const at = (tr) => parseInt(tr.getAttribute('aria-rowindex'), 10) - 2;
  const onScreen = (b) => b.bottom > 0 && b.top < innerHeight;
  const shown = rows.filter((tr) => onScreen(tr.getBoundingClientRect()));
  return {
    drawn: rows.map((tr) => [at(tr), tr.cells[0].innerText, tr.cells[1].innerText]),
    shown: shown.map(at),
    middle: hit ? at(hit) : null,
    expected: Math.floor((mid - body.getBoundingClientRect().top) / h),
  };
}"""


@pytest.fixture(scope="module")
def many_report(openai_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return _judged_report(openai_server, tmp_path_factory.mktemp("many"), MANY)


def _check_screens(page: Any, order: list[str], verdicts: dict[str, str]) -> None:
    """At the top, at fractions of the way down and at the end of the table: the rows drawn are a window of a few
    dozen, each the record the view has at its place with its verdict, and the rows on the screen are the ones the
    scroll position says (the row at the screen's middle is the one that many row heights down)."""
    for frac in (0.0, 0.137, 0.5, 0.861, 1.0):
        page.evaluate(f"window.scrollTo(0, {frac} * (document.documentElement.scrollHeight - window.innerHeight))")
        page.evaluate(NEXT_FRAME)
        got = page.evaluate(AT_SCREEN)
        assert 10 <= len(got["drawn"]) <= 80, (frac, len(got["drawn"]))
        assert [(rid, v) for _, rid, v in got["drawn"]] == [(order[i], verdicts[order[i]]) for i, _, _ in got["drawn"]]
        assert got["shown"] and got["shown"] == list(range(got["shown"][0], got["shown"][-1] + 1))
        if frac < 1.0:  # at the end the middle of the screen may be below the last row
            # one row's leeway: the first row drawn after the rows not drawn is half a collapsed border shorter
            assert abs(got["middle"] - got["expected"]) <= 1, (frac, got["middle"], got["expected"])
        if frac == 0.0:
            assert got["shown"][0] == 0
        if frac == 1.0:
            assert got["shown"][-1] == len(order) - 1  # the last record is on the screen at the end


@pytest.mark.browser
def test_a_10000_record_explorer_scrolls_and_filters_to_the_store_s_figures(
    many_report: tuple[Path, Path], browser: Any, tmp_path: Path
) -> None:
    """10,000 records: wherever the table is scrolled, the rows on screen are the right records with the verdicts
    `greval results export` gives, a window of them drawn; a label filter's count is the store's figure for that
    label (greval.store.results.figures, what the run summary and the report show) and only a window is drawn for
    it; the filtered and the re-sorted tables scroll right too."""
    from greval.store.results import figures

    store, out = many_report
    exported = _exported(store, tmp_path)
    with Store(store) as st:
        [fig] = figures(st, "answer_alignment")
    assert sum(fig.distribution.values()) == MANY
    page = _page(browser)
    page.goto((out / "explorer" / "index.html").as_uri())
    page.wait_for_selector("body[data-ready=list]")
    assert page.locator("#count").inner_text() == f"{MANY} of {MANY} records"
    order = sorted(exported, key=_natural)
    _check_screens(page, order, exported)

    for label, count in sorted(fig.distribution.items()):
        page.evaluate("window.scrollTo(0, 0)")
        page.evaluate("document.body.dataset.ready = ''")
        page.select_option("#f-label", label)
        page.wait_for_function("document.body.dataset.ready === 'list'")
        assert page.locator("#count").inner_text() == f"{count} of {MANY} records"
        assert page.evaluate("window.GREVAL_LAST.shown") == count and page.evaluate("window.GREVAL_LAST.drawn") <= 80
        _check_screens(page, [rid for rid in order if exported[rid] == label], exported)

    page.click("text=Clear filters")
    page.wait_for_function("document.body.dataset.ready === 'list' && !location.hash.includes('label=')")
    page.evaluate("window.scrollTo(0, 0)")
    page.locator("#table thead button[data-sort=id]").click()  # record-id order is ascending: now descending
    page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('dir=desc')")
    _check_screens(page, order[::-1], exported)
    assert page.errors == []

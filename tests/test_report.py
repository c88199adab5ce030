"""Stage 7 — the report of a store: metrics, systems side by side, agreement pages; rendered in Chromium."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy.stats import bootstrap

from greval.cli import main
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.report.store_report import build, mean_ci
from greval.runner import RunOptions, run
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

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

"""A person labels in the real Argilla web UI (headless Chromium) and `greval annotate pull` stores it.

Push one judged record, sign in as the owner, open the dataset, pick a label other than the judge's
suggestion, submit; then pull and find exactly that answer in ``human_labels``.
"""

from __future__ import annotations

import importlib.util
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

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def open_dataset(browser: Any, url: str, username: str, password: str, dataset: str) -> Any:
    """A new 1400 × 1000 page in which ``username`` signs in to Argilla at ``url`` and opens ``dataset`` in its
    annotation mode: where every browser test of Argilla starts."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(f"{url}/sign-in")
    page.fill("input[name=Username]", username)
    page.fill("input[name=Password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(lambda u: "sign-in" not in u, timeout=30_000)
    page.get_by_text(dataset, exact=True).first.click()
    page.wait_for_url("**/annotation-mode**", timeout=30_000)
    return page


pytestmark = [
    pytest.mark.slow,
    pytest.mark.argilla,
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM} (apt-get install chromium)"),
    pytest.mark.skipif(importlib.util.find_spec("playwright") is None, reason="playwright not installed (pip)"),
]


@pytest.fixture(scope="module")
def info(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.ServerInfo]:
    with server.running_server(data=tmp_path_factory.mktemp("argilla-browser")) as i:
        yield i


def test_label_in_the_browser_then_pull(
    info: server.ServerInfo, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.sync_api import sync_playwright

    from greval.cli import main

    spec = resolve_specs(["answer_alignment"])[0]
    assert isinstance(spec, Spec)
    store_path = tmp_path / "store.sqlite"
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.reset()
    with Store(store_path) as st:
        run([spec], rag_records(3), st, JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url))
    env = {"ARGILLA_API_URL": info.url, "ARGILLA_API_KEY": info.api_key}
    cli = CliRunner()
    pushed = cli.invoke(
        main,
        [
            "annotate",
            "push",
            "--store",
            str(store_path),
            "--spec",
            spec.name,
            "--select",
            "random",
            "--n",
            "1",
            "--dataset",
            "browser-review",
        ],
        env=env,
    )
    assert pushed.exit_code == 0, pushed.output
    with Store(store_path) as st:
        sel = st.query(
            "SELECT s.record_hash, v.label FROM annotation_selection s JOIN verdicts v"
            " ON v.record_hash=s.record_hash AND v.spec_name=s.spec_name"
        )
    assert len(sel) == 1
    judge_label = sel[0]["label"]
    human_label = next(lab for lab in spec.scale.names if lab != judge_label)  # type: ignore[union-attr]

    shot = tmp_path / "argilla-annotation.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = open_dataset(browser, info.url, info.username, info.password, "browser-review")
            option = page.locator(f"label[for='verdict_{human_label}']")
            option.wait_for(timeout=30_000)
            # The judge's verdict is pre-selected as a suggestion; the person disagrees.
            assert page.locator(f"input[id='verdict_{judge_label}']").is_checked()
            option.click()
            page.screenshot(path=str(shot), full_page=True)
            page.click("button.button--submit")
            page.get_by_text("submitted", exact=False).first.wait_for(timeout=30_000)
            page.wait_for_timeout(1500)
        finally:
            browser.close()
    assert shot.exists() and shot.stat().st_size > 10_000
    keep = Path("/tmp/greval-browser-shots")  # for a human to look at after the run
    keep.mkdir(exist_ok=True)
    shutil.copy(shot, keep / shot.name)

    pulled = cli.invoke(
        main,
        ["annotate", "pull", "--store", str(store_path), "--spec", spec.name, "--dataset", "browser-review"],
        env=env,
    )
    assert pulled.exit_code == 0, pulled.output
    assert "1 submitted" in pulled.output and info.username in pulled.output
    with Store(store_path) as st:
        rows = st.query("SELECT * FROM human_labels WHERE spec_name=?", (spec.name,))
    assert len(rows) == 1
    row = rows[0]
    assert (row["annotator"], row["label"], row["status"], row["source"]) == (
        info.username,
        human_label,
        "submitted",
        "argilla",
    )
    assert row["record_hash"] == sel[0]["record_hash"] and row["item_id"] == ""


def test_metadata_filters_and_progress_with_the_ingest_patches(
    info: server.ServerInfo, openai_server: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded server runs greval's ingest patches (issue 17); in the UI the metadata filters greval
    declares are offered (and only those: the rest is extra metadata), filtering by ``system`` narrows the
    records, and submitting an answer moves the progress."""
    from playwright.sync_api import sync_playwright

    from greval.annotation import dataset as ds
    from greval.cli import main

    log = (info.data_dir / server.LOG_FILE).read_text()
    assert "settings cache applied" in log and "webhook skip applied" in log
    spec = resolve_specs(["answer_alignment"])[0]
    assert isinstance(spec, Spec)
    store_path = tmp_path / "store.sqlite"
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    openai_server.reset()
    with Store(store_path) as st:
        run([spec], rag_records(6), st, JudgeConfig.parse("openai:judge-test", base_url=openai_server.base_url))
    env = {"ARGILLA_API_URL": info.url, "ARGILLA_API_KEY": info.api_key}
    args = ["annotate", "push", "--store", str(store_path), "--spec", spec.name, "--dataset", "browser-filters"]
    pushed = CliRunner().invoke(main, args, env=env)
    assert pushed.exit_code == 0, pushed.output

    shot = tmp_path / "argilla-filters.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = open_dataset(browser, info.url, info.username, info.password, "browser-filters")
            page.get_by_text("1 of 6").wait_for(timeout=30_000)
            page.get_by_text("Filters", exact=True).first.click()
            page.get_by_text("Metadata", exact=True).first.click()
            menu = page.locator(".dropdown__content").first
            menu.get_by_text("system", exact=True).wait_for(timeout=30_000)
            offered = {line.strip() for line in menu.inner_text().splitlines() if line.strip()}
            assert {name for name, _, _ in ds.METADATA} <= offered, offered
            assert not offered & set(ds.EXTRA_METADATA), offered
            menu.get_by_text("system", exact=True).click()
            page.locator(".labels-selector__item", has_text="A").first.locator(".checkbox__container").click()
            page.get_by_text("1 of 3").wait_for(timeout=30_000)  # rag_records: systems A and B alternate
            assert "metadata=system.A" in page.url
            page.locator(".labels-selector__item", has_text="A").first.locator(".checkbox__container").click()
            page.get_by_text("1 of 6").wait_for(timeout=30_000)
            page.mouse.click(1000, 900)  # close the menu
            options = page.locator("input[id^='verdict_']")
            other = next(options.nth(k) for k in range(options.count()) if not options.nth(k).is_checked())
            page.locator(f"label[for='{other.get_attribute('id')}']").click()  # not the judge's suggestion
            page.click("button.button--submit")
            page.get_by_text("16.67%").wait_for(timeout=30_000)  # 1 of 6 records completed
            assert re.search(r"Submitted\s*1\b", page.inner_text("body"))
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    keep = Path("/tmp/greval-browser-shots")
    keep.mkdir(exist_ok=True)
    shutil.copy(shot, keep / shot.name)
    pulled = CliRunner().invoke(
        main,
        ["annotate", "pull", "--store", str(store_path), "--spec", spec.name, "--dataset", "browser-filters"],
        env=env,
    )
    assert pulled.exit_code == 0, pulled.output
    assert "1 submitted" in pulled.output

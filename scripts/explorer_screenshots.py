"""Screenshots of the quick start's report, its record explorer and a comparison of two spec versions for
docs/report.md (run by hand, not by CI).

Builds the quick start's workspace judged by greval's OpenAI-compatible test server (no network, deterministic
answers, so the numbers mean nothing; `greval quickstart --no-argilla`, its 30 human labels imported), judges a
second version of its metric (one word more in the instructions), then writes

    greval report --store greval.sqlite -o report
    greval report --store greval.sqlite -o compare --compare attribution@A attribution@B

and saves headless-Chromium screenshots to docs/images/explorer-*.png.

    python scripts/explorer_screenshots.py /tmp/explorer-shots [--images docs/images]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from greval.cli import main  # noqa: E402
from greval.testing.openai_server import OpenAIServer  # noqa: E402

CHROMIUM = "/usr/bin/chromium"


def _cli(*args: str) -> None:
    res = CliRunner().invoke(main, list(args), env={"COLUMNS": "120"})
    assert res.exit_code == 0, res.output[-3000:]


def build(work: Path) -> tuple[Path, Path]:
    """The quick start's workspace and its report, then a second spec version and the comparison: (report,
    compare)."""
    ws, report, compare = work / "ws", work / "report", work / "compare"
    store = str(ws / "greval.sqlite")
    with OpenAIServer() as llm:
        llm.configure(latency=0.0, json_schema=True, tools=True)
        os.environ["OPENAI_API_KEY"] = "sk-screenshots"
        judge = ["--judge", "openai:judge-test", "--base-url", llm.base_url]
        if not (ws / "greval.sqlite").exists():
            _cli("quickstart", "--dir", str(ws), "--no-argilla", "--bootstrap", "200", *judge)
            _cli("report", "--store", store, "-o", str(report))
            spec = ws / "attribution_v2.yaml"
            text = (ws / "attribution.yaml").read_text()
            spec.write_text(text.replace("Judge the response against", "Judge the response strictly against"))
            _cli("run", str(ws / "records.jsonl"), "-s", str(spec), "--store", store, *judge)
    db = sqlite3.connect(store)
    a, b = (h for (h,) in db.execute("SELECT spec_hash FROM verdicts GROUP BY spec_hash ORDER BY MIN(rowid)"))
    db.close()
    _cli("report", "--store", store, "-o", str(compare), "--compare", f"attribution@{a}", f"attribution@{b}")
    return report, compare


def shoot(report: Path, compare: Path, images: Path) -> None:
    from playwright.sync_api import sync_playwright

    images.mkdir(parents=True, exist_ok=True)
    explorer = (report / "explorer" / "index.html").as_uri()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto((report / "index.html").as_uri())
        page.screenshot(
            path=str(images / "explorer-report.png"),
            full_page=False,
            clip={"x": 0, "y": 0, "width": 1280, "height": 1300},
        )
        page.goto(explorer + "#m=0&agree=disagree")
        page.wait_for_selector("body[data-ready=list]")
        page.screenshot(path=str(images / "explorer-table.png"))
        page.locator("#table tbody a").first.click()
        page.wait_for_selector("body[data-ready=record]")
        page.screenshot(path=str(images / "explorer-record.png"), full_page=True)
        page.goto((compare / "explorer" / "index.html").as_uri() + "#m=0")
        page.wait_for_selector("body[data-ready=list]")
        page.screenshot(path=str(images / "explorer-compare.png"))
        dark = browser.new_page(viewport={"width": 390, "height": 844}, color_scheme="dark")
        dark.goto(explorer + "#m=0&agree=disagree")
        dark.wait_for_selector("body[data-ready=list]")
        dark.screenshot(path=str(images / "explorer-phone-dark.png"))
        browser.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("work", type=Path)
    ap.add_argument("--images", type=Path, default=ROOT / "docs" / "images")
    a = ap.parse_args()
    shoot(*build(a.work), a.images)

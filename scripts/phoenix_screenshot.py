"""The screenshot in docs/integrations.md: greval's verdicts in Phoenix's own trace view.

Starts a throwaway Phoenix server (greval.testing.phoenix) and the local test LLM server, sends the test suite's
instrumented RAG app's traces (tests/traces_app.py), judges them with ``greval run phoenix://…`` and opens one
trace in headless Chromium (/usr/bin/chromium, playwright). Everything runs on 127.0.0.1 and stops at the end.

    python scripts/phoenix_screenshot.py [--out docs/images/phoenix-annotations.png] [--n 20]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from greval.testing.openai_server import OpenAIServer  # noqa: E402
from greval.testing.phoenix import PhoenixServer  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "phoenix-annotations.png")
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-local-test"}
    with PhoenixServer() as px, OpenAIServer() as llm, tempfile.TemporaryDirectory() as tmp:
        app = subprocess.run(
            [sys.executable, "-m", "tests.traces_app", "--phoenix", px.url, "--project", "rag-app", "--llm",
             llm.base_url, "--n", str(args.n)],
            capture_output=True, text=True, cwd=ROOT, env=env, check=True,
        )  # fmt: skip
        traces = [json.loads(line) for line in app.stdout.splitlines()]
        run = subprocess.run(
            [sys.executable, "-m", "greval", "run", f"phoenix://{px.url.removeprefix('http://')}/rag-app",
             "-s", "chunk_evaluation", "-s", "answer_alignment", "--store", f"{tmp}/store.sqlite",
             "--judge", "openai:judge-test", "--base-url", llm.base_url, "--quiet"],
            capture_output=True, text=True, cwd=ROOT, env=env, check=True,
        )  # fmt: skip
        print(run.stdout + run.stderr)
        shoot(px.url, traces[0]["root_span_id"], args.out)
    print(f"wrote {args.out}")


def shoot(url: str, span_id: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 950})
        page.goto(f"{url}/redirects/spans/{span_id}")
        page.wait_for_load_state("networkidle")
        # the span's Annotations section, opened: each annotation's label, score and explanation (the judge's reason)
        section = page.get_by_role("button", name=re.compile(r"^Annotations")).first
        section.wait_for(timeout=30_000)
        section.click()
        page.get_by_role("radio", name="Table").or_(page.get_by_role("button", name="Table")).first.click()
        page.get_by_text("Incorrect").or_(page.get_by_text("Correct")).or_(
            page.get_by_text("Acceptable")
        ).first.wait_for()
        page.wait_for_timeout(1000)
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        browser.close()


if __name__ == "__main__":
    main()

"""Screenshots of ``greval report`` for docs/report.md (run by hand, not by CI).

Builds a store in a work directory: 38 GraphRAG-QA-style records (two methods × three films × six questions, and
two records with no film), judged by greval's OpenAI-compatible test server (greval.testing.openai_server: no
network, deterministic answers) on graphrag_qa_correct (two labels), graphrag_qa_score (0–10) and rouge_l
(computed); human labels for half the graphrag_qa_correct records (a scripted annotator who agrees with the judge
four times in five), so the report shows prevalence-corrected system shares. Then runs

    greval report --store report.sqlite -o report --system-column method --group-column film

and saves headless-Chromium screenshots of report/index.html to docs/images/report-*.png: the overview figure,
the statistics and corrected-prevalence tables, and a system × group table with its heatmap.

    python scripts/report_screenshots.py /tmp/report-shots [--images docs/images]

Needs Chromium (/usr/bin/chromium) and playwright. The greval it runs is the checkout this file belongs to.
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from greval.dataset.records import Record  # noqa: E402
from greval.llm.config import JudgeConfig  # noqa: E402
from greval.llm.retry import RetryPolicy  # noqa: E402
from greval.runner.driver import run  # noqa: E402
from greval.runner.options import RunOptions  # noqa: E402
from greval.spec import resolve_specs  # noqa: E402
from greval.store.store import Store  # noqa: E402
from greval.testing.openai_server import OpenAIServer  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SPECS = ["graphrag_qa_correct", "graphrag_qa_score", "rouge_l"]
FILMS = ["Alien", "Heat", "Up"]
METHODS = ["global", "local"]
KEY = "sk-report-screenshots"


def records() -> list[Record]:
    """Two methods × three films × six questions, and two records whose film is unknown."""
    out = []
    for m, method in enumerate(METHODS):
        for f, film in enumerate([*FILMS, None]):
            for q in range(6 if film else 1):
                i = len(out)
                row = {
                    "id": f"{method}-{film or 'none'}-{q}",
                    "question": f"Question {q} about {film or 'a film'}?",
                    "expected_answer": f"The answer {q} about {film} is in act {q % 3 + 1}.",
                    "answer": f"{'In act' if (i + m) % 3 else 'Maybe'} {q % 3 + 1} of {film}, says {method}.",
                    "method": method,
                    "llm_calls": 3 + 2 * m + q % 2,
                    "tokens": 900 + 650 * m + 37 * q + 11 * f,
                    "latency": round(1.2 + 1.9 * m + 0.1 * q, 2),
                }
                if film:
                    row["film"] = film
                out.append(Record.from_mapping(row))
    return out


def build_store(path: Path) -> None:
    os.environ["OPENAI_API_KEY"] = KEY
    with OpenAIServer() as llm, Store(path) as st:
        cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=20)
        run(resolve_specs(SPECS), records(), st, cfg, options=RunOptions(retry=RetryPolicy(base_delay=0.01)))
        rows = st.query(
            "SELECT record_hash, record_id, label FROM verdicts WHERE spec_name='graphrag_qa_correct' AND status='ok'"
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


def report(work: Path) -> Path:
    out = work / "report"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160", "NO_COLOR": "1", "TERM": "dumb"}
    cmd = [sys.executable, "-c", "from greval.cli import main; main(prog_name='greval')", "report"]
    cmd += ["--store", "report.sqlite", "-o", "report", "--system-column", "method", "--group-column", "film"]
    done = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    (work / "report.txt").write_text("$ greval " + " ".join(cmd[3:]) + "\n" + done.stdout, encoding="utf-8")
    print(done.stdout)
    if done.returncode:
        raise SystemExit(f"greval report exited with {done.returncode}")
    return out


def screenshots(index: Path, images: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    images.mkdir(parents=True, exist_ok=True)
    shots = {
        "report-overview.png": ("#overview", 820),
        "report-stats.png": ("#stats", 640),
        "report-groups.png": ("#group-graphrag_qa_score", 760),
    }
    saved = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.goto(index.as_uri())
        for name, (anchor, height) in shots.items():
            box = page.locator(anchor).bounding_box()
            if box is None:
                raise SystemExit(f"{anchor} not on the page")
            path = images / name
            page.screenshot(
                path=str(path), full_page=True, clip={"x": 0, "y": box["y"], "width": 1300, "height": height}
            )
            saved.append(_shrink(path))
        browser.close()
    return saved


def _shrink(path: Path, limit: int = 300_000) -> Path:
    """Re-encode a PNG with a reduced palette when it is over ``limit`` bytes."""
    if path.stat().st_size <= limit:
        return path
    from PIL import Image

    with Image.open(path) as im:
        small = im.convert("RGB").quantize(colors=128)
        buf = io.BytesIO()
        small.save(buf, format="PNG", optimize=True)
    path.write_bytes(buf.getvalue())
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workdir", type=Path)
    ap.add_argument("--images", type=Path, default=ROOT / "docs" / "images")
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    store = args.workdir / "report.sqlite"
    if store.exists():
        raise SystemExit(f"{store} exists: give a fresh directory")
    build_store(store)
    out = report(args.workdir)
    print("screenshots:", [str(p) for p in screenshots(out / "index.html", args.images)])


if __name__ == "__main__":
    main()

"""Benchmark the record explorer on a real-sized store: N records × 3 metrics judged by the local test server
(greval.testing.openai_server: real HTTP, no model), a tenth of them labelled by people, `greval report`
writing the explorer, then Chromium (playwright, /usr/bin/chromium) opening it from disk.

Figures (issue 32's targets, and issue 46's filter): open — navigation start to the first table drawn (≤ 2 s);
filter — choosing "disagree" in the agree filter to the table redrawn and the next frame (≤ 50 ms at 10,000
records; also the filter's own JavaScript time and the rows drawn); search —
a full-text search's first run (it loads every record chunk) and a second one; prompt — a record page's "Show the
prompt" to its messages shown; size — the explorer folder ÷ the
store's verdict text (the judged records' text plus every verdict's label, value and reason; ≤ 3).

    python scripts/bench_explorer.py                    # 10,000 records
    python scripts/bench_explorer.py --records 2000 --keep /tmp/explorer-bench
    python scripts/bench_explorer.py --keep /tmp/explorer-bench --reuse-report --baseline /tmp/base --rounds 5

``--baseline DIR`` pairs the page, script and style of another checkout (e.g. ``git worktree add /tmp/base
COMMIT``) on the same data files, round by round in alternating order, and prints the per-round ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner

from greval.cli import main
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

SPECS = ("answer_alignment", "graphrag_qa_correct", "rouge_l")
CHROMIUM = "/usr/bin/chromium"


def records(n: int) -> list[dict[str, Any]]:
    """N records of three systems, with a question, an expected answer, an answer and three chunks each."""
    out = []
    for i in range(n):
        topic = f"topic {i % 97} item {i}"
        out.append(
            {
                "id": f"rec-{i:05d}",
                "question": f"What does the source say about {topic}, and why does it matter here?",
                "expected_answer": f"The source says {topic} matters because of reason {i % 13}.",
                "answer": f"It says {topic} matters, reason {(i * 7) % 13}; see the second passage for details.",
                "chunks": [
                    f"Passage {k} on {topic}: a sentence or two of retrieved text, id {i}-{k}." for k in range(3)
                ],
                "system": ("bm25", "dense", "graph")[i % 3],
                "latency": round(0.5 + (i % 10) / 10, 2),
            }
        )
    return out


def build_store(work: Path, n: int) -> Path:
    """Judge the records (reused when the store is there) and label every tenth record's two judge metrics."""
    store = work / "bench.sqlite"
    if store.exists():
        return store
    data = work / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records(n)))
    with OpenAIServer() as llm:
        llm.configure(latency=0.0, json_schema=True, tools=True)
        os.environ["OPENAI_API_KEY"] = "sk-bench"
        args = ["run", str(data), "--store", str(store), "--judge", "openai:judge-test", "--base-url", llm.base_url]
        args += ["-c", "64", *[a for s in SPECS for a in ("-s", s)]]
        t = time.perf_counter()
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, res.output[-2000:]
        print(f"judged {n} records × {len(SPECS)} metrics in {time.perf_counter() - t:.0f} s")
    with Store(store) as st:
        rows = st.query(
            "SELECT spec_name, record_hash, record_id, label FROM verdicts WHERE status='ok' AND label IS NOT NULL"
        )
        labels: dict[str, list[str]] = {}
        for r in rows:
            labels.setdefault(r["spec_name"], []).append(r["label"])
        names = {spec: sorted(set(found)) for spec, found in labels.items()}
        st.put_human_labels(
            {
                "spec_name": r["spec_name"],
                "record_hash": r["record_hash"],
                "item_id": "",
                "annotator": "bench",
                "record_id": r["record_id"],
                "label": r["label"] if i % 3 else _other(names[r["spec_name"]], r["label"]),
                "comment": None,
                "status": "submitted",
                "source": "import",
            }
            for i, r in enumerate(rows)
            if int(r["record_id"][-5:]) % 10 == 0
        )
    return store


def _other(labels: list[str], label: str) -> str:
    """Another label than ``label`` (a person who disagrees with the judge)."""
    return labels[(labels.index(label) + 1) % len(labels)]


def verdict_text(store: Path) -> int:
    """Bytes of what the verdicts hold and judged: every judged record's data, every verdict's text."""
    with Store(store) as st:
        [v] = st.query(
            "SELECT SUM(LENGTH(COALESCE(label,'')) + LENGTH(COALESCE(CAST(value AS TEXT),'')) "
            "+ LENGTH(COALESCE(reason,''))) AS n FROM verdicts"
        )
        data = sum(len(json.dumps(r.data, ensure_ascii=False).encode()) for r in st.records())
    return int(v["n"] or 0) + data


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def measure_page(browser: Any, explorer: Path) -> dict[str, float]:
    """Open, filter, search and the prompt on a fresh page of one explorer folder."""
    out: dict[str, float] = {}
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto((explorer / "index.html").as_uri() + "#m=0")
    page.wait_for_selector("body[data-ready=list]")
    out["open"] = page.evaluate("performance.now()") / 1000
    took = page.evaluate(
        """() => new Promise((done) => {
            document.body.dataset.ready = '';
            const t0 = performance.now();
            const sel = document.querySelector('#f-agree');
            sel.value = 'disagree'; sel.dispatchEvent(new Event('change'));
            const wait = () => document.body.dataset.ready === 'list' && location.hash.includes('agree')
                ? requestAnimationFrame(() => done([performance.now() - t0, window.GREVAL_LAST.filter_ms,
                    document.querySelectorAll('#table tbody tr').length]))
                : setTimeout(wait, 1);
            wait();
        })"""
    )
    out["filter"], out["filter_js"], out["rows_drawn"] = took[0] / 1000, took[1] / 1000, took[2]
    for key, word in (("search_first", "passage 2"), ("search_again", "reason 7")):
        t0 = time.perf_counter()
        page.evaluate(f"document.body.dataset.ready = ''; location.hash = '#m=0&q={word.replace(' ', '%20')}'")
        page.wait_for_function("document.body.dataset.ready === 'list' && location.hash.includes('q=')")
        out[key] = time.perf_counter() - t0
    # a record page's "Show the prompt": its metric's static part and its records' chunk, loaded then
    page.evaluate("document.body.dataset.ready = ''; location.hash = '#m=0&record=4321'")
    page.wait_for_selector("body[data-ready=record]")
    t0 = time.perf_counter()
    page.click("#show-prompt")
    page.wait_for_selector("body[data-prompt=shown]")
    out["prompt"] = time.perf_counter() - t0
    page.close()
    return out


def measure(folders: dict[str, Path], rounds: int) -> dict[str, dict[str, list[float]]]:
    """Each version's figures on ``rounds`` fresh pages, the versions paired in each round (alternating order)."""
    from playwright.sync_api import sync_playwright

    got: dict[str, dict[str, list[float]]] = {v: {} for v in folders}
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        order = list(folders)
        for r in range(rounds):
            for v in order if r % 2 == 0 else order[::-1]:
                load = os.getloadavg()[0]
                one = measure_page(browser, folders[v])
                for k, x in one.items():
                    got[v].setdefault(k, []).append(x)
                print(
                    f"  round {r + 1} {v:<8} open {one['open'] * 1000:5.0f} ms  filter {one['filter'] * 1000:5.0f} ms "
                    f"(JavaScript {one['filter_js'] * 1000:4.0f} ms, {one['rows_drawn']:.0f} rows drawn)  "
                    f"(load {load:.2f})",
                    flush=True,
                )
        browser.close()
    return got


def baseline_folder(explorer: Path, checkout: Path) -> Path:
    """A copy of the explorer folder with another checkout's page, script and style (the same data files)."""
    other = explorer.with_name("explorer-baseline")
    shutil.rmtree(other, ignore_errors=True)
    shutil.copytree(explorer, other)
    for name in ("index.html", "app.js", "app.css"):
        shutil.copyfile(checkout / "greval" / "report" / "explorer" / "static" / name, other / name)
    return other


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", type=Path, help="Work folder to keep (and reuse its store); default: a temp dir.")
    ap.add_argument("--baseline", type=Path, help="A checkout whose explorer page to pair against (same data).")
    ap.add_argument("--reuse-report", action="store_true", help="With --keep: reuse its report, only the page anew.")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="greval-bench-explorer-"))
    work.mkdir(parents=True, exist_ok=True)
    store = build_store(work, a.records)
    out = work / "report"
    if a.reuse_report and (out / "explorer" / "data" / "meta.js").exists():
        from greval.report.explorer.write import copy_static

        copy_static(out / "explorer")
        print("greval report: reused (the explorer's page, script and style written anew)")
    else:
        shutil.rmtree(out, ignore_errors=True)
        t = time.perf_counter()
        res = CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(out), "--bootstrap", "200"])
        assert res.exit_code == 0, res.output[-2000:]
        print(f"greval report (with the explorer) in {time.perf_counter() - t:.1f} s")
    size, text = folder_bytes(out / "explorer"), verdict_text(store)
    folders = {"this": out / "explorer"}
    if a.baseline:
        folders["baseline"] = baseline_folder(out / "explorer", a.baseline.resolve())
    print(f"{a.records} records × {len(SPECS)} metrics ({', '.join(SPECS)}), {a.rounds} paired rounds")
    times = measure(folders, a.rounds)
    for v, got in times.items():
        med = {k: statistics.median(x) for k, x in got.items()}
        print(f"{v}, median of {a.rounds} pages:")
        print(f"  open            {med['open'] * 1000:7.0f} ms   (target ≤ 2000)")
        print(
            f"  filter          {med['filter'] * 1000:7.0f} ms   (target ≤ 50; its JavaScript "
            f"{med['filter_js'] * 1000:.0f} ms; {med['rows_drawn']:.0f} rows drawn)"
        )
        print(f"  search (first)  {med['search_first'] * 1000:7.0f} ms   (loads every record chunk)")
        print(f"  search (again)  {med['search_again'] * 1000:7.0f} ms")
        print(f"  show the prompt {med['prompt'] * 1000:7.0f} ms   (a record page's button to its messages shown)")
    if "baseline" in times:
        for k in ("open", "filter", "filter_js", "search_first", "search_again", "prompt"):
            ratios = [x / y for x, y in zip(times["this"][k], times["baseline"][k], strict=True)]
            shown = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"  this ÷ baseline {k:<13} median {statistics.median(ratios):.2f} ({shown})")
    print(
        f"  explorer folder {size / 1e6:7.1f} MB = {size / text:.2f} × the store's verdict text "
        f"({text / 1e6:.1f} MB; target ≤ 3)"
    )
    prompts = sum(p.stat().st_size for p in (out / "explorer" / "data").glob("[pq]*.js"))
    print(f"    of which the prompts' files {prompts / 1e6:.1f} MB ({prompts / text:.2f} × the verdict text)")
    print(f"  load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main_()

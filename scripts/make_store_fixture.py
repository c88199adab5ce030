"""Write tests/fixtures/store_v2.sqlite.gz: a small store as greval wrote it at schema 2, for the migration test.

tests/test_store.py opens a copy of it with today's code and checks that nothing is lost. The committed file
was made at commit 00b4658 (schema 2, before the ``error_kind`` column), with the local test server:

    PYTHONPATH=$PWD python scripts/make_store_fixture.py

It holds, on records r0..r7 (r6 has no expected answer, so metrics that need one skip it):

- a **finished** run of answer_alignment (record level) and chunk_evaluation (per chunk) on r0..r6, with
  stored errors: a context_length refusal on r3 (both metrics), a truncated answer on r5 (answer_alignment),
  a chunk the judge leaves out on r4 (chunk_evaluation: an ``incomplete`` item, the record partly judged);
- an **interrupted** run of answer_completeness on r0..r7 (``greval run`` stopped by SIGINT part-way); it
  depends on chunk_evaluation (reused on r0..r6, r7 not judged) and triple_evaluation (skipped: no triples);
- human labels of answer_alignment for r0..r2 (imported);
- ``store_v2.figures.json``: the figures that code reported for the store and for each run, and its rows.

The file is gzipped (SQLite pages are mostly empty: ~85 KB raw, ~11 KB gzipped); the test unpacks a copy.
Re-running this script with a newer greval writes that greval's schema, not schema 2.

``--name store_v4`` writes the same store as another greval wrote it, e.g. tests/fixtures/store_v4.sqlite.gz (schema
4: each answer in ``raw`` and in ``calls``), made with the greval of commit e6173c6 (``git archive e6173c6``
unpacked in DIR, then ``PYTHONPATH=DIR python scripts/make_store_fixture.py --name store_v4``); its figures file
holds that greval's item rows too (``items``), what tests/test_store_scale.py reads back after the migration.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.results import figures, item_rows
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
KEY = "sk-fixture"


def rows() -> list[dict[str, object]]:
    """The 8 records judged (r6 has no expected answer), kept beside the fixture so the test reads the same."""
    lines = (OUT / "store_v2.records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _verdicts(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", default="store_v2", help="the fixture's file names (NAME.sqlite.gz, NAME.figures.json)")
    name = ap.parse_args().name
    OUT.mkdir(parents=True, exist_ok=True)
    data = rows()
    records = [Record.from_mapping(r) for r in data]
    tmp = Path(tempfile.mkdtemp())
    path = tmp / "store.sqlite"
    os.environ["OPENAI_API_KEY"] = KEY
    with OpenAIServer() as llm:
        llm.configure(latency=0.0, json_schema=True, tools=True)
        context = {
            "error": {
                "message": "maximum context length is 8192 tokens",
                "type": "invalid_request_error",
                "code": "context_length_exceeded",
            }
        }
        llm.script(
            [
                {"match": "Question number 3", "action": {"type": "fault", "status": 400, "body": context}},
                {"match": "chunk 4.1", "action": {"type": "drop_ids", "ids": ["c2"]}},
                {"match": "Answer 5.", "regex": False, "action": {"type": "length"}},
            ]
        )
        cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
        opts = RunOptions(concurrency=4, retry=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.05))
        with Store(path) as st:
            run(resolve_specs(["answer_alignment", "chunk_evaluation"]), records[:7], st, cfg, options=opts)
            st.put_human_labels(
                {
                    "spec_name": "answer_alignment",
                    "record_id": r.id,
                    "record_hash": r.hash,
                    "annotator": "ann",
                    "label": lab,
                    "source": "import",
                }
                for r, lab in zip(records[:3], ["Correct", "Incorrect", "Correct"], strict=True)
            )
        # The interrupted run: a real `greval run`, stopped by SIGINT after a few verdicts.
        llm.reset()
        llm.configure(latency=0.4, json_schema=True, tools=True)
        jsonl = tmp / "data.jsonl"
        jsonl.write_text("".join(json.dumps(r) + "\n" for r in data))
        cmd = [sys.executable, "-m", "greval", "run", str(jsonl), "-s", "answer_completeness", "--store", str(path)]
        cmd += ["--judge", "openai:judge-test", "--base-url", llm.base_url, "-c", "1", "--quiet"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        before = _verdicts(path)
        while _verdicts(path) < before + 3:
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
    with Store(path) as st:
        runs = st.runs()
        assert [r["status"] for r in runs] == ["finished", "interrupted"], runs
        report = {
            "rows": len(item_rows(st)),
            "figures": [f.model_dump(mode="json") for f in figures(st)],
            "runs": {r["run_id"]: [f.model_dump(mode="json") for f in figures(st, run_id=r["run_id"])] for r in runs},
        }
        if name != "store_v2":  # the committed schema-2 file has no item rows
            report["items"] = item_rows(st)
    db = sqlite3.connect(path, timeout=30)
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA page_size=1024")
    db.execute("VACUUM")
    db.close()
    with gzip.GzipFile(OUT / f"{name}.sqlite.gz", "wb", compresslevel=9, mtime=0) as gz:
        gz.write(path.read_bytes())
    (OUT / f"{name}.figures.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT / f'{name}.sqlite.gz'} ({path.stat().st_size} bytes unpacked)")


if __name__ == "__main__":
    main()

"""``greval align`` on a scripted judge, end to end, for docs/align.md (run by hand, not by CI).

In a fresh work directory: start greval's local OpenAI-compatible test server with the rules of
tests/align/scripted.py (a judge that is right whenever its steps name RULE-ZETA, which only the optimizer's
rewrite proposes, and at chance otherwise), write 40 records, a spec and people's labels, then run the commands a
team would: ``greval run``, ``greval annotate import-labels``, ``greval align --dry-run``, ``greval align``, the
same ``greval align`` again (no call), and ``greval agreement`` on both versions. Every command's exact output
goes to ``NN-name.txt`` in the work directory (first line: the command).

    python scripts/align_walkthrough.py /tmp/align-walkthrough

Run it from a checkout; the greval it runs is the one this file belongs to.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from greval.align.output import spec_yaml  # noqa: E402
from greval.testing.openai_server import OpenAIServer  # noqa: E402
from tests.align import scripted as sc  # noqa: E402

N = 40


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir", type=Path)
    args = ap.parse_args()
    work: Path = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    if (work / "greval.sqlite").exists():
        sys.exit(f"{work} already holds a store: give a fresh directory")
    with open(work / "records.jsonl", "w", encoding="utf-8") as fh:
        for r in sc.records(N):
            fh.write(json.dumps({"id": r.id, **r.data}) + "\n")
    (work / "supported.yaml").write_text(spec_yaml(sc.spec()), encoding="utf-8")
    with open(work / "labels.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["record_id", "label", "annotator"])
        w.writerows([f"r{i}", sc.truth(i), "reviewer"] for i in range(N))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-walkthrough", "COLUMNS": "110"}
    with OpenAIServer() as server:
        server.script(sc.rules(N))
        judge = ["--judge", "openai:scripted-judge", "--base-url", server.base_url]
        store = ["--store", "greval.sqlite"]
        steps: list[tuple[str, list[str]]] = [
            ("run", ["run", "records.jsonl", "-s", "supported.yaml", *store, *judge, "--quiet"]),
            (
                "import",
                [
                    "annotate",
                    "import-labels",
                    "labels.csv",
                    *store,
                    "--spec",
                    "supported",
                    "--record-id",
                    "record_id",
                    "--label",
                    "label",
                    "--annotator",
                    "annotator",
                ],
            ),
            ("dry-run", ["align", *store, "--spec", "supported", *judge, "--dry-run"]),
            ("align", ["align", *store, "--spec", "supported", *judge, "--quiet"]),
            ("again", ["align", *store, "--spec", "supported", *judge, "--quiet"]),
        ]
        for n, (name, cmd) in enumerate(steps, 1):
            before = server.stats()["total"]
            _run(work, f"{n:02d}-{name}.txt", cmd, env, server.base_url)
            print(f"{name}: {server.stats()['total'] - before} model call(s)")
        evidence = json.loads((work / "supported.aligned.evidence.json").read_text())
        old, new = evidence["old_hash"], evidence["new_hash"]
        _run(
            work,
            "06-agreement.txt",
            [
                "agreement",
                "--store",
                "greval.sqlite",
                "--spec",
                f"supported@{old}",
                "--spec",
                f"supported@{new}",
                "--invalid",
                "drop",
            ],
            env,
            server.base_url,
        )


def _run(work: Path, name: str, args: list[str], env: dict[str, str], url: str) -> None:
    cmd = [sys.executable, "-m", "greval", *args]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    shown = "greval " + " ".join(shlex.quote(a) for a in args).replace(url, "http://127.0.0.1:PORT/v1")
    text = f"$ {shown}\n{done.stderr}{done.stdout}".replace(url, "http://127.0.0.1:PORT/v1")
    (work / name).write_text(text + f"(exit {done.returncode})\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()

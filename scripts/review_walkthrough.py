"""The review loop on the bundled example, end to end, for docs/review.md (run by hand, not by CI).

In a fresh work directory: copy examples/begin, judge its 30 records with the embedded local judge (llama.cpp, no
network; one call per record with ``--logprobs``, so each verdict has a token confidence: the probability of its
label among the labels the answer's first token could start), start an embedded Argilla of its own (free port,
data directory inside the work directory), then run the review in rounds: ``greval review`` pushes a batch, a
scripted annotator submits the example's human labels (examples/begin/human_labels.csv) for the pushed records
through Argilla's REST API, and ``greval review status`` pulls and prints the figures. Round 2 is labelled in two
halves, so one status shows the correction for selected items not yet labelled. At the end: ``greval agreement
--store`` and ``greval gate``. Every command's exact output goes to ``NN-name.txt`` in the work directory (first
line: the command), and ``timing.txt`` says how long each step took.

With Chromium (/usr/bin/chromium) and playwright installed, it also signs in to the Argilla web UI and saves
screenshots to docs/images/review-*.png: the dataset list with its progress, and the review dataset's
annotation page (a pending record with the judge's suggestion, and its metadata).

    python scripts/review_walkthrough.py /tmp/review-walkthrough [--batch 10] [--rounds 3] [--no-shots]

Run it from a checkout; the greval it runs is the one this file belongs to. Give it a fresh directory: it
refuses one whose store already holds a review (the review would continue where it was).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from greval.annotation import server  # noqa: E402

EXAMPLE = ROOT / "examples" / "begin"
SPEC = "attribution"
DATASET = f"{SPEC}-review"
ANNOTATOR = "begin-annotator"
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
TARGET = "kappa±0.1"


class Walk:
    """The work directory, the numbered output files, and the time each step took."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.step = 0
        self.times: list[tuple[str, float]] = []
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
            "COLUMNS": "110",  # rich wraps tables at this width when not on a terminal
            "NO_COLOR": "1",
            "TERM": "dumb",
        }

    def greval(self, name: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        """Run ``greval ARGS`` in the work directory; save ``$ greval ARGS`` and its output to NN-name.txt."""
        self.step += 1
        shown = "greval " + " ".join(_quote(a) for a in args)
        print(f"[{self.step:02d}] $ {shown}", flush=True)
        cmd = [sys.executable, "-c", "from greval.cli import main; main(prog_name='greval')", *args]
        t0 = time.perf_counter()
        done = subprocess.run(
            cmd, cwd=self.work, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        took = time.perf_counter() - t0
        self.times.append((f"{self.step:02d}-{name}", took))
        text = f"$ {shown}\n{done.stdout}"
        if done.returncode:
            text += f"(exit code {done.returncode})\n"
        (self.work / f"{self.step:02d}-{name}.txt").write_text(text, encoding="utf-8")
        print(done.stdout, flush=True)
        if done.returncode not in ok:
            raise SystemExit(f"{shown} exited with {done.returncode}")
        return done.stdout

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        yield
        self.times.append((name, time.perf_counter() - t0))


def _quote(arg: str) -> str:
    return f'"{arg}"' if any(c in arg for c in " ±*[]<>") else arg


class People:
    """The example's human labels, submitted as one annotator through Argilla's REST API."""

    def __init__(self, info: server.ServerInfo, labels: dict[str, str]) -> None:
        self.info = info
        self.labels = labels
        self.owner = httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": info.api_key}, timeout=60)
        self.key = self._annotator()
        self.me = httpx.Client(base_url=info.url, headers={"X-Argilla-Api-Key": self.key}, timeout=60)

    def _annotator(self) -> str:
        import argilla as rg

        client = rg.Argilla(api_url=self.info.url, api_key=self.info.api_key)
        with warnings.catch_warnings():  # "User ... not found" on a fresh server: it is created below
            warnings.simplefilter("ignore", UserWarning)
            user = client.users(ANNOTATOR)
        if user is None:
            user = rg.User(username=ANNOTATOR, password="begin-annotator-1", role="annotator", client=client)
            user = user.create()
            client.workspaces(self.info.workspace).add_user(user)
        return str(self.owner.get(f"/api/v1/users/{user.id}").json()["api_key"])

    def open_records(self) -> list[tuple[str, str]]:
        """(greval record id, Argilla record uuid) of the review's records this annotator has not answered,
        in the order the records were pushed."""
        import argilla as rg

        client = rg.Argilla(api_url=self.info.url, api_key=self.info.api_key)
        dataset = client.datasets(DATASET, workspace=self.info.workspace)
        if dataset is None:
            raise SystemExit(f"no dataset {DATASET!r} in Argilla")
        me = self.me.get("/api/v1/me").json()["id"]
        out = []
        for rec in dataset.records(with_responses=True):
            if any(str(r.user_id) == str(me) for r in rec.responses):
                continue
            rid = dict(rec.metadata)["record_id"]
            out.append((rid[0] if isinstance(rid, list) else str(rid), str(rec._server_id)))
        return out

    def label(self, records: list[tuple[str, str]]) -> int:
        for rid, uuid in records:
            body = {"status": "submitted", "values": {"verdict": {"value": self.labels[rid]}}}
            resp = self.me.post(f"/api/v1/records/{uuid}/responses", json=body)
            if resp.status_code != 201:
                raise SystemExit(f"answering {rid}: HTTP {resp.status_code} {resp.text}")
        return len(records)


def screenshots(info: server.ServerInfo, out_dir: Path, which: str, dataset: str = DATASET) -> list[Path]:
    """``which='record'``: the review dataset's annotation page on the first pending *control* record (the
    judge's suggestion pre-selected), then the same record with its metadata open (selection, inclusion
    probability, judge's confidence); ``which='list'``: the home page's dataset card with its progress."""
    from playwright.sync_api import sync_playwright

    out_dir.mkdir(parents=True, exist_ok=True)
    saved: list[Path] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{info.url}/sign-in")
            page.fill("input[name=Username]", info.username)
            page.fill("input[name=Password]", info.password)
            page.click("button[type=submit]")
            page.wait_for_url(lambda url: "sign-in" not in url, timeout=30_000)
            page.get_by_text(dataset, exact=True).first.wait_for(timeout=30_000)
            page.wait_for_timeout(2500)  # the progress figures load after the list
            if which == "list":
                path = out_dir / "review-datasets.png"
                page.screenshot(path=str(path), clip={"x": 0, "y": 0, "width": 780, "height": 460})
                saved.append(path)
                return saved
            page.get_by_text(dataset, exact=True).first.click()
            page.wait_for_url("**/annotation-mode**", timeout=30_000)
            menu = page.locator("[aria-label='Expand Record Dropdown for Extra Information']").first
            for _ in range(20):  # to the first control record: its inclusion probability is below 1
                page.locator("label[for^='verdict_']").first.wait_for(timeout=30_000)
                page.wait_for_timeout(1000)
                menu.click()
                page.get_by_role("button", name="View metadata", exact=True).click()
                page.get_by_text("inclusion_probability", exact=True).first.wait_for(timeout=10_000)
                if page.get_by_text("control:", exact=False).count():
                    break
                page.keyboard.press("Escape")
                page.mouse.click(400, 120)
                page.wait_for_timeout(300)
                page.locator("[aria-label='Next (→)']").first.click()
            page.get_by_text("judge_confidence", exact=True).first.scroll_into_view_if_needed()
            page.wait_for_timeout(500)
            meta = out_dir / "review-metadata.png"
            page.screenshot(path=str(meta))
            page.keyboard.press("Escape")
            page.mouse.click(400, 120)
            page.wait_for_timeout(800)
            path = out_dir / "review-record.png"
            page.screenshot(path=str(path))
            saved += [path, meta]
        finally:
            browser.close()
    return [_shrink(s) for s in saved]


def _shrink(path: Path, limit: int = 300_000) -> Path:
    """Re-encode a PNG with a reduced palette when it is over ``limit`` bytes (screenshots are flat colours)."""
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
    ap.add_argument("--batch", type=int, default=10, help="new items per round [10 of the example's 30]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-shots", action="store_true", help="skip the Chromium screenshots")
    ap.add_argument("--images", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    ap.add_argument("--keep-server", action="store_true", help="leave the embedded Argilla running at the end")
    args = ap.parse_args()
    shots = not args.no_shots and Path(CHROMIUM).exists()
    t_all = time.perf_counter()

    work = args.workdir.expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    for name in ("records.jsonl", "attribution.yaml", "human_labels.csv"):
        shutil.copy(EXAMPLE / name, work / name)
    with (work / "human_labels.csv").open(encoding="utf-8", newline="") as fh:
        labels = {row["record_id"]: row["label"] for row in csv.DictReader(fh)}
    walk = Walk(work)
    data = work / "argilla"
    if (work / "greval.sqlite").exists():
        from greval.flows.review import STRATEGY
        from greval.store.store import Store

        with Store(work / "greval.sqlite") as st:
            if st.latest_push_to(SPEC, DATASET, STRATEGY) is not None:
                raise SystemExit(
                    f"{work}: its store already holds a review of {SPEC!r}; use a fresh directory (copying only "
                    "greval.sqlite from an earlier run reuses its verdicts, but not once it holds a review)"
                )

    walk.greval(
        "run",
        "run",
        "records.jsonl",
        "-s",
        "attribution.yaml",
        "--judge",
        "local",
        "--logprobs",
        "--store",
        "greval.sqlite",
        "--quiet",
    )
    port = server.free_port()
    walk.greval("annotate-up", "annotate", "up", "--port", str(port), "--data-dir", "argilla")
    try:
        st = server.status(data)
        assert st.url is not None, st
        creds = server.read_credentials(data)
        info = server.ServerInfo(
            url=st.url,
            username=creds["username"],
            password=creds["password"],
            api_key=creds["api_key"],
            pid=st.pid or 0,
            data_dir=data,
            workspace=creds.get("workspace", "argilla"),
        )
        people = People(info, labels)
        store = ("--store", "greval.sqlite", "--spec", SPEC)
        status = ("review", "status", *store, "--target", TARGET, "--data-dir", "argilla")
        gate = ("--min", "kappa>=0.2", "--ci", "lower")
        for r in range(1, args.rounds + 1):
            walk.greval(f"review-round{r}", "review", *store, "--batch", str(args.batch), "--data-dir", "argilla")
            todo = people.open_records()
            if r == 2 and shots:
                with walk.timed("screenshot-record"):
                    print("screenshots:", screenshots(info, args.images, "record"))
            if r == 2 and len(todo) > 1:
                half = len(todo) * 6 // 10
                with walk.timed(f"label-round{r}a"):
                    print(f"labelled {people.label(todo[:half])} of {len(todo)} new records")
                walk.greval(f"status-round{r}a", *status)
                if shots:
                    with walk.timed("screenshot-list"):
                        print("screenshots:", screenshots(info, args.images, "list"))
                todo = todo[half:]
            with walk.timed(f"label-round{r}"):
                print(f"labelled {people.label(todo)} records")
            walk.greval(f"status-round{r}", *status)
            if r == 2:  # where the design-weighted table lives, and the gate, on a non-census sample
                walk.greval("agreement-round2", "agreement", *store, "--dataset", DATASET)
                walk.greval("gate-round2", "gate", *store, "--dataset", DATASET, *gate, ok=(0, 1))
        walk.greval("gate", "gate", *store, "--dataset", DATASET, *gate, ok=(0, 1))
        walk.greval("status-no-pull", "review", "status", *store, "--no-pull", "--target", "accuracy±0.15")
    finally:
        if not args.keep_server:
            walk.greval("annotate-down", "annotate", "down", "--data-dir", "argilla", ok=(0, 1, 2))
    total = time.perf_counter() - t_all
    lines = [f"{name:24s} {secs:7.1f} s" for name, secs in walk.times] + [f"{'total':24s} {total:7.1f} s"]
    (work / "timing.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

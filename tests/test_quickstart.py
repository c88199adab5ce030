"""Stage 6 — the quick start, end to end, as a new user runs it: no API key, the embedded local judge
(real llama-server), the embedded Argilla, the bundled example, the report. Then again: nothing redone.
And the same loop without Argilla, with a judge of one's own (the test server). Then the first hour of a
newcomer: records left to label in Argilla, every printed command run as printed, the report saying where its
labels came from, and the Argilla environment's setup output kept in a log."""

from __future__ import annotations

import contextlib
import html
import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from greval.annotation import server
from greval.cli import main
from greval.llm.local import find_engine
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_JUDGE", "ARGILLA_"))}
    env["COLUMNS"] = "160"
    return env


@pytest.mark.slow
@pytest.mark.llama
@pytest.mark.argilla
def test_quickstart_twice(tmp_path: Path, clean_env: dict[str, str]) -> None:
    if find_engine() is None and not os.environ.get("GREVAL_BUILD_LLAMA"):
        pytest.skip("no local judge engine: the xllamacpp wheel (scripts/setup.sh) or `greval local-judge build`")
    work, data = tmp_path / "ws", tmp_path / "argilla"
    port = server.free_port()
    cmd = [
        sys.executable,
        "-m",
        "greval",
        "quickstart",
        "--dir",
        str(work),
        "--port",
        str(port),
        "--argilla-data",
        str(data),
        "--bootstrap",
        "200",
    ]
    try:
        first = subprocess.run(cmd, env=clean_env, capture_output=True, text=True, timeout=1500)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
        both = first.stdout + first.stderr
        assert "no judge configured" in both and "NOT a judge to trust" in both
        assert "Warning:" not in both  # numpy's "Mean of empty slice" was printed here twice (CI, 2026-11-29)
        assert "30 judgement(s) to make" in both
        assert "starting the embedded local judge" in both
        assert "(created)" in both
        assert re.search(
            r"Argilla\s+http://127\.0\.0\.1:\d+\s+login: \S+, password: shown by\n\s+\S+ annotate credentials",
            first.stdout,
        )
        report = work / "report" / "attribution.agreement.html"
        assert report.exists() and "<img" in report.read_text()
        db = sqlite3.connect(work / "greval.sqlite")
        assert db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 30
        assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 20  # 10 left to the user
        calls = db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0]
        db.close()

        second = subprocess.run(cmd, env=clean_env, capture_output=True, text=True, timeout=600)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
        both = second.stdout + second.stderr
        assert "0 judgement(s) to make" in both
        assert "starting the embedded local judge" not in both  # no judge server, no call
        assert "(updated)" in both and "(created)" not in both  # the same Argilla dataset
        db = sqlite3.connect(work / "greval.sqlite")
        assert db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0] == calls
        assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 20
    finally:
        server.stop(data)


def test_quickstart_without_argilla_with_an_openai_compatible_judge(llm: OpenAIServer, tmp_path: Path) -> None:
    """--no-argilla: judged, human labels imported into the store only, report written; no server started."""
    work = tmp_path / "ws"
    args = ["quickstart", "--dir", str(work), "--no-argilla", "--bootstrap", "50"]
    args += ["--judge", "openai:judge-test", "--base-url", llm.base_url]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "30 judgement(s) to make" in result.output
    assert "Argilla skipped (--no-argilla)" in result.output
    assert "30 stored from human_labels.csv" in result.output and "Argilla responses" not in result.output
    assert "login:" not in result.output  # no Argilla line in the closing lines
    assert TEST_KEY not in result.output
    assert llm.stats()["total"] >= 30
    assert "<img" in (work / "report" / "attribution.agreement.html").read_text()
    assert "30 human labels — 30 imported from a file" in (work / "report" / "index.html").read_text()
    db = sqlite3.connect(work / "greval.sqlite")
    assert db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0] == 30
    assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 30
    db.close()


# ------------------------------------------------------------------------ the first hour (issue "The first hour")
ROOT = Path(__file__).resolve().parents[1]


def _commands(text: str) -> list[list[str]]:
    """The commands a run printed: every indented line whose first word is the greval command — ``greval``, or its
    full path when this environment's bin/ is not on PATH (a ./.venv made by scripts/quickstart.sh), or
    ``python -m greval`` — with the lines it continues onto (a trailing backslash, as a shell reads them)."""
    out = []
    lines = iter(text.splitlines())
    for line in lines:
        words = line.split()
        if not line.startswith(" ") or not words:
            continue  # commands are indented; prose is not
        if not (words[0] in ("greval", *_greval_cmd()) or words[0].endswith("/greval")):
            continue
        while line.endswith("\\"):
            line = line[:-1] + next(lines, "")
        out.append(shlex.split(line.strip()))
    return out


def _greval_cmd() -> list[str]:
    """greval as the test command installed it: this interpreter's own bin/greval (scripts/test.sh run outside
    an activated venv puts ./.venv's bin/ on no PATH), else ``python -m greval``. Never a ``greval`` found on
    PATH, which may be another installation."""
    mine = Path(sys.executable).parent / "greval"
    return [str(mine)] if mine.is_file() else [sys.executable, "-m", "greval"]


def _greval(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run a printed command exactly as printed (its first word found the way a shell would), its output
    piped and no terminal on stdin either (whose width rich would take)."""
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def _piped_env() -> dict[str, str]:
    """The environment of a user's shell: no judge or Argilla settings, and no COLUMNS (a pipe: 80 columns)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "GREVAL_JUDGE", "ARGILLA_")) and k not in ("COLUMNS", "LINES")
    }
    env["OPENAI_API_KEY"] = TEST_KEY
    return env


def _argilla(data: Path) -> httpx.Client:
    st = server.status(data)
    assert st.running and st.url
    key = server.read_credentials(data)["api_key"]
    return httpx.Client(base_url=st.url, headers={"X-Argilla-Api-Key": key}, timeout=30)


def _argilla_records(http: httpx.Client, name: str) -> list[dict[str, Any]]:
    found = [d for d in http.get("/api/v1/me/datasets").json()["items"] if d["name"] == name]
    assert len(found) == 1, found
    resp = http.get(
        f"/api/v1/datasets/{found[0]['id']}/records",
        params=[("include", "responses"), ("include", "suggestions"), ("limit", "1000")],
    )
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["items"]
    return items


def _write_rag_file(path: Path) -> None:
    """A typical RAG output: question, answer and the retrieved chunks (plain texts), nothing else."""
    rows = [
        {
            "question": f"What is the capital of country {i}?",
            "answer": f"The capital of country {i} is city {i}.",
            "chunks": [f"Country {i} has city {i} as its capital.", f"City {i} lies on a river."],
        }
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


#: The one record of the example whose answer the test server cuts off (finish_reason "length") on its first
#: three tries — every try of the first run: its verdict is an error (truncated), never pushed, until the printed
#: command judges it again.
CUT_OFF = {"match": "never had a diary or a blog", "times": 3, "action": {"type": "length"}}


def _flat(text: str) -> str:
    """Text with its line breaks and runs of spaces as single spaces (what wraps at 80 columns reads as one)."""
    return " ".join(text.split())


def _fits(text: str, width: int = 80) -> list[str]:
    """The lines of ``text`` wider than ``width`` (none, unless one word is wider by itself)."""
    return [line for line in text.splitlines() if len(line) > width and " " in line.removesuffix(" \\").strip()]


def _cell_words(text: str) -> list[str]:
    """Every word inside a table cell (the lines drawn with rich's box characters)."""
    cells = [line for line in text.splitlines() if any(c in line for c in "│┃")]
    return [w for line in cells for w in re.split(r"[│┃\s]+", line) if w]


@pytest.mark.slow
@pytest.mark.argilla
def test_quickstart_leaves_records_to_label_and_every_printed_command_works(
    openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """The loop a newcomer sees, piped (80 columns): 20 records labelled by the BEGIN annotators, the others
    with the judge's suggestion waiting for them — one count wherever it is printed, a verdict that is an error
    said and not pushed; no line wider than 80 columns and no word broken in a table; every command printed
    (next steps and hints: the retry of the failed record too) runs as printed from another directory; the
    report says where its labels came from; a second run keeps the user's answers."""
    openai_server.reset()
    openai_server.configure(latency=0.0, json_schema=True, tools=True)
    openai_server.script([CUT_OFF])
    data, here, own = tmp_path / "argilla", tmp_path / "here", tmp_path / "own"
    here.mkdir()
    own.mkdir()
    env = _piped_env()
    cmd = [*_greval_cmd(), "quickstart", "--dir", "ws", "--port", str(server.free_port()), "--argilla-data", str(data)]
    cmd += ["--bootstrap", "50", "--judge", "openai:judge-test", "--base-url", openai_server.base_url]
    store = (here / "ws" / "greval.sqlite").resolve()
    try:
        first = _greval(cmd, here, env, timeout=900)
        both = first.stdout + first.stderr
        assert first.returncode == 0, both[-4000:]
        assert "Traceback" not in both and "Warning:" not in both  # numpy's warnings reached it once
        assert "(created)" in both
        db = sqlite3.connect(store)
        assert db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0] == 29
        assert db.execute("SELECT error_kind FROM verdicts WHERE status='error'").fetchall() == [("truncated",)]
        assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 20
        db.close()

        # 80 columns: every line fits, every word in a table is whole (rich folded "attributi|on" before).
        assert _fits(first.stdout) == [] and _fits(first.stderr) == [], _fits(both)
        words = _cell_words(first.stdout)
        assert "attribution" in words and "Fully" in words and "attributable" in words, words
        assert not [w for w in words if w != "attribution" and "attribution".startswith(w) and len(w) > 3]

        # Argilla: 20 records answered by the BEGIN annotators, 9 open with the judge's suggestion, the cut-off
        # one not there — and every count printed says so.
        http = _argilla(data)
        records = _argilla_records(http, "attribution")
        assert len(records) == 29
        open_records = [r for r in records if not r.get("responses")]
        assert len(open_records) == 9
        assert all(r.get("suggestions") for r in open_records)
        flat_out, flat_err = _flat(first.stdout), _flat(first.stderr)
        assert "'attribution' in workspace 'argilla': 20 of 29 records labelled, 9 wait for your label" in flat_out
        assert "human labels: 20 stored from human_labels.csv" in flat_err
        assert "20 of 29 records labelled, 9 wait for your label" in flat_err
        assert "1 record not pushed: its verdict is an error (truncated)" in flat_err
        assert "10 records are left" not in flat_err
        creds = server.read_credentials(data)
        url = server.status(data).url
        assert url and url in first.stdout
        assert creds["username"] in first.stdout
        # no secret printed unasked: the closing names the command that shows the password, which does
        assert creds["password"] not in both and creds["api_key"] not in both
        assert "password: shown by" in first.stdout
        assert "'attribution'" in first.stdout
        assert "╭" not in first.stdout  # plain lines, no panel that cuts paths at 80 columns

        commands = _commands(first.stderr + first.stdout)  # the hints (stderr) are printed before the closing
        mine = [c for c in commands if str(store) in c]
        pull = [c for c in mine if c[1:3] == ["annotate", "pull"]]
        report = [c for c in mine if c[1] == "report"]
        retry = [c for c in commands if c[1] == "quickstart"]
        assert len(pull) == 1 and len(report) == 1, first.stdout
        assert retry and retry[0][-1] == "--retry-errors", first.stderr  # the hint is a command, not "greval run …"
        assert pull[0][pull[0].index("--spec") + 1] == "attribution"
        assert Path(report[0][report[0].index("-o") + 1]).is_absolute()
        assert any(c[1] == "run" for c in commands) and any(c[1:3] == ["annotate", "push"] for c in commands)
        [shows] = [c for c in commands if c[1:3] == ["annotate", "credentials"]]
        asked = _greval(shows, own, env)
        assert asked.returncode == 0 and creds["password"] in asked.stdout and creds["api_key"] in asked.stdout

        # The user labels three of the open records in Argilla.
        me = http.get("/api/v1/me").json()
        for rec in open_records[:3]:
            values = {"verdict": {"value": "Fully attributable"}}
            resp = http.post(f"/api/v1/records/{rec['id']}/responses", json={"status": "submitted", "values": values})
            assert resp.status_code in (200, 201), resp.text

        # Every printed command, in the order printed, from another directory, with a typical RAG file there.
        _write_rag_file(own / "my_data.jsonl")
        outputs = {}
        for c in commands:
            if shlex.join(c) in outputs:
                continue  # a hint printed twice is run once
            res = _greval(c, own, env)
            assert res.returncode == 0, (c, res.stdout[-2000:], res.stderr[-2000:])
            assert "Traceback" not in res.stdout + res.stderr
            outputs[shlex.join(c)] = res.stdout + res.stderr
        again = _flat(outputs[shlex.join(retry[0])])  # the failed record judged again, pushed, counted
        assert "1 judgement(s) to make" in again and "30 verdicts pushed" in again
        assert "3 answer(s) of yours fetched from Argilla" in again
        assert "23 of 30 records labelled, 7 wait for your label" in again
        said = _flat(outputs[shlex.join(report[0])])
        assert "23 human labels" in said and "from Argilla dataset 'attribution'" in said
        report_dir = Path(report[0][report[0].index("-o") + 1])
        md = (report_dir / "report.md").read_text()
        assert "23 human labels" in md and "from Argilla dataset 'attribution'" in md
        assert "23 human labels" in (report_dir / "index.html").read_text()
        calls = openai_server.stats()["total"]

        # A second run: no judge call, the same dataset, the user's answers untouched.
        second = _greval(cmd, here, env, timeout=600)
        both = second.stdout + second.stderr
        assert second.returncode == 0, both[-4000:]
        assert "0 judgement(s) to make" in _flat(both)
        assert "(updated)" in both and "(created)" not in both
        assert "creating its environment" not in both and "first time" not in both
        assert "23 of 30 records labelled, 7 wait for your label" in _flat(second.stdout)
        assert "not pushed" not in both
        assert openai_server.stats()["total"] == calls
        http = _argilla(data)
        records = _argilla_records(http, "attribution")
        assert len(records) == 30
        answers = [a for r in records for a in r.get("responses") or [] if a["user_id"] == me["id"]]
        assert len(answers) == 3 and all(a["status"] == "submitted" for a in answers)
        assert all(a["values"]["verdict"]["value"] == "Fully attributable" for a in answers)
        db = sqlite3.connect(store)
        assert db.execute("SELECT COUNT(*) FROM human_labels WHERE status='submitted'").fetchone()[0] == 23
        assert db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0] == 30
        db.close()
    finally:
        server.stop(data)


def _labelled_store(llm: OpenAIServer, work: Path) -> Path:
    """The quick start's example judged by the test server, 20 labels imported, 3 pulled from Argilla."""
    from greval.annotation.labels_import import import_labels
    from greval.cli.workspace import write_workspace
    from greval.dataset.records import load_records
    from greval.llm.config import JudgeConfig
    from greval.runner.driver import run
    from greval.spec import load_spec_file
    from greval.store.store import Store

    write_workspace(work)
    path = work / "greval.sqlite"
    rows = (work / "human_labels.csv").read_text().splitlines()
    (work / "first20.csv").write_text("\n".join(rows[:21]) + "\n")
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        run(load_spec_file(work / "attribution.yaml"), load_records(work / "records.jsonl"), st, cfg)
        import_labels(
            st,
            work / "first20.csv",
            "attribution",
            record_id_col="record_id",
            label_col="label",
            annotator_col="annotator",
        )
        late = [r.split(",")[0] for r in rows[21:24]]
        recs = st.query("SELECT record_id, record_hash FROM verdicts WHERE spec_name='attribution'")
        st.put_human_labels(
            {
                "spec_name": "attribution",
                "dataset": "attribution",
                "record_id": r["record_id"],
                "record_hash": r["record_hash"],
                "annotator": "owner",
                "label": "Fully attributable",
                "status": "submitted",
                "source": "argilla",
            }
            for r in recs
            if r["record_id"] in late
        )
    return path


def test_report_says_where_its_human_labels_came_from(llm: OpenAIServer, tmp_path: Path) -> None:
    """`greval report`: one line per metric with the label count by dataset and source, in the terminal
    (piped, 80 columns: no word of its table wrapped apart), the HTML index and the Markdown summary."""
    store = _labelled_store(llm, tmp_path / "ws")
    out_dir = tmp_path / "report"
    env = _piped_env()
    res = _greval(
        [*_greval_cmd(), "report", "--store", str(store), "-o", str(out_dir), "--bootstrap", "50"], tmp_path, env
    )
    assert res.returncode == 0, res.stderr
    want = "23 human labels — 20 imported from a file, 3 from Argilla dataset 'attribution'"
    assert want in _flat(res.stdout)
    assert want in (out_dir / "report.md").read_text()
    assert html.escape(want) in (out_dir / "index.html").read_text()
    assert _fits(res.stdout) == [], _fits(res.stdout)  # 80 columns: the table fits, its words whole
    assert "openai:judge-test" in _cell_words(res.stdout) or "openai:judge-test" in res.stdout.split()
    assert "…" not in res.stdout


def test_a_pull_keeps_imported_answers_counted_as_imported(llm: OpenAIServer, tmp_path: Path) -> None:
    from greval.report.store_report import build
    from greval.store.store import Store

    store = _labelled_store(llm, tmp_path / "ws")
    with Store(store) as st:
        # As `import-labels --to-argilla` stores them: under the Argilla dataset they were also given to ...
        st.db.execute("UPDATE human_labels SET dataset='attribution' WHERE source='import'")
        imported = st.query("SELECT * FROM human_labels WHERE source='import'")
        # ... and as `greval annotate pull` then writes them back, unchanged.
        st.put_human_labels({**r, "source": "argilla"} for r in imported)
    rep = build(store, ["attribution"], bootstrap_resamples=20)
    assert {(s.dataset, s.source, s.submitted) for s in rep.metrics[0].labels} == {
        ("attribution", "import", 20),
        ("attribution", "argilla", 3),
    }


def test_the_quickstart_workspace_is_git_ignored() -> None:
    param = next(p for p in main.load("quickstart").params if p.name == "workdir")  # loaded here: lazily registered
    assert f"/{param.default}/" in (ROOT / ".gitignore").read_text().splitlines()


def _fake_requirements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    req = tmp_path / "requirements.txt"
    req.write_text(text)
    monkeypatch.setattr(server, "requirements_file", lambda: req)
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # offline and fast: only what is installed already
    monkeypatch.setenv("GREVAL_HOME", str(tmp_path / "home"))
    return server.venv_dir().parent / "setup.log"


@pytest.mark.slow
def test_argilla_environment_setup_writes_pip_output_to_a_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """`greval annotate setup` (and `up`, the quick start): pip's output goes to a log in the data
    directory; the terminal gets a progress line and nothing on stdout mixed with the credentials."""
    log = _fake_requirements(tmp_path, monkeypatch, "pip\n")
    result = CliRunner().invoke(main, ["annotate", "setup"])
    assert result.exit_code == 0, result.output
    captured = capfd.readouterr()
    assert "Requirement already satisfied" not in captured.out + captured.err + result.output
    assert "Requirement already satisfied" in log.read_text()
    assert str(log) in captured.err + result.output
    assert server.venv_ready()


@pytest.mark.slow
def test_argilla_environment_setup_failure_shows_the_logs_tail_and_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    log = _fake_requirements(tmp_path, monkeypatch, "greval-no-such-package-4242\n")
    result = CliRunner().invoke(main, ["annotate", "setup"])
    assert result.exit_code == 2
    captured = capfd.readouterr()
    shown = captured.out + captured.err + result.output
    assert "Traceback" not in shown
    assert str(log) in result.output
    assert "No matching distribution found for greval-no-such-package-4242" in result.output
    assert not server.venv_ready()


def _wheel(folder: Path, name: str) -> None:
    """A minimal pure-Python wheel of ``name`` 1.0 (what pip needs to install it offline)."""
    import zipfile

    info = f"{name}-1.0.dist-info/"
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr(f"{name}/__init__.py", "")
        whl.writestr(info + "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        whl.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(info + "RECORD", "")


@pytest.mark.slow
def test_argilla_environment_setup_off_a_terminal_says_how_far_it_is_and_how_long_it_takes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Into a log or a pipe (scripts/setup.sh, CI), the Argilla environment's setup says what it costs (the
    measured estimate, not "about a minute" for what took 10) and how far pip is, with the time so far: a line
    every tenth package and one when installing starts. Offline: 12 small wheels in a local folder."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = [f"greval_fake_pkg{i}" for i in range(12)]
    for name in names:
        _wheel(wheels, name)
    _fake_requirements(tmp_path, monkeypatch, "".join(f"{n}==1.0\n" for n in names))
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    result = CliRunner().invoke(main, ["annotate", "setup"])
    assert result.exit_code == 0, result.output
    shown = capfd.readouterr().err + result.output
    assert server.SETUP_ESTIMATE in shown and "about a minute" not in shown
    assert re.search(r"Argilla environment: 10 of 12 packages downloaded \(\d+ min so far\)", shown), shown
    assert re.search(r"Argilla environment: installing 12 packages \(\d+ min so far\) …", shown), shown
    assert re.search(r"Argilla server environment ready \(\d+ s\)", shown), shown


def test_tables_fit_the_width_with_every_word_whole() -> None:
    """print_table at 80 columns (a pipe) and narrower: the run summary's table, which rich folded inside words
    at 80 (`attributi|on`, `attributa|ble:21`), fits with every word whole — narrowed between words, and one row
    at a time when even its longest words cannot stand side by side; a title wider than the table is wrapped
    above it."""
    import io

    from rich.console import Console
    from rich.table import Table

    from greval.cli.common import print_table

    def summary_table() -> Table:
        t = Table(title="run 20261126-085710-217dea — 30 records, judge openai:judge-test, 30 calls in 1.1s")
        for col in ("metric", "judged", "reused", "ok", "not scored", "distribution", "score", "tokens in/out"):
            t.add_column(col)
        dist = "Fully attributable:21  Not fully attributable:9"
        t.add_row("attribution", "30", "0", "30", "—", dist, "—", "8040/544")
        return t

    for width in (80, 60, 30):
        buf = io.StringIO()
        print_table(summary_table(), Console(file=buf, width=width, soft_wrap=True))
        text = buf.getvalue()
        assert _fits(text, width) == [], (width, text)
        words = [w for line in text.splitlines() for w in re.split(r"[│┃━┡┩╇┏┓┳┗┛┻─└┘┴┌┐┬├┤┼\s:,]+", line) if w]
        assert {"attribution", "Fully", "attributable", "openai", "judge-test"} <= set(words), (width, text)
        assert not {"attributi", "attributa", "on", "ble"} & set(words), (width, text)


# ------------------------------------------------------------------ issue 40, item 7: the Argilla port, checked first
@contextlib.contextmanager
def _foreign_listener(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """A real program that is not greval listening on ``port`` (Python's own HTTP server)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while server.port_free("127.0.0.1", port):
            assert proc.poll() is None and time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.05)
        yield proc
    finally:
        proc.terminate()
        proc.wait()


def test_a_port_given_and_taken_is_said_before_any_judging(llm: OpenAIServer, tmp_path: Path) -> None:
    """`quickstart --port P` with P held by another program: one line naming that program (its command and pid),
    exit 2, before step 2 — no judge call (it died at step 3 after 72 minutes)."""
    port = server.free_port()
    cmd = ["quickstart", "--dir", str(tmp_path / "ws"), "--port", str(port), "--argilla-data", str(tmp_path / "a")]
    cmd += ["--judge", "openai:judge-test", "--base-url", llm.base_url]
    with _foreign_listener(port) as holder:
        result = CliRunner().invoke(main, cmd, env={"COLUMNS": "300"})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert lines == [
        f"error: port {port} is taken by python -m http.server {port} --bind 127.0.0.1 (pid {holder.pid}): choose "
        "another --port, or stop it"
    ], result.output
    assert llm.stats()["total"] == 0 and not (tmp_path / "ws" / "greval.sqlite").exists()


@pytest.mark.slow
@pytest.mark.argilla
def test_the_default_port_taken_by_another_program_gives_argilla_a_free_one(llm: OpenAIServer, tmp_path: Path) -> None:
    """The default port (6900) held by a program that is not this data directory's Argilla (here a real HTTP
    server this test starts, or whatever holds it already): named in one line before step 2, and the embedded
    Argilla takes a free port; the quick start finishes."""
    data = tmp_path / "argilla"
    cmd = ["quickstart", "--dir", str(tmp_path / "ws"), "--argilla-data", str(data), "--bootstrap", "50"]
    cmd += ["--judge", "openai:judge-test", "--base-url", llm.base_url]
    with contextlib.ExitStack() as stack:
        if server.port_free("127.0.0.1", server.DEFAULT_PORT):
            stack.enter_context(_foreign_listener(server.DEFAULT_PORT))
        holder = server.port_holder("127.0.0.1", server.DEFAULT_PORT)
        try:
            result = CliRunner().invoke(main, cmd, env={"COLUMNS": "300"})
        finally:
            server.stop(data)
    assert result.exit_code == 0, result.output
    text = result.output
    note = text.index(f"note: port {server.DEFAULT_PORT} is taken by {holder}: the embedded Argilla takes ")
    assert note < text.index("2/5 judging")  # said before any long step
    taken = re.search(r"the embedded Argilla takes (\d+)", text)
    assert taken is not None and int(taken.group(1)) != server.DEFAULT_PORT
    assert f"Argilla     http://127.0.0.1:{taken.group(1)} " in text  # where it runs, in the closing lines

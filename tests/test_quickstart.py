"""Stage 6 — the quick start, end to end, as a new user runs it: no API key, the embedded local judge
(real llama-server), the embedded Argilla, the bundled example, the report. Then again: nothing redone.
And the same loop without Argilla, with a judge of one's own (the test server)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from greval.annotation import server
from greval.cli import main
from greval.local_judge import find_llama_server
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
    if find_llama_server() is None and not os.environ.get("GREVAL_BUILD_LLAMA"):
        pytest.skip("llama-server is not built (CI builds it with `greval local-judge build`)")
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
        assert "30 judgement(s) to make" in both
        assert "starting the embedded local judge" in both
        assert "(created)" in both
        assert re.search(r"Argilla\s+http://127\.0\.0\.1:\d+\s+login: \S+ / \S+", first.stdout)
        report = work / "report" / "attribution.html"
        assert report.exists() and "<img" in report.read_text()
        db = sqlite3.connect(work / "greval.sqlite")
        assert db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 30
        assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 30
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
        assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 30
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
    assert "login:" not in result.output  # no Argilla line in the closing panel
    assert TEST_KEY not in result.output
    assert llm.stats()["total"] >= 30
    assert "<img" in (work / "report" / "attribution.html").read_text()
    db = sqlite3.connect(work / "greval.sqlite")
    assert db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0] == 30
    assert db.execute("SELECT COUNT(*) FROM human_labels").fetchone()[0] == 30
    db.close()

"""greval's pytest plugin (issue 33): a sample test suite run by pytest in a subprocess, judged by the real test
LLM server over HTTP — a check that passes, one that fails naming the score, its CI, the threshold and the
worst records, a re-run that pays nothing, two xdist workers paying each judgement once — and a pytest run
that does not use the plugin importing nothing of greval's."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

ROWS = [
    {
        "id": f"r{i}",
        "question": f"What is fact {i}?",
        "expected_answer": f"Fact {i} is true.",
        "answer": f"Fact {i} is true." if i % 2 else f"Nothing about {i}.",
    }
    for i in range(8)
]

SUITE = """
from pathlib import Path

DATA = Path(__file__).parent / "rag.jsonl"


def test_alignment_is_good_enough(greval_check):
    results = greval_check(DATA, "answer_alignment", min_score=0.0, id_column="id")
    assert results.to_pandas()["answer_alignment.status"].eq("ok").all()


def test_rouge_is_high(greval_check):
    greval_check(DATA, "rouge_l", min_score=0.9, ci="lower", id_column="id")


def test_alignment_is_perfect(greval_check):
    greval_check(DATA, "answer_alignment", max_score=0.2, id_column="id")
"""

SAME_TWICE = """
import os
from pathlib import Path

DATA = Path(__file__).parent / "rag.jsonl"


def test_one(greval_check):
    (DATA.parent / os.environ["PYTEST_XDIST_WORKER"]).touch()
    greval_check(DATA, "answer_alignment", min_score=0.0, id_column="id")


def test_two(greval_check):
    (DATA.parent / os.environ["PYTEST_XDIST_WORKER"]).touch()
    greval_check(DATA, "answer_alignment", min_score=0.0, id_column="id")
"""


def plugin_args() -> list[str]:
    """``-p greval.pytest_plugin`` where greval's entry point is not installed (this checkout, not a wheel)."""
    points = importlib.metadata.entry_points(group="pytest11")
    return [] if any(ep.value == "greval.pytest_plugin" for ep in points) else ["-p", "greval.pytest_plugin"]


def suite(tmp_path: Path, name: str, source: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    (folder / f"test_{name}.py").write_text(source, encoding="utf-8")
    return folder


def pytest_run(folder: Path, srv: OpenAIServer | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_", "PYTEST_"))}
    env |= {"PYTHONPATH": str(ROOT), "GREVAL_HOME": str(folder / "home")}
    if srv is not None:
        env |= {"OPENAI_BASE_URL": srv.base_url, "OPENAI_API_KEY": "sk-test"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *plugin_args(), *args]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300)


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["entry-points"]["pytest11"] == {"greval": "greval.pytest_plugin"}


def test_a_check_passes_fails_with_its_worst_records_and_a_rerun_pays_nothing(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    folder = suite(tmp_path, "quality", SUITE)
    args = ["--greval-judge", "openai:judge-test"]
    done = pytest_run(folder, llm, *args)
    assert "2 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert llm.stats()["total"] == len(ROWS)  # answer_alignment judged once for two tests; ROUGE needs no call
    out = done.stdout
    assert "greval: rouge_l: score (lower end of its CI) " in out and ", needs >= 0.9" in out
    assert "dataset score 0.643, 95% CI [" in out and "over 8 of 8 records" in out
    assert "worst records:" in out and "r0  score 0.286  ok  rougeL F-measure 0.286 (rouge1 0.286" in out
    assert "greval: answer_alignment: score " in out and ", needs <= 0.2" in out
    worst = out[out.index("greval: answer_alignment") :].splitlines()[3]  # the first worst record: id, verdict, why
    assert worst.split()[0] in {r["id"] for r in ROWS}
    assert any(label in worst for label in ("Incorrect", "Not Acceptable", "Acceptable", "Correct"))
    assert (folder / ".pytest_cache" / "d" / "greval" / "store.sqlite").exists()  # the default store
    llm.reset()
    again = pytest_run(folder, llm, *args)
    assert "2 failed, 1 passed" in again.stdout and llm.stats()["total"] == 0


def test_xdist_workers_pay_each_judgement_once(llm: OpenAIServer, tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    llm.configure(latency=0.3)  # the two tests' runs overlap
    folder = suite(tmp_path, "twice", SAME_TWICE)
    store = tmp_path / "shared.sqlite"
    args = ["-n", "2", "--greval-store", str(store), "--greval-judge", "openai:judge-test"]
    done = pytest_run(folder, llm, *args)
    assert "2 passed" in done.stdout, done.stdout + done.stderr
    assert (folder / "gw0").exists() and (folder / "gw1").exists()  # one test on each worker
    assert llm.stats()["total"] == len(ROWS)  # each judgement once, whichever worker made it
    assert store.exists()


def test_a_bad_check_fails_its_test_in_one_line(llm: OpenAIServer, tmp_path: Path) -> None:
    bad = 'def test_typo(greval_check):\n    greval_check([{"question": "q"}], "faithfullness")\n'
    folder = suite(tmp_path, "typo", bad)
    done = pytest_run(folder, llm)
    assert "1 failed" in done.stdout
    assert "greval: faithfullness: no such file or predefined spec (did you mean 'faithfulness'?)" in done.stdout
    assert "Traceback" not in done.stdout


def test_a_pytest_run_that_does_not_use_it_imports_nothing_of_greval(tmp_path: Path) -> None:
    """The plugin loads with every pytest run: it adds greval's package and itself to what pytest (and the
    other plugins installed here) import, nothing else — no stage, no pydantic, pandas or LangChain."""
    probe = (
        "import json, pathlib, sys\n\n\ndef test_modules():\n"
        "    out = pathlib.Path(__file__).parent / 'modules.json'\n"
        "    out.write_text(json.dumps(sorted(sys.modules)))\n"
    )
    folder = suite(tmp_path, "light", probe)
    done = pytest_run(folder, None, "--help")
    assert "--greval-store" in done.stdout and "--greval-judge" in done.stdout
    loaded = []
    for off in (False, True):
        args = ["-p", "no:greval"] if off and not plugin_args() else []
        cmd = [sys.executable, "-m", "pytest", "-q", *(plugin_args() if not off else []), *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=True)
        loaded.append(set(json.loads((folder / "modules.json").read_text())))
    assert loaded[0] - loaded[1] == {"greval", "greval._lazy", "greval.pytest_plugin"}  # _lazy: stdlib only


JUDGE_FAILS = """
from pathlib import Path

DATA = Path(__file__).parent / "rag.jsonl"


def test_alignment_is_good_enough(greval_check):
    greval_check(DATA, "answer_alignment", min_score=0.0, id_column="id")
"""


def test_a_judge_that_fails_fails_the_check_saying_so_and_the_next_run_asks_again(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """Issue 40: the judge failing on a record (here HTTP 400 on r3) is said as a failure of the judge, with the
    record and its error, not a low score; and no score over the other records passes the check meanwhile
    (min_score=0.0 passed before). Fixed, the next run asks only for what failed."""
    llm.script([{"match": "fact 3?", "action": {"type": "fault", "status": 400}}])
    folder = suite(tmp_path, "fails", JUDGE_FAILS)
    args = ["--greval-judge", "openai:judge-test"]
    done = pytest_run(folder, llm, *args)
    out = done.stdout
    assert "1 failed" in out, out + done.stderr
    head = (
        "greval: answer_alignment: the judge failed on 1 of 8 records (errors, not low scores: no score is "
        "checked; the next run asks again)"
    )
    assert head in out, out
    failures = out.split("short test summary info")[0]  # pytest may repeat the message in its summary
    lines = [ln for ln in failures.splitlines() if ln.startswith("    r3  ")]
    assert len(lines) == 1 and "error" in lines[0] and "400" in lines[0], out
    assert "Traceback" not in out
    llm.reset()
    again = pytest_run(folder, llm, *args)
    assert "1 passed" in again.stdout, again.stdout + again.stderr
    assert llm.stats()["total"] == 1  # only r3's judgement asked again

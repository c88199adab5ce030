"""docs/ci.md's GitHub Actions workflow and GitLab CI job, parsed and run (issue 33): each command of both, in
order, in a project holding the doc's test file and a small data set, against the test LLM server as the
OpenAI-compatible judge; every command must exit 0 and every JUnit report must pass the JUnit schema. Only
`pip install` and GitHub's `uses:` steps are left out (greval is installed here; actions need GitHub)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ci.md"
SCHEMA = ROOT / "tests" / "fixtures" / "junit" / "junit-10.xsd"

pytestmark = pytest.mark.slow


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.S | re.M)


def workflows() -> tuple[dict[str, Any], dict[str, Any]]:
    """(the GitHub workflow, the GitLab CI file) of the doc, parsed."""
    parsed = [yaml.safe_load(b) for b in blocks("yaml")]
    github = next(p for p in parsed if "jobs" in p)
    gitlab = next(p for p in parsed if any(isinstance(j, dict) and "script" in j for j in p.values()))
    return github, gitlab


def commands(github: dict[str, Any], gitlab: dict[str, Any]) -> dict[str, tuple[dict[str, str], list[str]]]:
    """Per CI system: the environment its YAML sets (values, not secrets) and its shell commands in order."""
    (job,) = github["jobs"].values()
    gh_env = {k: str(v) for k, v in job.get("env", {}).items() if "${{" not in str(v)}
    gh_cmds = [step["run"] for step in job["steps"] if "run" in step]
    assert all("uses" in step or "run" in step for step in job["steps"])
    (gl_job,) = (j for j in gitlab.values() if isinstance(j, dict) and "script" in j)
    gl_env = {k: str(v) for k, v in gl_job.get("variables", {}).items()}
    return {"github": (gh_env, gh_cmds), "gitlab": (gl_env, list(gl_job["script"]))}


ROWS = [
    {
        "id": f"r{i}",
        "question": f"Which city is number {i} on the list?",
        "expected_answer": f"City number {i} is Lyon.",
        "answer": f"City number {i} is Lyon.",
    }
    for i in range(12)
]


def project(tmp_path: Path) -> Path:
    """A repository with the doc's test file and its data."""
    (test_file,) = (b for b in blocks("python") if b.startswith("# tests/eval/"))
    path = tmp_path / test_file.splitlines()[0].removeprefix("# ")
    path.parent.mkdir(parents=True)
    path.write_text(test_file, encoding="utf-8")
    (path.parent / "rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return tmp_path


def test_the_doc_has_a_github_workflow_and_a_gitlab_job_running_pytest_and_the_gate() -> None:
    found = commands(*workflows())
    for env, cmds in found.values():
        assert env["GREVAL_JUDGE"].startswith("openai:") and env["GREVAL_STORE"]
        assert any(c.startswith("pytest ") for c in cmds) and any(c.startswith("greval gate ") for c in cmds)
        assert all("--junit" in c for c in cmds if c.startswith("greval gate "))
    github, _ = workflows()
    (job,) = github["jobs"].values()
    assert {"OPENAI_BASE_URL", "OPENAI_API_KEY"} <= set(job["env"])  # from the repository's secrets


def test_the_ci_commands_run_against_an_openai_compatible_server(llm: OpenAIServer, tmp_path: Path) -> None:
    """Each distinct command list is run once: GitHub's and GitLab's are the same commands with the same
    environment today (each run is five fresh processes, about two minutes under the suite's load), and a
    difference between them makes both run."""
    runs: dict[tuple[tuple[tuple[str, str], ...], tuple[str, ...]], str] = {}
    for system, (env_yaml, cmds) in commands(*workflows()).items():
        runs.setdefault((tuple(sorted(env_yaml.items())), tuple(cmds)), system)
    for (env_items, cmds), system in runs.items():
        llm.reset()
        run_ci_commands(llm, tmp_path / system, system, dict(env_items), list(cmds))


def run_ci_commands(llm: OpenAIServer, tmp_path: Path, system: str, env_yaml: dict[str, str], cmds: list[str]) -> None:
    """One CI system's commands, in order, against the test server; then a worse release fails them."""
    xmlschema = pytest.importorskip("xmlschema")
    # the judge answers every alignment question "Correct": the doc's thresholds hold, as for a good release
    llm.script([{"match": "Metric: answer_alignment", "action": {"type": "respond", "content": {
        "reason": "The answer states the expected fact.", "label": "Correct"}}}])  # fmt: skip
    tmp_path.mkdir()
    repo = project(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_", "PYTEST_"))}
    env |= env_yaml | {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-test", "PYTHONPATH": str(ROOT)}
    env |= {"GREVAL_HOME": str(tmp_path / "home"), "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}
    points = importlib.metadata.entry_points(group="pytest11")
    if not any(ep.value == "greval.pytest_plugin" for ep in points):  # this checkout, not an installed wheel
        env["PYTEST_ADDOPTS"] = "-p greval.pytest_plugin"
    skipped = [c for c in cmds if c.startswith("pip install")]
    assert skipped == ["pip install greval"]
    for cmd in (c for c in cmds if c not in skipped):
        done = subprocess.run(["bash", "-ec", cmd], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{system}: `{cmd}` exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        if cmd.startswith("greval gate"):
            assert done.stdout.startswith("gate passed: score ")
    assert llm.stats()["total"] == len(ROWS)  # the gates read the store: only pytest's check called the judge
    reports = sorted(repo.glob("*.xml"))
    assert [p.name for p in reports] == ["gate-alignment.xml", "gate-rouge.xml", "pytest-eval.xml"]
    schema = xmlschema.XMLSchema(str(SCHEMA))
    for report in reports:
        schema.validate(str(report))
    # and a release whose answers got worse fails the same commands
    gate = next(c for c in cmds if c.startswith("greval gate") and "answer_alignment" in c)
    llm.reset()
    llm.script([{"match": "Metric: answer_alignment", "action": {"type": "respond", "content": {
        "reason": "It contradicts the expected answer.", "label": "Incorrect"}}}])  # fmt: skip
    worse = [{**r, "answer": "Paris."} for r in ROWS]
    (repo / "tests" / "eval" / "rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in worse))
    tests = next(c for c in cmds if c.startswith("pytest "))
    failed = subprocess.run(["bash", "-ec", tests], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert failed.returncode == 1 and "2 failed" in failed.stdout, failed.stdout
    gated = subprocess.run(["bash", "-ec", gate], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert gated.returncode == 1 and gated.stdout.startswith("gate failed: score (lower end of its CI) 0.000")

"""Start-up: the command line lists every command without importing the stages, and everyday commands do
not import the heavy libraries they do not use (issue 15).

The import checks run each command in a fresh interpreter and read ``sys.modules`` when it is done.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from greval.cli import COMMANDS, GrevalGroup, main
from greval.cli.lazy import Lazy, LazyGroup
from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]

#: Libraries that `import greval`, `greval --help`, `greval spec validate` and `greval results runs` must
#: not import (any ``langchain*`` package counts as LangChain).
HEAVY = {"sklearn", "scipy", "pandas", "argilla", "openai", "matplotlib"}

#: The commands of `greval` before the lazy table (from `greval --help`, `greval spec --help`, … at the time).
BEFORE: dict[str, set[str]] = {
    "": {"agreement", "annotate", "local-judge", "quickstart", "reliability", "report", "results", "run", "spec"},
    "spec": {"lint", "list", "new", "schema", "show", "try", "validate"},
    "results": {"export", "runs"},
    "annotate": {"down", "import-labels", "pull", "push", "setup", "status", "up"},
    "local-judge": {"build", "serve", "status"},
}

_PROBE = """
import json, sys
sys.argv = ["greval", *sys.argv[1:]]
code = 0
try:
    from greval.__main__ import entry
    entry()
except SystemExit as exc:
    code = exc.code
finally:
    loaded = sorted({m.split(".")[0] for m in sys.modules})
    sys.stderr.write("\\nSTARTUP-PROBE " + json.dumps({"exit": code, "modules": loaded}) + "\\n")
"""


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m in HEAVY or m.startswith("langchain")]


def _langchain(modules: list[str]) -> list[str]:
    return [m for m in modules if m == "openai" or m.startswith("langchain")]


def _probe(args: list[str], cwd: Path) -> tuple[int, list[str], str]:
    """Run ``greval ARGS`` in a fresh interpreter: (exit code, top-level modules imported, stdout)."""
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    line = next((x for x in done.stderr.splitlines() if x.startswith("STARTUP-PROBE ")), None)
    assert line is not None, done.stderr
    report = json.loads(line.removeprefix("STARTUP-PROBE "))
    return report["exit"] or 0, report["modules"], done.stdout + done.stderr


def test_import_greval_is_light() -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import sys, greval; print(sorted({m.split('.')[0] for m in sys.modules}))"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = [m.strip(" '") for m in done.stdout.strip().strip("[]").split(",")]
    assert _heavy(modules) == []
    assert "pydantic" not in modules and "click" not in modules


def test_help_imports_no_stage(tmp_path: Path) -> None:
    code, modules, output = _probe(["--help"], tmp_path)
    assert code == 0, output
    assert _heavy(modules) == []
    assert "pydantic" not in modules  # no stage module at all: the listing comes from the table
    assert "Commands:" in output


def test_spec_validate_is_light(tmp_path: Path) -> None:
    code, modules, output = _probe(["spec", "validate", str(ROOT / "metric_specs" / "answer_alignment.yaml")], tmp_path)
    assert code == 0, output
    assert "ok " in output
    assert _heavy(modules) == []


def test_spec_validate_of_judge_and_computed_specs_is_light(tmp_path: Path) -> None:
    files = [str(p) for p in sorted((ROOT / "metric_specs").glob("*.yaml")) if "kind: pipeline" not in p.read_text()]
    assert any("computed_" in f for f in files) and any("chunk_evaluation" in f for f in files)
    code, modules, output = _probe(["spec", "validate", *files], tmp_path)
    assert code == 0, output
    assert _heavy(modules) == []


@pytest.mark.parametrize("kind", ["pipeline", "computed"])
def test_spec_validate_of_pipeline_or_computed_specs_imports_no_langchain(tmp_path: Path, kind: str) -> None:
    """Pipeline and computed specs are declared in greval.spec; their evaluators (LangChain for pipelines)
    live in greval.judge and are imported only when a run builds them."""
    files = [str(p) for p in sorted((ROOT / "metric_specs").glob("*.yaml")) if f"kind: {kind}" in p.read_text()]
    assert files
    code, modules, output = _probe(["spec", "validate", *files], tmp_path)
    assert code == 0, output
    assert output.count("ok ") >= len(files)
    assert _langchain(modules) == []
    assert _heavy(modules) == []


def test_results_runs_is_light(tmp_path: Path) -> None:
    data = tmp_path / "records.jsonl"
    record = {"id": "r1", "question": "q?", "answer": "Paris [1].", "chunks": [{"id": "c1", "text": "Paris."}]}
    data.write_text(json.dumps(record) + "\n", encoding="utf-8")
    store = tmp_path / "s.sqlite"
    made = CliRunner().invoke(main, ["run", str(data), "-s", "citation_validity", "--store", str(store), "--quiet"])
    assert made.exit_code == 0, made.output
    code, modules, output = _probe(["results", "runs", "--store", str(store)], tmp_path)
    assert code == 0, output
    assert "finished" in output
    assert _heavy(modules) == []


def test_agreement_on_a_file_does_not_import_langchain(tmp_path: Path) -> None:
    table = tmp_path / "labels.csv"
    table.write_text("id,judge,human\n1,yes,yes\n2,no,yes\n3,no,no\n4,yes,yes\n5,no,no\n6,yes,no\n", encoding="utf-8")
    args = ["agreement", str(table), "--judge", "judge", "--human", "human", "--bootstrap", "0"]
    code, modules, output = _probe(args, tmp_path)
    assert code == 0, output
    assert _langchain(modules) == []


#: What `greval agreement FILE` must not import (issue 35): its statistics are numpy, its reports rich, and a
#: CSV / TSV / JSON file is read without pandas (pyarrow comes with pandas).
AGREEMENT_HEAVY = {"sklearn", "scipy", "krippendorff", "pandas", "pyarrow", "matplotlib", "argilla", "openai"}


@pytest.mark.parametrize("kind", ["categorical", "value", "jsonl", "batch"])
def test_agreement_on_a_file_imports_no_pandas_scipy_or_scikit_learn(tmp_path: Path, kind: str) -> None:
    """Issue 35: scipy and scikit-learn were ~1.3 s of a 1.8 s `greval agreement` call, pandas and pyarrow most
    of the rest; Spearman, Kendall, the classification report and the AUCs are numpy now (tests/agreement/
    test_stats.py holds them to the libraries' values) and the file is read into a Frame. Checked with the
    default bootstrap, a score column (AUCs) and slices, a value scale (rank correlations), JSON Lines, and a
    batch."""
    rows = [(n, "yes" if n % 3 else "no", "yes" if n % 4 else "no", n / 20, n % 5, (n * 7) % 5) for n in range(20)]
    table = tmp_path / "labels.csv"
    table.write_text("id,judge,human,p,a,b\n" + "".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    args = ["agreement", str(table), "--bootstrap", "50"]
    if kind == "categorical":
        args += ["--judge", "judge", "--human", "human", "--score", "p", "--pos-label", "yes", "--slice", "judge"]
    elif kind == "value":
        args += ["--judge", "a", "--human", "b", "--kind", "value"]
    elif kind == "batch":  # two files, two --judge / --human pairs each
        args = ["agreement", str(table), str(table), "--judge", "judge", "--human", "human", "--judge", "a"]
        args += ["--human", "b", "--bootstrap", "50"]
    else:
        lines = tmp_path / "labels.jsonl"
        lines.write_text("".join(json.dumps({"id": r[0], "s": {"j": r[1], "h": r[2]}}) + "\n" for r in rows))
        args = ["agreement", str(lines), "--judge", "s.j", "--human", "s.h", "--item", "id", "--bootstrap", "50"]
    code, modules, output = _probe(args, tmp_path)
    assert code == 0, output
    assert sorted(AGREEMENT_HEAVY & set(modules)) == []
    assert _langchain(modules) == []


@pytest.mark.parametrize("fault", [None, 500, 401])
def test_a_run_with_an_openai_compatible_judge_imports_no_langchain_and_no_sdk(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: int | None
) -> None:
    """A run's judge calls (a judge spec and a pipeline) go out without LangChain when nothing needs it
    (greval.llm.openai_chat) and without the openai SDK (greval.llm.wire, over aiohttp): the whole run imports
    neither LangChain, langsmith nor openai — ~0.6 s and ~0.5 s of CPU before the first call of every process
    (issues 35 and 46). A failing call too: a server error that is retried, a refused key that stops the run."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)
    data = tmp_path / "records.jsonl"
    record = {
        "id": "r1",
        "question": "Capital of France?",
        "answer": "Paris.",
        "chunks": [{"id": "c1", "text": "Paris."}],
    }
    data.write_text(json.dumps(record) + "\n", encoding="utf-8")
    if fault is not None:
        llm.script([{"times": 1, "action": {"type": "fault", "status": fault}}])
    judge = ["--judge", "openai:judge-test", "--base-url", llm.base_url, "--store", str(tmp_path / "s.sqlite")]
    code, modules, output = _probe(
        ["run", str(data), "-s", "chunk_evaluation", "-s", "answer_relevance", *judge], tmp_path
    )
    if fault == 401:
        assert code != 0 and "auth" in output and "Traceback" not in output, output
    else:
        assert code == 0, output
        assert llm.stats()["total"] >= 3 + (fault is not None), output  # the chunk, then the pipeline's two
    assert [m for m in modules if m.startswith(("langchain", "langsmith", "openai"))] == [], modules
    assert "aiohttp" in modules  # greval's own client sent them


def _tables() -> list[tuple[str, LazyGroup, str, Lazy]]:
    """Every entry of every command table, the nested groups' tables included."""
    found: list[tuple[str, LazyGroup, str, Lazy]] = []

    def walk(prefix: str, group: LazyGroup) -> None:
        for name, entry in group.lazy.items():
            found.append((prefix, group, name, entry))
            command = group.load(name)
            if isinstance(command, LazyGroup):
                walk(f"{prefix} {name}".strip(), command)

    assert isinstance(main, LazyGroup)
    walk("", main)
    return found


def test_every_table_entry_imports_and_its_short_help_is_the_commands_own() -> None:
    entries = _tables()
    assert {name for prefix, _, name, _ in entries if prefix == ""} == set(COMMANDS)
    for prefix, group, name, entry in entries:
        command = group.load(name)
        where = f"greval {prefix} {name}".replace("  ", " ")
        assert command.name == name, where
        assert entry.short_help == command.get_short_help_str(limit=10**6), where
        listed = click.Command(name, help=entry.short_help)
        for limit in range(8, 160):  # as the listing shortens it, at every terminal width
            assert listed.get_short_help_str(limit) == command.get_short_help_str(limit), (where, limit)


def _listed(args: list[str]) -> set[str]:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=110)
    assert result.exit_code == 0, result.output
    section = result.output.split("Commands:", 1)[1]
    return {line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.split()}


@pytest.mark.parametrize("group", sorted(BEFORE))
def test_help_lists_every_command_that_existed_before(group: str) -> None:
    listed = _listed(group.split())
    assert BEFORE[group] <= listed


def test_a_broken_command_module_fails_loudly_and_help_still_lists_it() -> None:
    @click.group(cls=GrevalGroup, lazy={"broken": Lazy("greval.no_such_module:command", "Never imported.")})
    def group() -> None:
        """A test group."""

    runner = CliRunner()
    listing = runner.invoke(group, ["--help"])
    assert listing.exit_code == 0 and "broken  Never imported." in listing.output
    used = runner.invoke(group, ["broken"])
    assert isinstance(used.exception, ModuleNotFoundError)


def test_a_user_error_in_a_lazily_loaded_command_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["spec", "show", str(tmp_path / "missing.yaml")])
    assert result.exit_code == 2
    assert result.output.startswith("error:") and "Traceback" not in result.output


def test_predefined_names_read_without_parsing_match_the_parsed_files() -> None:
    from greval.paths import metric_specs_dir
    from greval.spec import bundled_specs
    from greval.spec.load import _load

    parsed = {spec.name: f for f in sorted(metric_specs_dir().glob("*.yaml")) for spec, _ in _load(f)}
    assert bundled_specs() == parsed


def test_annotate_status_and_down_are_light(tmp_path: Path) -> None:
    """`greval annotate status` / `down` only read the data directory's pid and state files, ask the server's
    health URL and signal its process: no Argilla SDK, no stage, no pydantic (issue 17). A stand-in process
    named serve.py, running in the data directory as the real server does, makes both take their 'running'
    path (health check that fails, then SIGTERM)."""
    data = tmp_path / "argilla-data"
    data.mkdir()
    stand_in = tmp_path / "serve.py"
    stand_in.write_text("import time\ntime.sleep(120)\n", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, str(stand_in)], cwd=data)
    try:
        dead_port = 9  # discard: nothing answers HTTP there
        (data / "server.pid").write_text(f"{proc.pid}\n", encoding="utf-8")
        (data / "server.json").write_text(json.dumps({"pid": proc.pid, "url": f"http://127.0.0.1:{dead_port}"}))
        code, modules, output = _probe(["annotate", "status", "--data-dir", str(data)], tmp_path)
        assert code == 0, output
        assert f"starting or unresponsive: http://127.0.0.1:{dead_port} (pid {proc.pid}" in output
        assert _heavy(modules) == [] and "pydantic" not in modules, modules
        code, modules, output = _probe(["annotate", "down", "--data-dir", str(data)], tmp_path)
        assert code == 0, output
        assert "Argilla stopped." in output
        assert proc.wait(timeout=30) is not None
        assert _heavy(modules) == [] and "pydantic" not in modules, modules
        assert not (data / "server.pid").exists()
        code, modules, output = _probe(["annotate", "status", "--data-dir", str(data)], tmp_path)
        assert code == 0 and "stopped (data " in output, output
        assert _heavy(modules) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

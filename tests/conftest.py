"""Shared fixtures: a real local OpenAI-compatible HTTP server (greval.testing.openai_server) behind
langchain-openai, and temporary stores. Nothing here fakes the client stack."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from greval.testing.openai_server import OpenAIServer

TEST_KEY = "sk-test-SECRET-do-not-store-1234"


def terminal_sigint() -> None:
    """A child's ``preexec_fn``: SIGINT's default action, as a user's terminal delivers it (a job started in the
    background by a non-interactive shell, as CI may be, inherits SIGINT as ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# numpy's OpenBLAS runs a matrix product on one thread per core, and its threads spin while they wait: with 4
# xdist workers on 2 cores the bootstrap's small products (1000 resamples x a few hundred items) waited on each
# other's spinning, tests/agreement/test_design.py took 159 s instead of 73 (load 7) and twice the CPU, taken
# from the other workers. One thread per worker gives the same bits (checked on the design tests' figures).
# Set before anything imports numpy (nothing above does), so the workers xdist starts later inherit it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


#: The modules whose tests xdist hands to its workers one at a time (scripts/test.sh runs `-n 4`): long tests
#: that share nothing but session fixtures. Every other module runs whole on one worker, in its own order, its
#: module-scoped fixtures (an Argilla, Phoenix, Ray or llama-server, or state its tests build on) set up once.
SPREAD = {
    "tests/agreement/test_design.py",
    "tests/align/test_core.py",
    "tests/align/test_end_to_end.py",
    "tests/test_ci_doc.py",
    "tests/test_packaging.py",
    "tests/test_pytest_plugin.py",
    "tests/test_quickstart.py",
    "tests/test_run.py",
    "tests/test_serve.py",
    "tests/test_store.py",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The clean-clone tests (minutes of pip installs into empty environments) run only when asked for by
    name (`-m clean_clone`, as CI does), whatever other -m selection is given (`-m "not slow"` included).
    On xdist workers the longest tests come first, so that none of them (the quick start with the embedded
    judge: minutes) starts last and holds the run's end."""
    if "clean_clone" not in str(config.getoption("markexpr") or ""):
        drop = [item for item in items if item.get_closest_marker("clean_clone")]
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = [item for item in items if not item.get_closest_marker("clean_clone")]
    if hasattr(config, "workerinput"):
        _slow_first(items)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


def _slow_first(items: list[pytest.Item]) -> None:
    """Sort ``items``: the embedded judge's tests, then the slow ones, then the rest; a module xdist runs whole
    moves as one block (with its most urgent test), its order kept. A module of SPREAD with a module-scoped
    fixture would set it up on every worker and run its tests out of order: refused."""
    rank: dict[str, int] = {}
    for item in items:
        urgency = 0 if item.get_closest_marker("llama") else 1 if item.get_closest_marker("slow") else 2
        module = _module(item)
        if module in SPREAD:
            info = getattr(item, "_fixtureinfo", None)
            if info is not None and any(d and d[-1].scope == "module" for d in info.name2fixturedefs.values()):
                raise pytest.UsageError(f"{module} has a module-scoped fixture: take it out of SPREAD (conftest.py)")
            rank[item.nodeid] = urgency
        else:
            rank[module] = min(rank.get(module, 2), urgency)
    items.sort(key=lambda item: rank.get(item.nodeid, rank.get(_module(item), 2)))


@pytest.hookimpl(optionalhook=True)  # xdist's hook: unknown under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (scripts/test.sh): each module outside SPREAD is one unit of work, each test of SPREAD
    its own, handed out in the order the workers collected them (slowest first). xdist's own loadgroup cannot
    group here: it renames the items, which pytest 9 no longer lets it do."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return nodeid if module in SPREAD else module

    config.option.loadscopereorder = False  # keep the collection's order: slowest first
    return ModuleScheduling(config, log)


#: What the terminal settings were where the run started: xdist's workers start with COLUMNS=80 and LINES=24 set
#: (a shell's own settings or none), and greval's consoles read COLUMNS once, when greval.cli is imported.
TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)  # xdist's hook, on the controller: unknown under -p no:xdist
def pytest_configure_node(node: Any) -> None:
    node.workerinput["terminal_env"] = {name: os.environ.get(name) for name in TERMINAL_ENV}


def pytest_configure(config: pytest.Config) -> None:
    """On an xdist worker, before the test modules import greval.cli: the run's own terminal settings."""
    started: dict[str, str | None] = getattr(config, "workerinput", {}).get("terminal_env", {})
    for name, value in started.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


@pytest.fixture()
def llm(openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    """The test server, reset (no rules, no latency, all methods accepted, its default seed, no log-probabilities,
    no cached tokens: whatever test ran before on this worker) with the API key in the env."""
    openai_server.reset()
    openai_server.configure(latency=0.0, json_schema=True, tools=True, seed=0, logprobs="null", prefix_cache=False)
    monkeypatch.setenv("OPENAI_API_KEY", TEST_KEY)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("GREVAL_JUDGE", raising=False)
    yield openai_server
    openai_server.reset()


@pytest.fixture()
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "store.sqlite"


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not SHARED_DATA.exists():
    SHARED_DATA = Path(os.environ.get("GREVAL_SHARED_DATA", "/nonexistent"))


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A real PostgreSQL server for the session (Debian's postgresql package, in a temp dir; CI installs it).
    Skipped, with the reason, only where its binaries or greval[postgres] (psycopg) are absent."""
    from greval.testing.postgres import PostgresServer, binaries

    pytest.importorskip("psycopg", reason="greval[postgres] is not installed (psycopg)")
    if binaries() is None:
        pytest.skip("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
    with PostgresServer() as pg:
        yield pg


@pytest.fixture()
def pg_url(postgres: Any) -> str:
    """A new, empty database on the session's PostgreSQL server: its URL (a store reference)."""
    url: str = postgres.database()
    return url

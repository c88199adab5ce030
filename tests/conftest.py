"""Shared fixtures: a real local OpenAI-compatible HTTP server (greval.testing.openai_server) behind
langchain-openai, and temporary stores. Nothing here fakes the client stack."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from greval.testing.openai_server import OpenAIServer

TEST_KEY = "sk-test-SECRET-do-not-store-1234"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The clean-clone tests (minutes of pip installs into empty environments) run only when asked for by
    name (`-m clean_clone`, as CI does), whatever other -m selection is given (`-m "not slow"` included)."""
    if "clean_clone" in str(config.getoption("markexpr") or ""):
        return
    drop = [item for item in items if item.get_closest_marker("clean_clone")]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [item for item in items if not item.get_closest_marker("clean_clone")]


@pytest.fixture(scope="session")
def openai_server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as srv:
        yield srv


@pytest.fixture()
def llm(openai_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIServer]:
    """The test server, reset (no rules, no latency, all methods accepted) with the API key in the env."""
    openai_server.reset()
    openai_server.configure(latency=0.0, json_schema=True, tools=True)
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

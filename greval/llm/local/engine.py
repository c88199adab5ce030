"""Which engine serves the local judge: llama.cpp's server from the ``xllamacpp`` wheel (installed by pip,
prebuilt, no compiler) when it is installed, else ``llama-server`` built from source once
(:mod:`greval.llm.local.build`): the fallback for platforms without a wheel.

``$GREVAL_LLAMA_SERVER`` (a llama-server binary) and ``$GREVAL_LLAMA_ENGINE`` (``wheel``, ``build``; default
``auto``) choose otherwise. Both engines run llama.cpp's own server with the same settings (:class:`Launch`), so
the judge is the model file, identified by its content (:func:`greval.llm.gguf.model_identity`), whichever runs
it; scripts/bench_local_engine.py measures the two side by side (speed, slots, schema, log-probabilities,
the quick start's verdicts).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from greval.llm.local.build import (
    ENV_SERVER,
    LLAMA_CPP_PYTHON_VERSION,
    ensure_llama_server,
    env_override,
    find_llama_server,
    say,
)
from greval.llm.local.common import LocalJudgeError

__all__ = [
    "ENV_ENGINE",
    "WHEEL_PACKAGE",
    "Engine",
    "Launch",
    "engine_choice",
    "ensure_engine",
    "find_engine",
    "wheel_version",
    "why_build",
]

ENV_ENGINE = "GREVAL_LLAMA_ENGINE"
WHEEL_PACKAGE = "xllamacpp"
CHOICES = ("auto", "wheel", "build")
#: The script the wheel engine runs as its server process (imports nothing of greval).
WHEEL_MAIN = Path(__file__).with_name("xllamacpp_main.py")


@dataclass(frozen=True)
class Launch:
    """How one local judge server is started, whichever engine runs it. ``ctx_total`` is split over the
    ``parallel`` slots (each its own part: no unified cache)."""

    model: str
    alias: str
    host: str
    port: int
    threads: int
    parallel: int
    ctx_total: int

    def flags(self) -> list[str]:
        """llama-server's command line for these settings."""
        return [
            "--model", self.model,
            "--alias", self.alias,
            "--host", self.host,
            "--port", str(self.port),
            "--threads", str(self.threads),
            "--threads-batch", str(self.threads),
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.ctx_total),
            "--no-kv-unified",
            "--jinja",
            "--no-webui",
            "--offline",
        ]  # fmt: skip


@dataclass(frozen=True)
class Engine:
    """What runs the server: the xllamacpp wheel (``binary`` None), greval's own build of llama-server, or a
    llama-server binary given to it. ``label`` says which, for the user."""

    kind: Literal["wheel", "build", "binary"]
    label: str
    binary: Path | None = None

    def command(self, launch: Launch, extra_args: Sequence[str] = ()) -> list[str]:
        """The server process's command line."""
        if self.kind == "wheel":
            if extra_args:
                raise LocalJudgeError(
                    f"extra llama-server arguments need a llama-server binary ({ENV_SERVER}, or {ENV_ENGINE}=build), "
                    f"not the {WHEEL_PACKAGE} wheel"
                )
            # -P: the script's folder (this package's modules) stays off the child's import path
            return [sys.executable, "-P", str(WHEEL_MAIN), json.dumps(asdict(launch))]
        assert self.binary is not None
        return [str(self.binary), *launch.flags(), *extra_args]


def engine_choice() -> str:
    """``$GREVAL_LLAMA_ENGINE``: auto (the wheel if installed, else a build), wheel, or build."""
    value = os.environ.get(ENV_ENGINE, "").strip().lower() or "auto"
    if value not in CHOICES:
        raise LocalJudgeError(f"{ENV_ENGINE} must be one of {', '.join(CHOICES)}; got {value!r}")
    return value


def wheel_version() -> str | None:
    """The installed xllamacpp's version, found without importing it (None: not installed here)."""
    if importlib.util.find_spec(WHEEL_PACKAGE) is None:
        return None
    try:
        return importlib.metadata.version(WHEEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "?"  # importable (from a path) without its metadata


def _built(binary: Path) -> Engine:
    return Engine("build", f"llama-server built from llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}", binary)


def find_engine() -> Engine | None:
    """The engine to serve with, without building anything; None when only a build would give one."""
    override = env_override()
    if override is not None:
        return Engine("binary", f"llama-server from {ENV_SERVER}", override)
    choice = engine_choice()
    if choice != "build":
        version = wheel_version()
        if version is not None:
            return Engine("wheel", f"{WHEEL_PACKAGE} {version} (prebuilt wheel)")
        if choice == "wheel":
            raise LocalJudgeError(
                f"{ENV_ENGINE}=wheel, but {WHEEL_PACKAGE} is not installed: pip install {WHEEL_PACKAGE}"
            )
    binary = find_llama_server()
    return _built(binary) if binary is not None else None


def ensure_engine(progress: bool = True) -> Engine:
    """The engine to serve with, building llama-server from source first when there is no other (said in one
    line: the fallback for platforms without an xllamacpp wheel)."""
    found = find_engine()
    if found is not None:
        return found
    if progress:
        say(f"{why_build()}: building llama-server from source instead")
    return _built(ensure_llama_server(progress=progress))


def why_build() -> str:
    """Why serving the local judge would build llama-server (when :func:`find_engine` found nothing), in words."""
    if engine_choice() == "build":
        return f"{ENV_ENGINE}=build"
    return f"no prebuilt engine is installed (the {WHEEL_PACKAGE} wheel: pip install {WHEEL_PACKAGE}, where it has one)"

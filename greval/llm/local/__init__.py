"""The embedded local judge: llama.cpp's server on a small GGUF model, so greval works offline.

``engine`` chooses what runs the server — the ``xllamacpp`` wheel pip installs (prebuilt), else ``llama-server``
built from source once (``build``, the fallback for platforms without a wheel) —, ``server`` runs the child
process, ``session`` serves the judge of a command (and resolves it: :func:`judge_session`); ``common`` holds
what they share. The GGUF model file and its identity are :mod:`greval.llm.gguf`'s (re-exported here), read by
the judge's config too.
"""

from greval.llm.gguf import LocalJudgeError, bundled_model_path, model_identity, resolve_local_model
from greval.llm.local.build import (
    BUILD_ESTIMATE,
    BUILD_FLAGS,
    ENV_SERVER,
    LLAMA_CPP_PYTHON_VERSION,
    build_info,
    ensure_llama_server,
    find_llama_server,
    llama_server_dir,
)
from greval.llm.local.engine import ENV_ENGINE, Engine, ensure_engine, find_engine, wheel_version
from greval.llm.local.server import DEFAULT_CTX_SIZE, LocalJudgeInfo, LocalJudgeServer, start_local_judge
from greval.llm.local.session import judge_session, serve_judge

__all__ = [
    "BUILD_ESTIMATE",
    "BUILD_FLAGS",
    "DEFAULT_CTX_SIZE",
    "ENV_ENGINE",
    "ENV_SERVER",
    "LLAMA_CPP_PYTHON_VERSION",
    "Engine",
    "LocalJudgeError",
    "LocalJudgeInfo",
    "LocalJudgeServer",
    "build_info",
    "bundled_model_path",
    "ensure_engine",
    "ensure_llama_server",
    "find_engine",
    "find_llama_server",
    "judge_session",
    "llama_server_dir",
    "model_identity",
    "resolve_local_model",
    "serve_judge",
    "start_local_judge",
    "wheel_version",
]

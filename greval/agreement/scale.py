"""A spec's scale in the agreement stage's terms: what a run's trial, reliability and Results ask of a spec before
they read any label, kept apart from :mod:`greval.agreement.from_store` (which reads a store into a pandas frame) so
they import it at the top without loading pandas."""

from __future__ import annotations

from greval.agreement.models import AgreementScale
from greval.spec import CategoricalScale, Spec


def agreement_scale(spec: Spec) -> AgreementScale:
    """The spec's scale in the agreement module's terms (ordered labels there run low → high)."""
    if isinstance(spec.scale, CategoricalScale):
        names = spec.scale.names
        labels = list(reversed(names)) if spec.scale.ordered else list(names)
        return AgreementScale(kind="categorical", labels=labels, ordered=spec.scale.ordered, scores=spec.scale.scores())
    return AgreementScale(kind="value", min=spec.scale.min, max=spec.scale.max)

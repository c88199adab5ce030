"""Gold labels and reviewer quality (issue 43): when several people labelled the same items, which label is an
item's truth (`estimate`: majority, Dawid–Skene, MACE, adjudicated, one annotator's), and how each person — and
the judge beside them, on the same items — agrees with it (`quality`)."""

from greval.agreement.gold.estimate import Answers, Gold, estimate_gold, label_model

__all__ = ["Answers", "Gold", "estimate_gold", "label_model"]

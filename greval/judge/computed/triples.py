"""Knowledge-graph triples: each triple of a record (a list, or ``SOURCE --[relation]--> TARGET`` text)
looked up in the user's relationship table (read and hashed by :class:`greval.spec.computed.TripleSpec`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, units_of
from greval.spec.computed import RelationshipTable, TripleParams, match_key
from greval.types import ItemVerdict

_ARROW = re.compile(r"(?P<s>[^\n\[\]]+?)\s*--\[(?P<p>[^\]]+)\]-->\s*(?P<o>[^\n,;]+)")


def parse_arrow_triples(text: str) -> list[dict[str, str]]:
    """Triples written as ``SOURCE --[relation]--> TARGET`` (one per line or separated by , / ;)."""
    out = []
    for i, m in enumerate(_ARROW.finditer(text), start=1):
        s = re.sub(r"^[\s\-*•\d.)]+", "", m.group("s")).strip()  # list bullets and numbering
        out.append({"id": f"t{i}", "subject": s, "predicate": m.group("p").strip(), "object": m.group("o").strip()})
    return out


def triple_validity(
    p: TripleParams, table: RelationshipTable, data: Mapping[str, Any]
) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Share of a record's triples found in the relationship table."""
    value = data.get(p.field)
    triples: list[Mapping[str, Any]]
    if isinstance(value, str):
        triples = list(parse_arrow_triples(value))
    elif isinstance(value, list):
        triples = [t for t in value if isinstance(t, Mapping)]
    else:
        raise ComputeError(f"{p.field}: expected triples or text, got {type(value).__name__}")
    items: list[ItemVerdict] = []
    found = 0
    for i, t in enumerate(triples, start=1):
        s, r, o = (str(t.get(k, "")) for k in ("subject", "predicate", "object"))
        key_pair = (match_key(s), match_key(o))
        if p.relation_column:
            ok = (key_pair[0], match_key(r), key_pair[1]) in table.triples
            why = (
                "in the table"
                if ok
                else ("pair in the table with another relation" if key_pair in table.pairs else "not in the table")
            )
        else:
            ok = key_pair in table.pairs
            why = "pair in the table" if ok else "pair not in the table"
        found += ok
        items.append(
            ItemVerdict(
                item_id=f"triple:{t.get('id', i)}",
                label="valid" if ok else "invalid",
                score=1.0 if ok else 0.0,
                reason=f"{s} --[{r}]--> {o}: {why}",
            )
        )
    share = found / len(triples) if triples else None
    reason = f"{found}/{len(triples)} triples found in {table.path.name}" if triples else "no triples to check"
    outputs = {
        "triples": len(triples),
        "found": found,
        "share": share,
        "table_rows": table.rows,
        "table_sha256": table.sha256,
        "missing": [it.reason for it in items if it.label == "invalid"][:20],
        "units": units_of(share, len(triples)),
    }
    return [record_verdict(share, reason), *items], outputs

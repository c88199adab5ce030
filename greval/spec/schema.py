"""The JSON Schema of spec files, for editors to validate against (``greval spec schema``)."""

from __future__ import annotations

from typing import Any

from greval.spec.kinds import all_kinds

#: The first line of a spec file written by greval (``greval spec new``): editors with the YAML extension
#: validate the file against the schema ``greval spec schema`` writes.
SCHEMA_HEADER = "# yaml-language-server: $schema={ref}"
DEFAULT_SCHEMA_REF = "./greval-spec.schema.json"


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema for spec files (one spec, a list, or {specs: [...]}), for editors to validate against."""
    defs: dict[str, Any] = {}
    variants = []
    for kind, cls in all_kinds().items():
        # Each kind's sub-models get their own namespace: two kinds may both define a "Label".
        one = cls.model_json_schema(mode="validation", ref_template=f"#/$defs/{kind}__{{model}}")
        defs.update({f"{kind}__{name}": body for name, body in one.pop("$defs", {}).items()})
        title = f"{kind.capitalize()}Spec"
        if kind == "judge" and "kind" in one.get("required", []):  # `kind` may be left out for judge specs
            one["required"].remove("kind")
        defs[title] = one
        variants.append({"$ref": f"#/$defs/{title}"})
    defs["Spec"] = {"anyOf": variants}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "greval metric spec file",
        "description": "One greval metric spec, a list of specs, or {specs: [...]}.",
        "anyOf": [
            {"$ref": "#/$defs/Spec"},
            {"type": "array", "items": {"$ref": "#/$defs/Spec"}},
            {
                "type": "object",
                "properties": {"specs": {"type": "array", "items": {"$ref": "#/$defs/Spec"}}},
                "required": ["specs"],
                "additionalProperties": False,
            },
        ],
        "$defs": defs,
    }

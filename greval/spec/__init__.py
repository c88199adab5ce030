"""① Metric specs: the YAML a team writes to define a metric, validated into typed models.

``model.py`` holds the judge spec and the parts every kind shares, ``kinds.py`` the kind table,
``computed.py`` and ``pipeline.py`` the other kinds' declarations, ``load.py`` reading files and references
(``yaml_reader.py`` the safe YAML loader, ``order.py`` dependency order) and ``schema.py`` the JSON Schema.
Every error names the file, the field path and the problem.
"""

from __future__ import annotations

from greval.spec.kinds import BUILTIN_KINDS, SPEC_KINDS, register_kind
from greval.spec.load import bundled_specs, load_spec, load_spec_file, parse_spec, resolve_specs
from greval.spec.model import (
    IDENT,
    ITEM_FIELDS,
    ITEM_SOURCES,
    STANDARD_INPUTS,
    BaseSpec,
    CategoricalScale,
    EachTarget,
    Example,
    Inputs,
    InputSpec,
    JudgeDefaults,
    Label,
    OutputSpec,
    Range,
    Scale,
    Spec,
    StrictModel,
    Target,
    ValueScale,
    compact_ranges,
    labels_shorthand,
)
from greval.spec.order import dependency_levels, order_specs, with_dependencies
from greval.spec.schema import DEFAULT_SCHEMA_REF, SCHEMA_HEADER, spec_json_schema
from greval.spec.yaml_reader import RefusedYAML, read_yaml, yaml_mark

__all__ = [
    "BUILTIN_KINDS",
    "DEFAULT_SCHEMA_REF",
    "IDENT",
    "ITEM_FIELDS",
    "ITEM_SOURCES",
    "SCHEMA_HEADER",
    "SPEC_KINDS",
    "STANDARD_INPUTS",
    "BaseSpec",
    "CategoricalScale",
    "EachTarget",
    "Example",
    "InputSpec",
    "Inputs",
    "JudgeDefaults",
    "Label",
    "OutputSpec",
    "Range",
    "RefusedYAML",
    "Scale",
    "Spec",
    "StrictModel",
    "Target",
    "ValueScale",
    "bundled_specs",
    "compact_ranges",
    "dependency_levels",
    "labels_shorthand",
    "load_spec",
    "load_spec_file",
    "order_specs",
    "parse_spec",
    "read_yaml",
    "register_kind",
    "resolve_specs",
    "spec_json_schema",
    "with_dependencies",
    "yaml_mark",
]

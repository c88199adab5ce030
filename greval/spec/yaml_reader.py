"""Reading a spec file's YAML safely: duplicate keys, alias bombs and too-deep nesting are refused while
loading, with the line and column, before anything is validated."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from greval.errors import GrevalError

#: What one spec file may hold once its aliases are expanded, so a hostile file fails in milliseconds
#: instead of exhausting memory: real specs are a few hundred values deep in single digits.
MAX_DEPTH = 100
MAX_VALUES = 200_000
MAX_CHARS = 20_000_000

_SURROGATE = re.compile("[\ud800-\udfff]")


class RefusedYAML(GrevalError, yaml.MarkedYAMLError):
    """Well-formed YAML that greval refuses (duplicate key, alias bomb, too deep): not a syntax error."""


class _SpecLoader(yaml.SafeLoader):
    """A SafeLoader that refuses, while loading, what would silently lose data or exhaust memory.

    Duplicate keys (YAML says last wins: a typo would silently drop a field), lone surrogate escapes (not
    text; the store could not write them), nesting deeper than MAX_DEPTH (the composer recurses) and
    documents whose aliases expand past MAX_VALUES / MAX_CHARS ("billion laughs": constructing is cheap, as
    aliases share objects, but validating, hashing or prompting walks every expanded copy).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, characters), once composed

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        start: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._aliases += 1
            if node is not None and id(node) not in self._sizes:
                raise RefusedYAML(
                    problem=f"alias *{event.anchor} refers to a collection that holds it (recursive alias)",
                    problem_mark=start,
                )
            return node
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise RefusedYAML(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=start)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._measure(node, start)
        return node

    def _measure(self, node: Node, mark: yaml.Mark) -> None:
        if isinstance(node, ScalarNode):
            size = (1, len(node.value))
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            parts = [self._sizes.get(id(c), (1, 0)) for c in children]
            size = (1 + sum(p[0] for p in parts), sum(p[1] for p in parts))
        self._sizes[id(node)] = size
        if size[0] > MAX_VALUES or size[1] > MAX_CHARS:
            what = f"{MAX_VALUES:,} values" if size[0] > MAX_VALUES else f"{MAX_CHARS:,} characters"
            how = f" through its {self._aliases:,} aliases (an alias bomb?)" if self._aliases else ""
            raise RefusedYAML(problem=f"expands to more than {what}{how}", problem_mark=mark)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:  # e.g. `!!int x`, a 5000-digit int
            raise RefusedYAML(
                problem=f"cannot read this {node.tag.rsplit(':', 1)[-1]} value: {exc}", problem_mark=node.start_mark
            ) from None

    def construct_scalar(self, node: ScalarNode | MappingNode) -> str:
        value = super().construct_scalar(node)
        if isinstance(value, str) and _SURROGATE.search(value):
            raise RefusedYAML(
                problem="a lone UTF-16 surrogate escape (\\ud800-\\udfff) is not a character; write the character",
                problem_mark=node.start_mark,
            )
        return value

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value if isinstance(node, MappingNode) else []:  # else the base class objects
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if first is not None:
                raise RefusedYAML(
                    problem=f"duplicate key {key!r} (first at line {first.line + 1})", problem_mark=key_node.start_mark
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def read_yaml(text: str) -> Any:
    loader = _SpecLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_mark(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""

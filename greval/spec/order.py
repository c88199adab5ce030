"""Dependency order of specs (``depends_on``): a topological sort, cycles reported with their loop, and the
levels of specs that can run concurrently."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from greval.errors import GrevalError, SpecError
from greval.spec.model import BaseSpec


def field_at(where: str, path: str) -> str:
    """A field path inside a file: ``[1]`` (the spec's index in a list file) joined with ``depends_on``."""
    return ".".join(p for p in (where, path) if p).replace(".[", "[")


class Cycle(GrevalError):
    """A dependency cycle: ``root`` is where the search started, ``path`` the loop (first name repeated)."""

    def __init__(self, root: str, path: list[str]) -> None:
        super().__init__(" -> ".join(path))
        self.root = root
        self.path = path


def topological(roots: Sequence[str], deps: Callable[[str], Sequence[str]]) -> list[str]:
    """Depth-first post-order from ``roots`` (dependencies first, in the order given).

    Iterative, so a long chain of specs in a hostile file cannot exhaust the interpreter's stack.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    order: list[str] = []
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(deps(root)))]
        while stack:
            name, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                stack.pop()
                state[name] = 2
                order.append(name)
            elif state.get(nxt) == 1:
                trail = [n for n, _ in stack]
                raise Cycle(root, [*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(deps(nxt))))
    return order


def order_specs(
    specs: Sequence[BaseSpec],
    *,
    sources: Mapping[str, tuple[str, str]] | None = None,
    missing_ok: bool = False,
) -> list[BaseSpec]:
    """Dependency order (a topological sort); a cycle or a missing dependency is a SpecError.

    ``sources`` maps a spec's name to (file, where in the file) so an error names the file; without it the
    spec's name stands in. ``missing_ok`` orders the specs among themselves, ignoring dependencies not given.
    """
    by_name = {s.name: s for s in specs}

    def origin(name: str) -> tuple[str, str]:
        return (sources or {}).get(name, (name, ""))

    if not missing_ok:
        for s in specs:
            for i, d in enumerate(s.depends_on):
                if d not in by_name:
                    file, where = origin(s.name)
                    at = field_at(where, f"depends_on[{i}]" if sources else "depends_on")
                    raise SpecError(file, at, f"metric {d!r} is not among the specs being run")
    try:
        names = topological([s.name for s in specs], lambda n: [d for d in by_name[n].depends_on if d in by_name])
    except Cycle as cycle:
        file, where = origin(cycle.path[0])
        raise SpecError(file, field_at(where, "depends_on"), f"dependency cycle: {cycle}") from None
    return [by_name[n] for n in names]


def with_dependencies(names: Sequence[str], specs: Sequence[BaseSpec]) -> list[BaseSpec]:
    """The specs named and, transitively, those among ``specs`` they depend on, in dependency order; nothing
    that merely sits beside them (a dependency not in ``specs`` is left out: order_specs reports it)."""
    by_name = {s.name: s for s in specs}
    order = topological(list(names), lambda n: [d for d in by_name[n].depends_on if d in by_name])
    return [by_name[n] for n in order]


def dependency_levels(specs: Sequence[BaseSpec]) -> list[list[BaseSpec]]:
    """Groups of specs that can run concurrently: each level depends only on earlier levels."""
    level: dict[str, int] = {}
    for s in order_specs(specs):
        level[s.name] = 1 + max((level[d] for d in s.depends_on), default=-1)
    out: list[list[BaseSpec]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for s in order_specs(specs):
        out[level[s.name]].append(s)
    return out

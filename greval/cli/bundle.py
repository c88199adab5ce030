"""Click options that reach a command as one typed bundle: a command with many flags takes a few named
arguments (its option groups) instead of one parameter per flag, and each group's flags are turned into its
value in one place.

:func:`bundle` declares a group's flags together (they stand together in --help); :func:`gathered` collects
the flags named by a dataclass's fields wherever the command declares them, so commands that list a shared
group's flags in different places, or only some of them, still receive one value (greval.cli.bundles)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T")
D = TypeVar("D", bound="DataclassInstance")
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def bundle(name: str, build: Callable[..., T], *options: Decorator) -> Decorator:
    """Add ``options`` (click.option / click.argument decorators, in --help order) to a command; the command
    receives them as one keyword argument ``name``: ``build(**their values)``. ``build`` should not raise:
    a command checks the bundle where it reports errors."""

    def probe() -> None: ...

    for o in options:
        o(probe)
    dests = [p.name for p in getattr(probe, "__click_params__", []) if p.name]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {d: kwargs.pop(d) for d in dests}
            return f(*args, **{name: build(**values)}, **kwargs)

        wrapped: Callable[..., Any] = command
        for o in reversed(options):
            wrapped = o(wrapped)
        return wrapped

    return decorate


def gathered(name: str, kind: type[D]) -> Decorator:
    """Hand the command the flags whose names are fields of the dataclass ``kind`` as one keyword argument
    ``name``: ``kind(**their values)``. The flags stay declared where the command lists them in --help, and a
    command may have only some of them: a field without a flag keeps its default. Place it directly above the
    function, below every option (the values pass every other decorator's wrapper on their way)."""
    names = [f.name for f in dataclasses.fields(kind)]

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {n: kwargs.pop(n) for n in names if n in kwargs}
            return f(*args, **{name: kind(**values)}, **kwargs)

        return command

    return decorate

"""Click options that reach a command as one typed bundle: a command with many flags takes a few named
arguments (its option groups) instead of one parameter per flag, and each group's flags are turned into its
value in one place."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
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

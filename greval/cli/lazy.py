"""A click group whose subcommands are named in a table and imported only when used.

``greval --help`` lists every command from the table (name and short help) without importing a single
stage; a command's module is imported when that command runs or its own help is asked for. There is no
``except ImportError``: a module that cannot be imported fails loudly, with its traceback, when its
command is used (tests/test_cli_startup.py imports every entry and checks the table's short help against
the command's own).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, NamedTuple

import click


class Lazy(NamedTuple):
    """Where a subcommand lives (``"package.module:attribute"``) and its short help: the first sentence of
    its docstring, as click shows it in the parent's command list."""

    target: str
    short_help: str


class LazyGroup(click.Group):
    """A group whose subcommands come from ``lazy``, a table ``{name: Lazy(target, short_help)}``;
    commands added the usual way (``add_command``, ``@group.command``) work as well."""

    def __init__(self, *args: Any, lazy: Mapping[str, Lazy] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, Lazy] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            self.commands[cmd_name] = self.load(cmd_name)
        return self.commands.get(cmd_name)

    def load(self, name: str) -> click.Command:
        """Import the command ``name`` names in the table (errors propagate: nothing is hidden)."""
        target = self.lazy[name].target
        module, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is {type(command).__name__}, not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, but a command of the table is listed with the table's short help, unimported."""
        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        for name in names:
            if name in self.lazy:
                # click's own shortening, applied to the table's text (the docstring's first sentence)
                rows.append((name, click.Command(name, help=self.lazy[name].short_help).get_short_help_str(limit)))
                continue
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

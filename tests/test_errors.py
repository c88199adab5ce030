"""greval.errors: one-line user errors, and option fields named by stages, rendered as flags by the CLI."""

from __future__ import annotations

from click.testing import CliRunner

from greval.cli.flags import FLAGS, for_terminal
from greval.errors import UserError, option, render_options


def test_option_fields_render_as_flags_only_where_known() -> None:
    text = f"set {option('pair_by')} with {option('AgreementOptions.kind')}; {option('unknown_field')} stays"
    assert text == "set `pair_by` with `AgreementOptions.kind`; `unknown_field` stays"
    shown = render_options(text, {"pair_by": "--pair-by", "kind": "--kind"})
    assert shown == "set --pair-by with --kind; `unknown_field` stays"
    # A qualified entry wins over the bare field's.
    assert render_options(option("A.kind"), {"kind": "--kind", "A.kind": "--a-kind"}) == "--a-kind"


def test_user_error_stays_one_line() -> None:
    assert str(UserError("a\nb\x1b[31m")) == "a\\nb\\x1b[31m"


def test_the_flag_table_names_real_flags() -> None:
    """Every flag the table promises exists on some greval command (a renamed flag must not leave a stale
    hint behind)."""
    from greval.cli import main

    known: set[str] = set()
    ctx_names = list(main.list_commands(None))  # type: ignore[arg-type]

    def collect(cmd: object) -> None:
        for p in getattr(cmd, "params", []):
            known.update(o for o in getattr(p, "opts", []) if o.startswith("--"))
        for sub in getattr(cmd, "commands", {}).values():
            collect(sub)

    for name in ctx_names:
        collect(main.get_command(None, name))  # type: ignore[arg-type]
    assert CliRunner().invoke(main, ["--help"]).exit_code == 0
    missing = sorted({f.split()[0] for f in FLAGS.values()} - known)
    assert not missing, f"flags in cli/flags.py that no command has: {missing}"
    assert for_terminal("no field here") == "no field here"

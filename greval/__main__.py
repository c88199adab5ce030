"""``python -m greval`` and the ``greval`` command."""

import sys


def entry() -> None:
    """Import the command line, then run it; a Ctrl-C while it loads ends quietly (exit 130)."""
    try:
        from greval.cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    main()


if __name__ == "__main__":
    entry()

"""``python -m greval`` is the ``greval`` command."""

from greval.cli import main

main()

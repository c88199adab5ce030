"""`python -m greval.agreement FILE ...` until the top-level `greval` CLI registers the command."""

from greval.agreement.cli import agreement

if __name__ == "__main__":
    agreement()

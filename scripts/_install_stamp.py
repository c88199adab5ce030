"""Whether scripts/setup.sh may skip a pip step: ``$PY -I scripts/_install_stamp.py check PART WHAT [WHAT…]`` or
``… mark PART WHAT``.

``mark`` (after pip succeeded) writes a stamp into the environment (``sys.prefix``): this checkout's path, a hash
of its pyproject.toml and ``WHAT`` (the requirements the step installs). ``check`` exits 0 when that stamp matches
the checkout as it is now with one of the ``WHAT``s given (the quick start's set, or the tests' larger one that
holds it) and greval imports from this checkout (an editable install of it), else 1: a second quick start no
longer spends 17 of its 30 s reinstalling what is there. ``-I`` keeps the current directory and PYTHONPATH out of
the import. No greval import at module level: the first setup runs this before greval exists.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path


def _stamp(part: str) -> Path:
    return Path(sys.prefix) / f".greval-setup-{part}"


def _want(checkout: Path, what: str) -> str:
    digest = hashlib.sha256((checkout / "pyproject.toml").read_bytes()).hexdigest()
    return f"{checkout}\n{digest}\n{what}\n"


def _imports_from(checkout: Path) -> bool:
    try:
        import greval
    except ImportError:
        return False
    return Path(greval.__file__).resolve().parents[1] == checkout


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("check", "mark") or (argv[0] == "mark" and len(argv) != 3):
        print("usage: _install_stamp.py check PART WHAT [WHAT…] | mark PART WHAT", file=sys.stderr)
        return 2
    action, part, *whats = argv
    checkout = Path.cwd().resolve()
    if action == "mark":
        _stamp(part).write_text(_want(checkout, whats[0]), encoding="utf-8")
        return 0
    stamp = _stamp(part)
    text = stamp.read_text(encoding="utf-8") if stamp.is_file() else None
    same = any(text == _want(checkout, what) for what in whats)
    return 0 if same and _imports_from(checkout) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

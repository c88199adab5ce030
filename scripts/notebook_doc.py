"""Run docs/notebooks.md's code as a notebook in a real Jupyter kernel (nbclient) and write what each cell
printed under it, so the outputs in the doc are the code's own.

    python scripts/notebook_doc.py            # rewrite the doc's outputs
    python scripts/notebook_doc.py --check    # exit 1 when a fresh run prints something else

The judge is greval's local test server (greval.testing, the `testing` extra): deterministic, offline, and
not a real judge — the doc says so. tests/test_notebooks.py runs the same cells the same way.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "notebooks.md"

#: A code cell, and the output block right after it (when it printed something).
CELL = re.compile(r"```python\n(?P<code>.*?)```\n(?:\n```text\n(?P<out>.*?)```\n)?", re.S)

#: The judge the doc's cells use (GREVAL_JUDGE): the test server answers for any model name.
JUDGE = "openai:gpt-4o-mini"


def cells(text: str) -> list[tuple[str, str | None]]:
    """(code, its printed output as the doc shows it, or None) for every python block of the doc."""
    return [(m["code"], m["out"]) for m in CELL.finditer(text)]


def printed(cell: Mapping[str, Any]) -> str:
    """What a notebook cell printed: its stdout and its result's plain text (display data — the progress
    bar — and stderr are left out: they hold timings)."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream" and out["name"] == "stdout":
            parts.append(out["text"])
        elif out["output_type"] == "execute_result":
            parts.append(out["data"].get("text/plain", "") + "\n")
        elif out["output_type"] == "error":
            raise RuntimeError(f"cell failed: {out['ename']}: {out['evalue']}\n{cell['source']}")
    return "".join(parts)


def execute(codes: Sequence[str], env: Mapping[str, str], cwd: Path, timeout: int = 600) -> Any:
    """The cells run in order in a fresh python3 kernel (its environment ``env``): the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in codes])
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=False)
    client.execute(env=dict(env), cwd=str(cwd))
    return nb


def kernel_env(base_url: str, home: Path) -> dict[str, str]:
    """The kernel's environment: the test server as the OpenAI-compatible judge, greval's data in ``home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_"))}
    env |= {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test", "GREVAL_JUDGE": JUDGE}
    env |= {"GREVAL_HOME": str(home), "PYTHONPATH": str(ROOT)}
    return env


def render(text: str, outputs: Sequence[str]) -> str:
    """The doc with each cell's output block replaced by ``outputs`` (none for a cell that printed nothing)."""
    found = iter(outputs)

    def cell(m: re.Match[str]) -> str:
        out = next(found)
        return f"```python\n{m['code']}```\n" + (f"\n```text\n{out}```\n" if out else "")

    return CELL.sub(cell, text)


def run_doc(base_url: str) -> tuple[str, Any]:
    """(the doc with fresh outputs, the executed notebook)."""
    text = DOC.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        nb = execute([c for c, _ in cells(text)], kernel_env(base_url, Path(tmp) / "home"), Path(tmp))
    return render(text, [printed(c) for c in nb.cells]), nb


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    from greval.testing.openai_server import OpenAIServer

    with OpenAIServer() as srv:
        fresh, _ = run_doc(srv.base_url)
    if args.check:
        same = fresh == DOC.read_text(encoding="utf-8")
        print("docs/notebooks.md: outputs are the code's" if same else "docs/notebooks.md: outputs differ")
        return 0 if same else 1
    DOC.write_text(fresh, encoding="utf-8")
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

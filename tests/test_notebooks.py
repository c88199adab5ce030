"""docs/notebooks.md run as a notebook in a real Jupyter kernel (nbclient, ipykernel), judged by the test
LLM server over HTTP: every cell runs inside the kernel's running event loop, prints what the doc shows under
it, and the evaluation cells draw a progress bar in their own output (issue 33)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def notebook_doc() -> ModuleType:
    """scripts/notebook_doc.py, the runner that wrote the doc's outputs."""
    spec = importlib.util.spec_from_file_location("notebook_doc", ROOT / "scripts" / "notebook_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["notebook_doc"] = module
    spec.loader.exec_module(module)
    return module


def test_the_notebook_walkthrough_runs_in_a_kernel_and_prints_what_the_doc_shows(llm: OpenAIServer) -> None:
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    doc = notebook_doc()
    text = doc.DOC.read_text(encoding="utf-8")
    fresh, nb = doc.run_doc(llm.base_url)
    shown = [out for _, out in doc.cells(text)]
    printed = [doc.printed(c) for c in nb.cells]
    for i, (want, got) in enumerate(zip(shown, printed, strict=True)):
        assert (want or "") == got, f"cell {i + 1} of docs/notebooks.md printed something else:\n{got}"
    assert fresh == text
    # the first evaluation's cell drew the notebook progress bar (display data, updated in place) to its end
    bars = [o for o in nb.cells[1].outputs if o["output_type"] == "display_data" and "text/html" in o["data"]]
    assert len(bars) == 1 and "<progress" in bars[0]["data"]["text/html"]
    assert bars[0]["data"]["text/plain"].startswith("judging 12/12")  # 6 records × 2 metrics
    assert llm.stats()["total"] > 0

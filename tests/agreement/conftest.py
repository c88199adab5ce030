"""Shared by the agreement tests: tolerances, small frames, the CLI as JSON, a judged store with human labels, and
the paths of the docs and the shared data."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from click.testing import CliRunner
from hypothesis import HealthCheck, settings

from greval.agreement import AgreementOptions, AgreementReport
from greval.cli.agreement import agreement
from tests.conftest import SHARED_DATA

TOL = 1e-12
NO_BOOT = AgreementOptions(bootstrap=0)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DATA = SHARED_DATA  # ../shared/data beside the checkout, or $GREVAL_SHARED_DATA
UNIEVAL_README = DATA / "README.md"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "agreement.md"
ROOT = Path(__file__).resolve().parents[2]


def frame(h: list[object], j: list[object], **cols: list[object]) -> pd.DataFrame:
    return pd.DataFrame({"item": [f"i{n}" for n in range(len(h))], "judge": j, "human": h, **cols})


def value(report: AgreementReport, name: str) -> float | None:
    return report.metrics[name].value


def close(a: float | None, b: float) -> bool:
    if a is None:
        return not math.isfinite(b)
    return abs(a - b) <= TOL


def no_nan(report: AgreementReport) -> None:
    text = report.model_dump_json()
    assert "NaN" not in text and "Infinity" not in text


def cli_json(tmp_path: Path, args: list[str]) -> dict[str, Any]:
    out = tmp_path / "out.json"
    res = CliRunner().invoke(agreement, [*args, "--json", str(out)])
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(out.read_text())
    data["_output"] = res.output
    return data


def grouped_frame(seed: int, n: int = 60, k: int = 3, groups: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    h = rng.integers(0, k, n)
    j = np.where(rng.random(n) < 0.7, h, rng.integers(0, k, n))
    return frame([f"L{x}" for x in h], [f"L{x}" for x in j], group=[f"g{x}" for x in rng.integers(0, groups, n)])


def judged_store(llm: Any, path: Path, versions: int = 1) -> list[dict[str, Any]]:
    """A store with answer_alignment verdicts (one or two spec versions) and one annotator's labels."""
    from greval.dataset.records import Record
    from greval.llm.config import JudgeConfig
    from greval.llm.retry import RetryPolicy
    from greval.runner.driver import run
    from greval.runner.options import RunOptions
    from greval.spec import resolve_specs
    from greval.store.store import Store

    recs = [
        Record.from_mapping(
            {
                "id": f"r{i}",
                "question": f"q{i}",
                "expected_answer": "e",
                "answer": f"a{i}",
                "chunks": [f"c{i}.{k}" for k in range(3)],
            }
        )
        for i in range(16)
    ]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url)
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    opts = RunOptions(retry=RetryPolicy(base_delay=0.01))
    labels = ["Correct", "Acceptable", "Not Acceptable", "Incorrect"]
    with Store(path) as st:
        run(specs, recs, st, cfg, options=opts)
        if versions == 2:
            run([specs[0].model_copy(update={"steps": [*specs[0].steps, "Be strict."]})], recs, st, cfg, options=opts)
        rows = st.query("SELECT DISTINCT record_hash, record_id FROM verdicts WHERE spec_name='answer_alignment'")
        human = [
            {
                "spec_name": "answer_alignment",
                "record_hash": r["record_hash"],
                "item_id": "",
                "annotator": "ann",
                "record_id": r["record_id"],
                "label": labels[i % 4],
                "status": "submitted",
            }
            for i, r in enumerate(rows)
        ]
        chunk_rows = st.query("SELECT record_hash, record_id, item_id FROM verdicts WHERE spec_name='chunk_evaluation'")
        human += [
            {
                "spec_name": "chunk_evaluation",
                "record_hash": r["record_hash"],
                "item_id": r["item_id"],
                "annotator": "ann",
                "record_id": r["record_id"],
                "label": "Relevant" if i % 2 else "Irrelevant",
                "status": "submitted",
            }
            for i, r in enumerate(chunk_rows)
        ]
        st.put_human_labels(human)
    return human

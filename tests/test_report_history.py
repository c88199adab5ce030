"""A metric's history (greval/report/history.py, `greval history`, its page): five runs of two versions with one
promotion; every production period and every interval recomputed here, independently, and the page opened in
Chromium."""

from __future__ import annotations

import itertools
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.metrics import cohen_kappa_score

from greval.agreement.bootstrap import RESAMPLES
from greval.cli import main
from greval.report.history import build_history
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import Spec, parse_spec
from greval.store.store import Store
from tests.align import scripted as sc

N = 24
CHROMIUM = "/usr/bin/chromium"


def _spec(step: str) -> Spec:
    """The scripted metric with ordered labels (yes scores 1, no 0: a dataset score) and its own steps."""
    base = sc.spec().model_dump(mode="json", exclude_none=True)
    scale = {**base["scale"], "ordered": True}
    spec = parse_spec({**base, "scale": scale, "steps": [step, "Decide."]})
    assert isinstance(spec, Spec)
    return spec


def _percentile(stat: Any, n: int, seed: int = 0) -> tuple[float, float] | None:
    """The percentile bootstrap written out, as greval draws it: ``RESAMPLES`` draws of n records (sorted by
    id) with replacement from numpy's default_rng(seed), the statistic of each (undefined ones left out)."""
    rng = np.random.default_rng(seed)
    values = [v for _ in range(RESAMPLES) if (v := stat(rng.integers(0, n, size=n))) is not None]
    if len(values) < max(2, RESAMPLES // 2):
        return None
    low, high = np.quantile(values, [0.025, 0.975])
    return float(low), float(high)


@pytest.fixture()
def five_runs(llm: Any, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """Runs 1-2 of v1 (the first run makes it production), run 3 of v2 (not promoted), then v2 promoted, run 4 of
    v2 and run 5 of v1; people labelled every record."""
    llm.script(sc.rules(N))
    records = sc.records(N)
    cfg = sc.judge(llm.base_url)
    v1, v2 = _spec("Read the answer."), _spec("Read the answer twice.")
    path = tmp_path / "s.sqlite"
    with Store(path) as st:
        run([v1], records, st, cfg, options=RunOptions(dataset_name="week 1"))
        run([v1], records, st, cfg, options=RunOptions(dataset_name="week 2"))
        run([v2], records, st, cfg, options=RunOptions(dataset_name="week 2"))
        time.sleep(0.01)
        st.promote("supported", st.metric_version(f"supported@{v2.hash}").spec_key, "promote", note="clearer")
        run([v2], records, st, cfg, options=RunOptions(dataset_name="week 3"))
        run([v1], records, st, cfg, options=RunOptions(dataset_name="week 3"))
        st.put_human_labels(
            [
                {
                    "spec_name": "supported",
                    "record_id": r.id,
                    "record_hash": r.hash,
                    "item_id": "",
                    "annotator": "person",
                    "label": sc.truth(i),
                    "status": "submitted",
                }
                for i, r in enumerate(records)
            ]
        )
    return path, {"v1": v1.hash, "v2": v2.hash, "records": records}


def test_five_runs_of_two_versions_with_one_promotion(five_runs: tuple[Path, dict[str, Any]]) -> None:
    path, known = five_runs
    with Store(path) as st:
        h = build_history(st, "supported")
        runs = st.runs()
        labels: dict[str, dict[str, str]] = {}  # run id -> record id -> the judge's label, read from the verdicts
        for r in runs:
            key = next(m["spec_key"] for m in __import__("json").loads(r["summary"])["metrics"])
            rows = st.query("SELECT record_id, label FROM verdicts WHERE spec_key=?", (key,))
            labels[r["run_id"]] = {row["record_id"]: row["label"] for row in rows}
    v1, v2 = known["v1"], known["v2"]
    assert [p.spec_hash for p in h.runs] == [v1, v1, v2, v2, v1]
    assert [p.production for p in h.runs] == [True, True, False, True, False]
    assert [p.dataset_name for p in h.runs] == ["week 1", "week 2", "week 2", "week 3", "week 3"]
    assert [(p.spec_hash, p.source) for p in h.periods] == [(v1, "first run"), (v2, "promote")]
    assert h.periods[0].end == h.periods[1].start and h.periods[1].end is None
    assert h.runs[2].at < h.periods[1].start < h.runs[3].at
    truth = {r.id: sc.truth(i) for i, r in enumerate(known["records"])}
    ids = sorted(truth)
    for point in h.runs:
        judged = labels[point.run_id]
        scores = np.array([1.0 if judged[i] == "yes" else 0.0 for i in ids])
        assert point.score.mean == pytest.approx(scores.mean())
        ci = _percentile(lambda idx, scores=scores: float(scores[idx].mean()), len(ids))
        assert ci is not None and (point.score.ci_low, point.score.ci_high) == pytest.approx(ci)
        people = [truth[i] for i in ids]
        guessed = [judged[i] for i in ids]
        assert point.agreement is not None and point.agreement_figure == "cohen_kappa"
        assert point.agreement.value == pytest.approx(cohen_kappa_score(people, guessed))

        def kappa(idx: np.ndarray, people: list[str] = people, guessed: list[str] = guessed) -> float | None:
            a, b = [people[i] for i in idx], [guessed[i] for i in idx]
            if len(set(a) | set(b)) < 2:
                return None
            return float(cohen_kappa_score(a, b))

        ci = _percentile(kappa, len(ids))
        assert ci is not None and (point.agreement.ci_low, point.agreement.ci_high) == pytest.approx(ci)
    # a drop: a production run's interval wholly below the previous production run's
    prod = [p for p in h.runs if p.production]
    for before, now in itertools.pairwise(prod):
        assert now.score_drop == (now.score.ci_high is not None and now.score.ci_high < (before.score.ci_low or 0))


def test_the_command_prints_the_runs_and_writes_the_page(
    five_runs: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, known = five_runs
    page = tmp_path / "supported.history.html"
    res = CliRunner().invoke(main, ["history", "supported", "--store", str(path), "--html", str(page)])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert f"{known['v2'][:12]} (production)" in flat and "week 3" in flat
    assert f"production {known['v2'][:12]} from" in flat and "(promote) — clearer" in flat
    assert page.stat().st_mode & 0o777 == 0o600
    bad = CliRunner().invoke(main, ["history", "suported", "--store", str(path)])
    assert bad.exit_code == 2 and "did you mean 'supported'" in bad.output


@pytest.mark.browser
def test_the_trend_page_opens_from_disk_with_its_chart_and_every_run(
    five_runs: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip("chromium is not installed (CI installs it)")
    path, known = five_runs
    page = tmp_path / "h.html"
    assert CliRunner().invoke(main, ["history", "supported", "--store", str(path), "--html", str(page)]).exit_code == 0
    dom = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "supported: history" in dom and dom.count("<tr>") >= 1 + 5 + 1 + 2
    assert 'src="data:image/png;base64,' in dom  # the trend chart, embedded: it opens offline
    assert known["v1"][:12] in dom and known["v2"][:12] in dom and "clearer" in dom

"""Write the record explorer beside a report's index.html: the package's static page (index.html, app.js,
app.css) and the store's data files (greval.report.explorer.data)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greval.report.explorer.data import MetricData, write_data
from greval.report.explorer.links import FOLDER
from greval.report.models import StoreReport
from greval.report.store_report import metric_groups
from greval.store.labels import HumanLabel
from greval.store.store import Store

STATIC = Path(__file__).parent / "static"


def copy_static(folder: Path) -> None:
    """The explorer's page and script (the package's own files: nothing is fetched from a network)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("index.html", "app.js", "app.css"):
        shutil.copyfile(STATIC / name, folder / name)


def _by_record(rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["record_id"], r["record_hash"]), []).append(r)
    return out


def _humans(labels: Sequence[HumanLabel]) -> dict[tuple[str, str], list[HumanLabel]]:
    out: dict[tuple[str, str], list[HumanLabel]] = {}
    for h in labels:
        out.setdefault((h["record_id"], h["record_hash"]), []).append(h)
    return out


def write_explorer(rep: StoreReport, out_dir: Path) -> Path:
    """The explorer folder of ``rep`` (built from the same store, metrics and columns) under ``out_dir``;
    returns its index.html."""
    specs = list(dict.fromkeys(m.metric for m in rep.metrics))
    folder = out_dir / FOLDER
    if (folder / "data").exists():
        shutil.rmtree(folder / "data")  # a smaller store leaves no chunk of a bigger one behind
    copy_static(folder)
    with Store(rep.store) as st:
        items, data, found = metric_groups(st, rep.store, specs, rep.system_field, rep.group_column)
        metrics = []
        for row, (fig, spec, grp) in zip(rep.metrics, found, strict=True):
            mine = [r for r in items if r["spec_key"] == fig.spec_key and r["judge_key"] == fig.judge_key]
            humans = _humans(st.human_labels(spec.name, submitted=True))
            metrics.append(MetricData(row, spec, grp, _by_record(mine), humans))
    write_data(folder / "data", rep, metrics, data)
    return folder / "index.html"

"""Write the record explorer beside a report's index.html: the package's static page (index.html, app.js,
app.css) and the store's data files (greval.report.explorer.data)."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greval.errors import UserError
from greval.llm.prices import load_prices, prices_path
from greval.paths import write_private
from greval.report.explorer.data import MetricData, Pricing, Where, write_data
from greval.report.explorer.links import FOLDER
from greval.report.models import MetricRow, StoreReport
from greval.report.store_report import metric_groups
from greval.spec import BaseSpec, Spec
from greval.store.labels import HumanLabel
from greval.store.store import Store

STATIC = Path(__file__).parent / "static"


def copy_static(folder: Path) -> None:
    """The explorer's page and script (the package's own files: nothing is fetched from a network)."""
    for name in ("index.html", "app.js", "app.css"):
        write_private(folder / name, (STATIC / name).read_bytes())


def pricing() -> Pricing:
    """The price table `greval results runs` and a run's summary price with (greval's list prices, the user's
    table over them); a table greval cannot read leaves the explorer without costs, saying why."""
    path = prices_path()
    try:
        table = load_prices()
    except UserError as exc:
        return Pricing(problem=str(exc))
    source = f"prices from {path} over greval's list" if path.is_file() else "greval's list prices"
    return Pricing(table, source=source)


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


def metric_data(
    st: Store, row: MetricRow, spec: BaseSpec, records: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]]
) -> MetricData:
    """What the explorer reads of one metric: its report row, spec, record rows, item and human rows."""
    mine = [r for r in items if r["spec_key"] == row.figures.spec_key and r["judge_key"] == row.figures.judge_key]
    humans = _humans(st.human_labels(spec.name, submitted=True))
    samples = st.unit_samples(row.figures.spec_key, row.figures.judge_key)
    calls = st.judgement_calls(row.figures.spec_key, row.figures.judge_key) if isinstance(spec, Spec) else {}
    return MetricData(row, spec, records, _by_record(mine), humans, samples, calls)


def write_explorer(rep: StoreReport, out_dir: Path) -> Path:
    """The explorer folder of ``rep`` (built from the same store, metrics and columns) under ``out_dir``;
    returns its index.html."""
    specs = list(dict.fromkeys(m.metric for m in rep.metrics))
    folder = out_dir / FOLDER
    if (folder / "data").exists():
        shutil.rmtree(folder / "data")  # a smaller store leaves no chunk of a bigger one behind
    copy_static(folder)
    with Store(rep.store) as st:
        items, data, found = metric_groups(
            st, rep.store, specs, rep.system_field, rep.group_column, all_versions=rep.all_versions
        )
        metrics = [
            metric_data(st, row, spec, grp, items) for row, (_, spec, grp) in zip(rep.metrics, found, strict=True)
        ]
    where = Where(rep.store, rep.system_column or "", rep.group_column or "")
    write_data(folder / "data", where, metrics, data, pricing=pricing())
    return folder / "index.html"


def write_comparison_explorer(built: Any, out_dir: Path) -> Path:
    """The explorer of a comparison (greval.report.compare.Built): side A's rows with side B's verdicts."""
    folder = out_dir / FOLDER
    if (folder / "data").exists():
        shutil.rmtree(folder / "data")
    copy_static(folder)
    comp = built.comparison
    where = Where(comp.store, "system", "", (comp.a, comp.b))
    write_data(folder / "data", where, built.metrics, built.data, built.paired, pricing())
    return folder / "index.html"

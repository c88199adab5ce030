"""The report adapts to each metric kind (issue 32): the quick start's report (one categorical metric without
label scores) and one report per metric kind of tests/report_stores.py show no empty panel and no all-dash
table; a metric whose labels have no scores is described by its label shares with CIs; the words people read
name labels, statistics and what was resampled."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.testing.openai_server import OpenAIServer
from tests.report_stores import KINDS, kinds_store

EMPTY_CELLS = {"—", "", "-"}


def _text(cell: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()


def emptiness(page: str) -> list[str]:
    """What on a report page has nothing to show: a panel without marks or image, a table whose body cells
    (after the first column) are all dashes or blank, an image-free figure. Empty list: nothing."""
    found = []
    for fig in re.findall(r"<figure[^>]*>.*?</figure>", page, flags=re.S):
        points = re.search(r"data-points=(\d+)", fig)
        if (points is not None and int(points.group(1)) == 0) or "<img" not in fig:
            found.append(f"panel: {fig[:120]}")
    for table in re.findall(r"<table>(.*?)</table>", page, flags=re.S):
        rows = re.findall(r"<tr>(.*?)</tr>", table, flags=re.S)[1:]
        cells = [_text(c) for r in rows for c in re.findall(r"<td[^>]*>(.*?)</td>", r, flags=re.S)[1:]]
        if not rows or all(c in EMPTY_CELLS for c in cells):
            found.append(f"table: {table[:160]}")
    return found


def _report(store: Path, out: Path, *extra: str) -> str:
    res = CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(out), "--bootstrap", "50", *extra])
    assert res.exit_code == 0, res.output
    return (out / "index.html").read_text()


@pytest.fixture(scope="module")
def kinds(openai_server: OpenAIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    openai_server.reset()
    openai_server.configure(latency=0.0, json_schema=True, tools=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("OPENAI_API_KEY", "sk-test")
    try:
        return kinds_store(openai_server, tmp_path_factory.mktemp("kinds") / "kinds.sqlite")
    finally:
        mp.undo()


def test_quickstart_report_has_no_empty_panel_or_all_dash_table(llm: OpenAIServer, tmp_path: Path) -> None:
    work = tmp_path / "ws"
    args = ["quickstart", "--dir", str(work), "--no-argilla", "--bootstrap", "50"]
    args += ["--judge", "openai:judge-test", "--base-url", llm.base_url]
    assert CliRunner().invoke(main, args).exit_code == 0
    page = _report(work / "greval.sqlite", tmp_path / "report")
    assert emptiness(page) == []
    # the categorical metric without label scores: its label shares with CIs, overall and per system
    shares = page.split("<h2 id=shares>", 1)[1].split("<h2", 1)[0]
    assert "Fully attributable [95% CI]" in shares and "Not fully attributable [95% CI]" in shares
    assert re.search(r"<td>0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]</td>", shares)
    assert shares.count("<tr>") == 1 + 1 + 4  # head, all records, four systems
    assert 'data-panel="system-shares-attribution"' in page and 'data-panel="shares"' in page
    assert "no metric has a score" not in page and ">no scores<" not in page
    # a store's agreement resamples records (no group was given): its notes say so
    agreement = (tmp_path / "report" / "attribution.agreement.html").read_text()
    assert "50 resamples of records (30)" in agreement and "resamples of groups" not in agreement


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_metric_kind_reports_without_empty_panels(kinds: Path, tmp_path: Path, kind: str) -> None:
    page = _report(kinds, tmp_path / kind, "--spec", KINDS[kind], "--group-column", "film")
    assert emptiness(page) == [], kind
    assert "Systems by" not in page  # a heading that names its field, not "Systems by system"


def test_every_kind_together_keeps_scales_apart(kinds: Path, tmp_path: Path) -> None:
    page = _report(kinds, tmp_path / "all")
    assert emptiness(page) == []
    titles = re.findall(r'<figure class=panel data-panel="([^"]+)"', page)
    # a 0–10 value scale and 0–1 scores never share an axis: one score panel per range
    assert "score-0–10" in titles and "score-0–1" in titles
    # the agreement column names its statistic; ordered labels are listed best first, as the spec lists them
    assert "Cohen&#x27;s κ" in page or "Cohen's κ" in page
    order = [page.index(f"{lab} [95% CI]") for lab in ("Relevant", "Indirectly relevant", "Irrelevant")]
    assert order == sorted(order)
    assert "label code" not in page


def test_palette_stays_apart_for_colour_blind_readers() -> None:
    """Every pair of the figures' colours stays clearly apart (CIE76 ΔE > 10) under protanopia, deuteranopia
    and tritanopia (Machado et al. 2009); a palette of two greys fails the same check."""
    from itertools import combinations

    from greval.report.palette import CATEGORICAL, OUTCOME, delta_e, rgb, simulate

    def closest(colours: tuple[str, ...]) -> float:
        return min(
            delta_e(simulate(a, d), simulate(b, d))
            for a, b in combinations(colours, 2)
            for d in ("protanopia", "deuteranopia", "tritanopia")
        )

    assert closest(CATEGORICAL) > 10 and closest(tuple(OUTCOME.values())) > 10
    assert closest(("#777777", "#7a7a7a")) < 10
    assert delta_e(rgb("#000000"), rgb("#ffffff")) > 99


def test_ordered_labels_are_listed_best_first_on_agreement_pages_and_the_terminal(kinds: Path, tmp_path: Path) -> None:
    """chunk_evaluation's ordered labels (Relevant, Indirectly relevant, Irrelevant in its spec) keep that order
    in the agreement page's tables and the terminal's, while the JSON keeps the stage's low → high coding."""
    out = tmp_path / "r"
    res = CliRunner().invoke(
        main,
        [
            "agreement",
            "--store",
            str(kinds),
            "--spec",
            KINDS["items"],
            "--html",
            str(out),
            "--json",
            str(out) + ".json",
        ],
    )
    assert res.exit_code == 0, res.output
    best_first = ["Relevant", "Indirectly relevant", "Irrelevant"]
    confusion = res.output.split("confusion (rows human, columns judge)", 1)[1]
    assert [confusion.index(f"│ {lab} ") for lab in best_first] == sorted(
        confusion.index(f"│ {lab} ") for lab in best_first
    )
    page = out.read_text()
    table = page.split("<table", 1)[1]
    rows = [re.sub(r"<[^>]+>", "", r).strip() for r in re.findall(r"<tr><td>([^<]*)</td>", page)]
    shown = [r for r in rows if r in best_first]
    assert shown[:3] == best_first, shown
    assert table and "Relevant" in page

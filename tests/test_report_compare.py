"""What a run's figures are called on every surface (issue 40, item 2): `greval report --compare` counts a record
whose score changed as changed, whatever the metric's kind (a computed metric's score is its verdict), and
`greval results runs` lists the dataset score each run's summary printed. Real runs of `rouge_l` (computed: no
judge needed) through the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from greval.cli import main
from greval.report.explorer.data import COLUMNS, changed
from greval.store.store import Store


def _data(path: Path, same: bool) -> Path:
    """Five records whose answer is the expected answer (ROUGE-L 1) or shares no word with it (0)."""
    rows = [
        {"id": f"r{i}", "question": f"q{i}?", "expected_answer": f"the film came out in 19{80 + i}"}
        | {"answer": f"the film came out in 19{80 + i}" if same else "nothing alike here"}
        for i in range(5)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _printed_score(output: str, metric: str) -> str:
    """The score cell of ``metric``'s row in the summary table `greval run` printed."""
    row = next(line for line in output.splitlines() if line.startswith(metric + " "))
    cells = [c.strip() for c in row.split("│")]
    return cells[6]  # metric, judged, reused, ok, not scored, distribution, score, tokens


def _run(data: Path, store: Path) -> tuple[str, str]:
    res = CliRunner().invoke(main, ["run", str(data), "-s", "rouge_l", "--store", str(store)], terminal_width=200)
    assert res.exit_code == 0, res.output
    with Store(store) as st:
        run_id = str(st.runs()[-1]["run_id"])
    return run_id, _printed_score(res.output, "rouge_l")


def _compare(store: Path, a: str, b: str, out: Path) -> tuple[dict[str, Any], str]:
    args = ["report", "--store", str(store), "--compare", a, b, "-o", str(out), "--bootstrap", "50"]
    res = CliRunner().invoke(main, args, terminal_width=200)
    assert res.exit_code == 0, res.output
    [m] = json.loads((out / "comparison.json").read_text())["metrics"]
    return m, res.output


def test_a_changed_score_is_a_changed_record_and_the_runs_list_shows_each_run_s_score(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite"
    first, printed_first = _run(_data(tmp_path / "same.jsonl", True), store)
    second, printed_second = _run(_data(tmp_path / "other.jsonl", False), store)
    assert (printed_first, printed_second) == ("1.000", "0.000")

    # `results runs`: each run's dataset score as its summary printed it (it listed "rouge_l: —")
    listed = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "1000"})
    assert listed.exit_code == 0, listed.output
    text = listed.output  # a table, or a card per run on a narrow console: each run's figures follow its id
    one, two = text[text.index(first) : text.index(second)], text[text.index(second) :]
    assert f"rouge_l: {printed_first}" in one and f"rouge_l: {printed_second}" in two

    # every score changed (1.000 -> 0.000): five changed records of five, on the page, the terminal, the explorer
    m, terminal = _compare(store, first, second, tmp_path / "cmp")
    assert (m["changed"], m["compared"]) == (5, 5)
    assert "5 of 5" in terminal
    assert "rouge_l: 5 changed verdict(s) of 5" in (tmp_path / "cmp" / "index.html").read_text()
    data = tmp_path / "cmp" / "explorer" / "data"
    rows = json.loads("[" + (data / "m0-0.js").read_text().removeprefix("GREVAL.rows(").removesuffix(");\n") + "]")[2]
    assert [r[-1] for r in rows] == ["changed"] * 5
    # a run against itself: nothing changed (the count is not "every record")
    m, _ = _compare(store, first, first, tmp_path / "self")
    assert (m["changed"], m["compared"]) == (0, 5)


def test_a_many_metric_whose_items_swapped_labels_changed() -> None:
    """The same item counts ("a ×1, b ×1") and score with the items' labels swapped is a change: the record's
    items are what the judge said."""
    col = COLUMNS.index
    row: list[Any] = [None] * len(COLUMNS)
    row[col("status")], row[col("verdict")], row[col("score")] = "ok", "a ×1, b ×1", 0.5
    a, b = list(row), list(row)
    a[col("items")] = [["k0", "a", "", "ok", None], ["k1", "b", "", "ok", None]]
    b[col("items")] = [["k0", "b", "", "ok", None], ["k1", "a", "", "ok", None]]
    assert changed(a, b) == "changed" and changed(a, list(a)) == "same" and changed(a, None) == ""
    c = list(a)
    c[col("score")] = 0.5 + 1e-12  # float noise is not a change; a score that moved is
    assert changed(a, c) == "same"
    c[col("score")] = 0.501
    assert changed(a, c) == "changed"

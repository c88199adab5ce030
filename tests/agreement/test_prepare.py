"""agreement/prepare/: the long frame read, reduced to one record per item and turned into aligned arrays —
each phase (validate, reduce_items, build) on its own, on inputs built by hand, then prepare as a whole."""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import krippendorff
import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn import metrics as skm

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from greval.agreement.prepare import MISSING, Reduced, Rows, build, prepare, reduce_items, validate
from greval.agreement.prepare.reduce import Item
from greval.cli.agreement import agreement
from greval.errors import DataError
from tests.agreement.conftest import DOCS, NO_BOOT, TOL, cli_json, close, frame, value

AB = AgreementScale(labels=["a", "b"])


def rows(**kw: Any) -> Rows:
    """Rows as validate would give them for items x, x, y (two people on x, one on y), built by hand."""
    base: dict[str, Any] = {
        "scale": AB,
        "policy": "as-wrong",
        "fill_code": None,
        "fill_value": None,
        "items": ["x", "x", "y"],
        "human_text": ["a", "b", "b"],
        "human": [0.0, 1.0, 1.0],
        "judge_text": ["a", "a", "zz"],
        "scores": None,
        "annotators": ["p", "q", "p"],
        "annotator_column": True,
        "groups": None,
    }
    return Rows(**(base | kw))


# ----------------------------------------------------------------------------------------------- validate


def test_validate_reads_every_row_on_the_scale_without_reducing() -> None:
    f = pd.DataFrame(
        {
            "item": [1, 1.0, "2", 3],
            "human": ["2", 1.0, None, " 2 "],
            "judge": [2.0, "1", "NA", ""],
            "group": ["g", "g", " ", "h"],
            "score": ["0.5", None, 1, "0.25"],
        }
    )
    r = validate(f, AgreementScale(), AgreementOptions(missing_values=["NA"]))
    assert r.scale.labels == ["1", "2"]  # inferred from the human answers, numeric order
    assert r.items == ["1", "1", "2", "3"]  # one entry per row: nothing reduced yet
    assert r.human_text == ["2", "1", None, "2"] and r.human == [1.0, 0.0, None, 1.0]
    assert r.judge_text == ["2", "1", None, None]
    assert r.scores == [0.5, None, 1.0, 0.25]
    assert r.groups == ["g", "g", None, "h"]
    # no annotator column: anonymous annotators numbered within each item, #0 for a row without an answer
    assert r.annotators == ["#1", "#2", "#0", "#1"] and not r.annotator_column
    assert r.has_judge and r.categorical and r.index == {"1": 0, "2": 1}


def test_validate_reads_the_fill_of_label_policies_and_optional_columns() -> None:
    f = pd.DataFrame({"item": ["x", "y"], "human": [1, 5], "judge": [2, "?"], "annotator": ["p", "q"]})
    r = validate(f, AgreementScale(kind="value", min=1, max=5), AgreementOptions(invalid="label:3"))
    assert (r.fill_code, r.fill_value) == (None, 3.0)
    assert r.human == [1.0, 5.0] and r.annotators == ["p", "q"] and r.annotator_column
    assert r.scores is None and r.groups is None
    only_score = pd.DataFrame({"item": ["x"], "human": ["b"], "score": [0.9]})
    c = validate(only_score, AB, AgreementOptions(invalid="label:b"))
    assert c.judge_text is None and not c.has_judge and c.fill_code == 1


@pytest.mark.parametrize(
    ("frame", "scale", "options", "message"),
    [
        ({"item": ["x"], "judge": ["a"]}, AB, {}, r"missing column\(s\) \['human'\]"),
        ({"item": ["x"], "human": [None], "judge": ["a"]}, AgreementScale(), {}, "no human labels to infer"),
        ({"item": ["x"], "human": ["a"], "judge": ["a"]}, AgreementScale(labels=[]), {}, "at least one label"),
        (
            {"item": ["x"], "human": ["a"], "judge": ["a"]},
            AgreementScale(labels=["a", "b", "c"]),
            {"invalid": "opposite"},
            "exactly two labels",
        ),
        ({"item": ["x"], "human": ["a"], "judge": ["a"]}, AB, {"invalid": "label:c"}, "'c' is not a label"),
        (
            {"item": ["x"], "human": [1], "judge": [1]},
            AgreementScale(kind="value"),
            {"invalid": "label:q"},
            "not a number",
        ),
        ({"item": [None, "y"], "human": ["a", "a"], "judge": ["a", "a"]}, AB, {}, "1 row.s. have no item id"),
        ({"item": ["x", "y"], "human": ["a", "q"], "judge": ["a", "a"]}, AB, {}, r"unknown human answer.s. \['q'\]"),
        (
            {"item": ["x"], "human": [7], "judge": [1]},
            AgreementScale(kind="value", min=1, max=5),
            {},
            "the scale is 1.0..5.0",
        ),
        ({"item": ["x"], "human": ["a"], "score": ["high"]}, AB, {}, "not finite numbers"),
    ],
)
def test_validate_refuses_user_mistakes(
    frame: dict[str, list[Any]], scale: AgreementScale, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(DataError, match=message):
        validate(pd.DataFrame(frame), scale, AgreementOptions(**options))


# ----------------------------------------------------------------------------------------------- reduce


def test_reduce_gives_one_record_per_item_with_consensus_and_the_policy() -> None:
    red = reduce_items(rows(policy="drop"))
    assert red.order == ["x", "y"] and red.labelled == ["x", "y"]
    x, y = red.items["x"], red.items["y"]
    assert x.humans == {"p": 0.0, "q": 1.0} and x.judge == {"a"} and x.judge_value == 0.0
    assert x.consensus is None  # one vote each: a tie
    assert y.consensus == 1.0 and y.judge_value is None  # 'zz' is not a label: invalid
    assert (red.tied, red.invalid, red.dropped, red.missing_human) == (1, 1, 1, 0)
    assert red.compared == [] and red.all_j == [0, MISSING] and red.all_h == [MISSING, 1]
    assert red.notes == [
        "1 item(s) whose human majority is tied left out of the judge comparison",
        "1 compared/labelled item(s) with an invalid or missing judge answer: policy drop",
    ]
    filled = reduce_items(rows(policy="label:a", fill_code=0, annotators=["p", "p", "p"], human=[0.0, 0.0, 1.0]))
    assert filled.compared == ["x", "y"] and filled.human == [0.0, 1.0] and filled.judge == [0.0, 0.0]
    assert filled.dropped == 0 and any("identical answer on several rows" in n for n in filled.notes)


def test_reduce_without_an_annotator_column_reads_anonymous_annotators_and_means_values() -> None:
    scale = AgreementScale(kind="value", min=1, max=5)
    r = rows(
        scale=scale,
        human=[1.0, 4.0, 2.0],
        judge_text=["2", "2", None],
        annotators=["#1", "#2", "#1"],
        annotator_column=False,
    )
    red = reduce_items(r)
    assert red.anonymous == 1 and red.items["x"].consensus == 2.5
    assert red.human == [2.5, 2.0] and red.judge == [2.0, None]  # as-wrong: still invalid, build scores it
    assert "anonymous annotators" in red.notes[1] and "repeated identically" in red.notes[0]
    assert red.all_j == [MISSING, MISSING]  # prevalence codes are categorical only


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"human": [0.0, 1.0, 1.0], "annotators": ["p", "p", "p"]},
            r"1 item\(s\) have two different answers from one annotator \('x'\)",
        ),
        (
            {"judge_text": ["a", "b", "b"]},
            r"1 item\(s\) have several different judge verdicts \('x'; e.g. 'x': \['a', 'b'\]\)",
        ),
        ({"scores": [0.1, 0.2, None]}, r"1 item\(s\) have several different scores \('x'\)"),
        ({"groups": ["g", "g", None]}, "some items have no group id"),
    ],
)
def test_reduce_refuses_conflicting_rows(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(DataError, match=message):
        reduce_items(rows(**kw))


# ----------------------------------------------------------------------------------------------- build


def reduced(**kw: Any) -> Reduced:
    """Two labelled items x (people a, b; judge a) and y (person b; judge invalid), compared under as-wrong."""
    items = {
        "x": Item(judge={"a"}, judge_rows=1, humans={"p": 0.0, "q": 1.0}, judge_value=0.0, consensus=0.0),
        "y": Item(judge={"zz"}, judge_rows=1, humans={"p": 1.0}, judge_value=None, consensus=1.0),
    }
    base: dict[str, Any] = {
        "order": ["x", "y"],
        "items": items,
        "group_names": [],
        "anonymous": 0,
        "notes": ["from reduce"],
        "compared": ["x", "y"],
        "human": [0.0, 1.0],
        "judge": [0.0, None],
        "labelled": ["x", "y"],
        "all_j": [0, MISSING],
        "all_h": [0, 1],
        "all_g": [0, 0],
        "invalid": 1,
    }
    return Reduced(**(base | kw))


def test_build_codes_an_invalid_answer_as_the_policy_says() -> None:
    p = build(rows(), reduced())
    assert p.items == ["x", "y"] and p.h.tolist() == [0, 1]
    assert p.j_nom.tolist() == [0, 2] and p.invalid.tolist() == [False, True]  # code k = 2: its own category
    assert p.j_ord.tolist() == [0, 0]  # ordered figures: the label farthest from the human's
    assert p.all_j.tolist() == [0, MISSING] and p.notes == ["from reduce"]
    assert p.counts.items_compared == 2 and p.counts.items_invalid_judge == 1 and p.counts.rows == 3
    assert p.counts.annotators == 2 and p.counts.rows_missing_judge == 0 and p.multi_row_items
    opposite = build(rows(policy="opposite"), reduced())
    assert opposite.j_nom.tolist() == [0, 0] and opposite.j_ord.tolist() == [0, 0]  # y: people said b


def test_build_lays_out_the_ceiling_matrix_and_the_judge_row() -> None:
    p = build(rows(), reduced())
    assert p.annotators == ["p", "q"]
    assert p.human_matrix is not None
    assert np.array_equal(p.human_matrix, np.array([[0.0, 1.0], [1.0, np.nan]]), equal_nan=True)
    assert p.ceil_judge_nom.tolist() == [0.0, 2.0]  # as-wrong: one more category for the nominal figures …
    assert math.isnan(p.ceil_judge_pos[1])  # … and left out of the positional ones
    dropped = build(rows(policy="drop"), reduced())
    assert math.isnan(dropped.ceil_judge_nom[1]) and math.isnan(dropped.ceil_judge_pos[1])
    single = build(rows(annotators=["p", "p", "p"], annotator_column=False), reduced())
    assert single.human_matrix is None and single.counts.annotators == 1  # no second person: no ceiling


def test_build_scores_an_invalid_value_as_the_farthest_end_or_leaves_it_out() -> None:
    items = {
        "x": Item(humans={"p": 2.0}, judge_value=3.0, consensus=2.0),
        "y": Item(humans={"p": 5.0}, judge_value=None, consensus=5.0),
    }
    values = reduced(items=items, human=[2.0, 5.0], judge=[3.0, None], all_j=[MISSING] * 2, all_h=[MISSING] * 2)
    bounded = build(rows(scale=AgreementScale(kind="value", min=1, max=5)), values)
    assert bounded.hv.tolist() == [2.0, 5.0] and bounded.jv.tolist() == [3.0, 1.0]  # 5 is farthest from 1
    assert bounded.invalid.tolist() == [False, True] and bounded.items == ["x", "y"]
    open_ended = build(rows(scale=AgreementScale(kind="value")), values)
    assert open_ended.items == ["x"] and open_ended.jv.tolist() == [3.0]
    assert open_ended.counts.items_dropped_invalid == 1 and open_ended.counts.items_compared == 1
    assert "cannot be scored as wrong without the scale's min and max" in open_ended.notes[-1]


def test_build_carries_groups_and_scores() -> None:
    red = reduced(group_names=["g", "h"], all_g=[0, 1])
    red.items["x"].group, red.items["y"].group = "g", "h"
    red.items["x"].scores = {0.75}
    p = build(rows(groups=["g", "g", "h"], scores=[0.75, 0.75, None]), red)
    assert p.groups is not None and p.groups.tolist() == [0, 1] and p.group_names == ["g", "h"]
    assert p.all_groups is not None and p.all_groups.tolist() == [0, 1]
    assert p.ceil_groups is not None and p.ceil_groups.tolist() == [0, 1]
    assert p.score is not None and p.score[0] == 0.75 and math.isnan(p.score[1])
    assert p.counts.groups == 2


# ---------------------------------------------------------------------------------------------- prepare


def test_prepare_is_its_three_phases_in_turn() -> None:
    f = pd.DataFrame(
        {
            "item": ["x", "x", "y", "z"],
            "annotator": ["p", "q", "p", "q"],
            "human": ["a", "a", "b", None],
            "judge": ["a", "a", None, "b"],
        }
    )
    options = AgreementOptions(invalid="label:b")
    p = prepare(f, AB, options)
    r = validate(f, AB, options)
    q = build(r, reduce_items(r))
    assert p.items == q.items == ["x", "y"] and p.counts == q.counts and p.notes == q.notes
    assert p.h.tolist() == q.h.tolist() == [0, 1] and p.j_nom.tolist() == q.j_nom.tolist() == [0, 1]
    assert p.multi_row_items and p.counts.items_missing_human == 1


# ------------------------------------------------------------------------------ moved from tests/test_agreement.py


def test_invalid_drop_and_label_policies() -> None:
    h = ["a", "b", "b", "a"]
    j = ["a", "b", None, "nonsense"]
    scale = AgreementScale(labels=["a", "b"])
    dropped = compute_agreement(frame(h, j), scale, AgreementOptions(bootstrap=0, invalid="drop"))
    assert dropped.counts.items_dropped_invalid == 2 and dropped.counts.items_compared == 2
    assert value(dropped, "accuracy") == 1.0
    filled = compute_agreement(frame(h, j), scale, AgreementOptions(bootstrap=0, invalid="label:a"))
    assert filled.counts.items_compared == 4 and value(filled, "accuracy") == 0.75
    with pytest.raises(DataError, match="not a label"):
        compute_agreement(frame(h, j), scale, AgreementOptions(bootstrap=0, invalid="label:x"))


def test_mapping_and_numeric_labels() -> None:
    h = [0, 1, 2, 0, 1.0]
    j = ["0", "1", "0", 2, 1]
    rep = compute_agreement(
        frame(h, j), AgreementScale(labels=["0", "1"]), AgreementOptions(bootstrap=0, mapping={"2": "0"})
    )
    assert rep.counts.items_invalid_judge == 0 and value(rep, "accuracy") == 1.0


def test_unknown_human_label_is_a_user_error() -> None:
    with pytest.raises(DataError, match="unknown human answer"):
        compute_agreement(frame(["a", "q"], ["a", "a"]), AgreementScale(labels=["a", "b"]), NO_BOOT)
    with pytest.raises(DataError, match="missing column"):
        compute_agreement(pd.DataFrame({"item": ["1"], "judge": ["a"]}), AgreementScale(), NO_BOOT)


def test_majority_and_ties() -> None:
    f = pd.DataFrame(
        {
            "item": ["x", "x", "x", "y", "y", "z"],
            "annotator": ["p", "q", "r", "p", "q", "p"],
            "human": ["a", "a", "b", "a", "b", "b"],
            "judge": ["a", "a", "a", "b", "b", "b"],
        }
    )
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)
    assert rep.counts.items_tied_majority == 1 and rep.counts.items_compared == 2
    assert value(rep, "accuracy") == 1.0


def test_value_invalid_as_wrong_uses_scale_bounds() -> None:
    rep = compute_agreement(frame([1.0, 4.0], [1.0, "n/a"]), AgreementScale(kind="value", min=1, max=5), NO_BOOT)
    assert value(rep, "mae") == 1.5  # 4 → worst case 1: error 3 over 2 items
    unbounded = compute_agreement(frame([1.0, 4.0], [1.0, "n/a"]), AgreementScale(kind="value"), NO_BOOT)
    assert unbounded.counts.items_dropped_invalid == 1 and any("min and max" in n for n in unbounded.notes)


def _majority(values: list[str]) -> str | None:
    top = Counter(values).most_common()
    return None if len(top) > 1 and top[0][1] == top[1][1] else top[0][0]


def test_duplicate_human_rows_without_annotator_are_anonymous_annotators(tmp_path: Path) -> None:
    # The repro plus a tied item: the last row used to win silently (accuracy 0.333, no note).
    rows = [("a", "1", "1"), ("a", "1", "1"), ("a", "1", "2"), ("b", "2", "2"), ("b", "2", "2"), ("b", "2", "1")]
    rows += [("c", "1", "1"), ("d", "1", "1"), ("d", "1", "2")]
    f = tmp_path / "dup.csv"
    pd.DataFrame(rows, columns=["id", "j", "h"]).to_csv(f, index=False)
    data = cli_json(tmp_path, [str(f), "--judge", "j", "--human", "h", "--item", "id", "--bootstrap", "0"])
    by_item: dict[str, list[str]] = {}
    judge: dict[str, str] = {}
    for item, j, h in rows:
        by_item.setdefault(item, []).append(h)
        judge[item] = j
    consensus = {i: _majority(v) for i, v in by_item.items()}
    kept = [i for i, c in consensus.items() if c is not None]
    ref = skm.accuracy_score([consensus[i] for i in kept], [judge[i] for i in kept])
    assert data["metrics"]["accuracy"]["value"] == pytest.approx(ref, abs=TOL)
    assert data["counts"]["items_tied_majority"] == 1 and data["counts"]["items_compared"] == 3
    assert any("anonymous annotators" in n for n in data["notes"]), data["notes"]
    assert "anonymous annotators" in data["_output"]
    # the human ceiling: rows in file order are annotators #1, #2, #3 (α does not depend on that order)
    width = max(len(v) for v in by_item.values())
    mat = np.full((width, len(by_item)), np.nan)
    for col, vals in enumerate(by_item.values()):
        mat[: len(vals), col] = [float(v) for v in vals]
    ceiling = data["ceiling"]
    assert ceiling is not None
    ref_alpha = krippendorff.alpha(mat, value_domain=[1.0, 2.0], level_of_measurement="nominal")
    assert ceiling["human_alpha"]["value"] == pytest.approx(ref_alpha, abs=TOL)


def test_duplicate_human_values_without_annotator_are_averaged() -> None:
    f = pd.DataFrame({"item": ["a", "a", "b", "b", "c"], "judge": [2, 2, 3, 3, 5], "human": [1, 3, 4, 5, 5]})
    rep = compute_agreement(f, AgreementScale(kind="value", min=1, max=5), NO_BOOT)
    ref = skm.mean_absolute_error([2.0, 4.5, 5.0], [2.0, 3.0, 5.0])
    assert close(value(rep, "mae"), ref)
    assert any("anonymous annotators" in n for n in rep.notes)


def test_conflicting_judge_rows_are_refused_naming_the_items(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    pd.DataFrame(
        {"id": ["x", "x", "y", "y", "z"], "j": ["a", "b", "a", "b", "a"], "h": ["a", "a", "b", "b", "a"]}
    ).to_csv(f, index=False)
    res = CliRunner().invoke(agreement, [str(f), "--judge", "j", "--human", "h", "--item", "id", "--bootstrap", "0"])
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert "'x'" in res.output and "'y'" in res.output


def test_identical_judge_rows_collapse_with_a_note() -> None:
    f = pd.DataFrame({"item": ["x", "x", "y"], "judge": ["a", "a", "b"], "human": ["a", "b", "b"]})
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)
    assert any("counted once" in n for n in rep.notes), rep.notes


def test_same_annotator_twice_on_an_item_is_refused_when_it_differs() -> None:
    f = pd.DataFrame(
        {"item": ["x", "x", "y"], "annotator": ["p", "p", "p"], "judge": ["a", "a", "b"], "human": ["a", "b", "b"]}
    )
    with pytest.raises(DataError, match="'x'"):
        compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)


LITERALS = ["NA", "None", "null", "N/A", "nan"]


def test_label_literals_pandas_reads_as_missing_stay_labels(tmp_path: Path) -> None:
    h = [*LITERALS, "yes", "yes", "NA"]
    j = [*LITERALS, "NA", "", "None"]  # the empty judge answer is missing: invalid, as-wrong
    f = tmp_path / "lit.csv"
    f.write_text("id,j,h\n" + "".join(f"{n},{a},{b}\n" for n, (a, b) in enumerate(zip(j, h, strict=True))))
    labels = [*LITERALS, "yes"]
    args = [str(f), "--judge", "j", "--human", "h", "--item", "id", "--labels", ",".join(labels), "--bootstrap", "0"]
    data = cli_json(tmp_path, args)
    assert data["counts"]["items_compared"] == len(h) and data["counts"]["items_invalid_judge"] == 1
    assert data["counts"]["rows_missing_judge"] == 1 and data["counts"]["rows_missing_human"] == 0
    ref_j = [x if x else "<invalid>" for x in j]
    assert data["metrics"]["accuracy"]["value"] == pytest.approx(skm.accuracy_score(h, ref_j), abs=TOL)
    # only what the user says is missing: NA now means "no answer" on both sides
    data = cli_json(tmp_path, [*args, "--missing-values", "NA"])
    assert data["counts"]["items_missing_human"] == 2 and data["counts"]["rows_missing_judge"] == 3


def test_json_null_stays_missing_and_is_counted(tmp_path: Path) -> None:
    f = tmp_path / "d.jsonl"
    rows = [{"id": 1, "j": "null", "h": "null"}, {"id": 2, "j": None, "h": "ok"}, {"id": 3, "j": "ok", "h": None}]
    f.write_text("\n".join(json.dumps(r) for r in rows))
    args = [str(f), "--judge", "j", "--human", "h", "--item", "id", "--labels", "null,ok", "--bootstrap", "0"]
    data = cli_json(tmp_path, args)
    c = data["counts"]
    assert c["rows_missing_judge"] == 1 and c["rows_missing_human"] == 1 and c["items_missing_human"] == 1
    assert c["items_compared"] == 2 and data["metrics"]["accuracy"]["value"] == 0.5


def test_parquet_nulls_are_missing_and_literals_are_not(tmp_path: Path) -> None:
    f = tmp_path / "d.parquet"
    pd.DataFrame({"j": ["NA", None, "None"], "h": ["NA", "NA", None]}).to_parquet(f)
    data = cli_json(tmp_path, [str(f), "--judge", "j", "--human", "h", "--labels", "NA,None", "--bootstrap", "0"])
    c = data["counts"]
    assert c["rows_missing_judge"] == 1 and c["items_missing_human"] == 1 and c["items_compared"] == 2


def _policies_table() -> tuple[list[str], list[str | None]]:
    """The worked example of docs/agreement.md (--invalid): 10 items, two unparseable verdicts."""
    h = ["yes", "yes", "yes", "yes", "no", "no", "no", "no", "no", "no"]
    j: list[str | None] = ["yes", "yes", "yes", "?", "no", "no", "no", "yes", "no", None]
    return h, j


@pytest.mark.parametrize("policy", ["as-wrong", "opposite", "drop", "label:no"])
def test_invalid_policies_worked_example(tmp_path: Path, policy: str) -> None:
    h, j = _policies_table()
    f = tmp_path / "inv.csv"
    pd.DataFrame({"h": h, "j": j}).to_csv(f, index=False)
    data = cli_json(
        tmp_path,
        [str(f), "--judge", "j", "--human", "h", "--labels", "no,yes", "--invalid", policy, "--bootstrap", "0"],
    )
    bad = [x not in ("yes", "no") for x in j]
    if policy == "drop":
        hh = [a for a, b in zip(h, bad, strict=True) if not b]
        jj = [b for b, x in zip(j, bad, strict=True) if not x]
    elif policy == "opposite":
        hh, jj = h, [("no" if a == "yes" else "yes") if x else b for a, b, x in zip(h, j, bad, strict=True)]
    elif policy == "label:no":
        hh, jj = h, ["no" if x else b for b, x in zip(j, bad, strict=True)]
    else:
        hh, jj = h, ["<invalid>" if x else b for b, x in zip(j, bad, strict=True)]
    m = data["metrics"]
    assert m["accuracy"]["value"] == pytest.approx(skm.accuracy_score(hh, jj), abs=TOL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert m["balanced_accuracy"]["value"] == pytest.approx(skm.balanced_accuracy_score(hh, jj), abs=TOL)
    ref_f1 = skm.f1_score(hh, jj, labels=["no", "yes"], average="macro", zero_division=0)
    assert m["macro_f1"]["value"] == pytest.approx(ref_f1, abs=TOL)
    judge_cols = data["categorical"]["confusion"]["judge_labels"]
    assert ("<invalid>" in judge_cols) == (policy == "as-wrong")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        figures = (skm.accuracy_score(hh, jj), skm.balanced_accuracy_score(hh, jj), ref_f1)
    row = f"| `{policy}` | {len(hh)} | " + " | ".join(f"{x:.3f}" for x in figures) + " |"
    assert row in DOCS.read_text(encoding="utf-8"), row
    assert data["counts"]["items_invalid_judge"] == 2


def test_invalid_opposite_needs_two_labels(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    pd.DataFrame({"j": ["a", "?", "c"], "h": ["a", "b", "c"]}).to_csv(f, index=False)
    res = CliRunner().invoke(agreement, [str(f), "--judge", "j", "--human", "h", "--invalid", "opposite"])
    assert res.exit_code == 2 and "exactly two labels" in res.output
    assert len(res.output.strip().splitlines()) == 1

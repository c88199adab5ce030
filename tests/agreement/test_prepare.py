"""agreement/prepare/: the long frame read, reduced to one record per item and turned into aligned arrays —
each phase (validate, reduce_items, build) on its own, on inputs built by hand, then prepare as a whole."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from greval.agreement import AgreementOptions, AgreementScale
from greval.agreement.prepare import MISSING, Reduced, Rows, build, prepare, reduce_items, validate
from greval.agreement.prepare.reduce import Item
from greval.errors import DataError

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

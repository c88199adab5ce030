"""greval.spec.verdict (formerly greval.judge.verdict): the verdict models a judge spec asks for."""

from __future__ import annotations

from greval.spec.verdict import verdict_models
from tests.judge.conftest import LABEL_SPEC, VALUE_SPEC


def test_verdict_models_put_reason_before_verdict() -> None:
    answer, item = verdict_models(VALUE_SPEC)
    props = list(answer.model_json_schema()["properties"])
    assert props[:2] == ["reason", "value"]
    assert answer.model_json_schema()["properties"]["value"]["maximum"] == 5
    answer, item = verdict_models(LABEL_SPEC)
    item_schema = item.model_json_schema()
    assert list(item_schema["properties"]) == ["id", "reason", "label"]
    assert item_schema["properties"]["label"]["enum"] == ["yes", "maybe", "no"]

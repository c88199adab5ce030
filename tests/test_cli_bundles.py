"""greval/cli/bundle.py and bundles.py: commands receive their flags as a few typed bundles (the Argilla
connection, the data, how a run judges), built in one place, and what each bundle builds is what the command
built from its loose flags before (the front door gets the same DataSource and RunOptions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.cli.bundle import gathered
from greval.cli.bundles import ConnectionFlags, DataFlags, RunFlags
from greval.dataset.limits import ReadLimits
from greval.dataset.sample import Sample
from greval.dataset.source import DataSource
from greval.errors import UserError
from greval.llm.retry import RetryPolicy
from greval.runner.options import RunOptions


def test_gathered_takes_its_flags_from_anywhere_on_the_command_and_defaults_the_rest() -> None:
    """The flags stay where --help lists them (here split by another option); a field without a flag on this
    command keeps the bundle's default, the stage's own."""
    seen: dict[str, Any] = {}

    @click.command()
    @click.option("--method", default="auto")
    @click.option("--other", default="x")
    @click.option("--retry-errors", is_flag=True)
    @gathered("run", RunFlags)
    def command(other: str, run: RunFlags) -> None:
        seen.update(other=other, run=run)

    res = CliRunner().invoke(command, ["--method", "json_mode", "--retry-errors"])
    assert res.exit_code == 0, res.output
    assert seen == {"other": "x", "run": RunFlags(method="json_mode", retry_errors=True)}
    assert [p.name for p in command.params] == ["method", "other", "retry_errors"]


class _Stop(Exception):
    """Raised by the patched front door: the test wants what it was given, not a run."""


@pytest.fixture
def front_door(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """``greval run``'s call of the front door, captured (no judge, no store)."""
    from greval.flows import run as front

    given: dict[str, Any] = {}

    def captured(source: DataSource, specs: Any, judge: Any, store: Any, options: RunOptions, *a: Any, **k: Any) -> Any:
        given.update(source=source, options=options, store=store, store_wait=k.get("store_wait"))
        raise _Stop

    monkeypatch.setattr(front, "run_dataset", captured)
    return given


def test_run_gives_the_front_door_the_source_and_options_its_flags_say(
    front_door: dict[str, Any], tmp_path: Path
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"rid": "1", "q": "?", "answer": "a"}) + "\n")
    args = ["run", str(data), "-s", "citation_validity", "--store", str(tmp_path / "s.sqlite"), "--quiet"]
    flags = ["--map", "question=q", "--id-column", "rid", "--limit", "3", "--max-columns", "50", "-c", "3"]
    flags += ["--no-adaptive", "--method", "json_mode", "--max-attempts", "2", "--sample", "2", "--sample-seed", "4"]
    flags += [
        "--retry-errors",
        "--no-direct",
        "--logprobs",
        "--top-logprobs",
        "5",
        "--experiment",
        "try",
        "--dataset-name",
        "d",
    ]
    res = CliRunner().invoke(main, [*args, *flags])
    assert isinstance(res.exception, _Stop), res.output
    assert front_door["source"] == DataSource(
        data=str(data), mapping={"question": "q"}, id_column="rid", limit=3, limits=ReadLimits(max_columns=50)
    )
    assert front_door["options"] == RunOptions(
        concurrency=3,
        adaptive=False,
        method="json_mode",
        retry=RetryPolicy(max_attempts=2),
        retry_errors=True,
        direct=False,
        logprobs=5,
        sample=Sample(records=2, seed=4),
        experiment="try",
        dataset_name="d",
    )


def test_run_without_concurrency_leaves_it_to_the_run(front_door: dict[str, Any], tmp_path: Path) -> None:
    """No -c: the options leave concurrency unset, so the run chooses it (the embedded judge's slots, else 8)."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "answer": "a"}) + "\n")
    res = CliRunner().invoke(main, ["run", str(data), "-s", "citation_validity", "--store", str(tmp_path / "s")])
    assert isinstance(res.exception, _Stop), res.output
    options = front_door["options"]
    assert "concurrency" not in options.model_fields_set
    assert options.model_dump() == RunOptions(sample=None).model_dump()
    assert front_door["source"] == DataSource(data=str(data), limits=ReadLimits())


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sample-seed", "3"], "--sample-seed chooses a sample"),
        (["--shards", "2"], "--ray-address and --shards go with --engine ray"),
        (["--promote", "--experiment", "x"], "an experiment never changes a production version"),
    ],
)
def test_run_flags_that_need_another_are_a_usage_error(flags: list[str], message: str, tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "1", "answer": "a"}) + "\n")
    res = CliRunner().invoke(main, ["run", str(data), "-s", "citation_validity", *flags])
    assert res.exit_code == 2 and message in res.output


def test_a_bad_map_is_one_user_error() -> None:
    with pytest.raises(UserError, match="--map 'question': write FIELD=COLUMN"):
        DataFlags(data="d.csv", maps=("question",)).source()
    assert DataFlags(data="d.csv").mapping() is None


def test_the_bundles_keep_keys_out_of_their_repr() -> None:
    from greval.cli.serve import ServeFlags

    argilla = ConnectionFlags(api_url="http://argilla:6900", api_key="argilla-s3cret")
    assert "argilla-s3cret" not in repr(argilla) and "http://argilla:6900" in repr(argilla)
    serving = ServeFlags(
        host="127.0.0.1",
        port=8000,
        api_keys=("serve-s3cret",),
        max_body=1,
        max_records=1,
        requests_per_key=1,
        header_timeout=1.0,
        body_timeout=1.0,
        max_connections=1,
        store_wait=0.0,
        workers=1,
        no_playground=False,
    )
    assert "serve-s3cret" not in repr(serving)

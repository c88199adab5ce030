"""The option bundles several commands share, each turned into its stage's value in one place: where the
Argilla server is (:class:`ConnectionFlags`: ``annotate push / pull / import-labels``, ``review``), which data
to read and how (:class:`DataFlags` → :class:`~greval.dataset.source.DataSource`: ``run``, ``spec try``,
``reliability``) and how a run judges (:class:`RunFlags` → :class:`~greval.runner.options.RunOptions`: ``run``,
``serve``, ``quickstart``, ``align``).

A command declares a bundle's flags where its --help lists them (their help texts and defaults are each
command's own) and receives the bundle as one argument (greval.cli.bundle.gathered); a flag a command does not
have leaves its field at the default, which is the stage's own. Building a bundle never fails: the command
checks it (:meth:`RunFlags.check`, :meth:`DataFlags.source`) where it reports errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import click

from greval.cli.bundle import Decorator, bundle
from greval.cli.common import parse_map
from greval.dataset.limits import ReadLimits

if TYPE_CHECKING:
    from greval.annotation.argilla import Connection
    from greval.dataset.sample import Sample
    from greval.dataset.source import DataSource
    from greval.runner.options import RunOptions


@dataclass(frozen=True)
class ConnectionFlags:
    """Where the Argilla server is (--api-url, --api-key, --workspace, --data-dir) and which dataset there
    (--dataset; None: the command's default). The key is left out of the bundle's repr."""

    api_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    workspace: str | None = None
    dataset: str | None = None
    data_dir: Path | None = None

    def connect(self) -> Connection:
        """A connection to the server: an external one at ``api_url``, else the embedded one."""
        from greval.annotation.argilla import connect

        return connect(self.api_url, self.api_key, self.data_dir, self.workspace)


def connection_options_for(dataset_default: str) -> Decorator:
    """--api-url / --api-key (or ARGILLA_API_URL / ARGILLA_API_KEY), --workspace, --dataset (its default named
    in the help), --data-dir: handed to the command as ``argilla: ConnectionFlags``."""
    return bundle(
        "argilla",
        ConnectionFlags,
        click.option(
            "--api-url",
            envvar="ARGILLA_API_URL",
            default=None,
            help="An external Argilla [env ARGILLA_API_URL; default: the embedded server].",
        ),
        click.option(
            "--api-key",
            envvar="ARGILLA_API_KEY",
            default=None,
            show_default=False,
            help="Its API key [env ARGILLA_API_KEY; default: the embedded server's].",
        ),
        click.option("--workspace", default=None, help="Argilla workspace [default: the server's]."),
        click.option("--dataset", default=None, help=f"Argilla dataset name [default: {dataset_default}]."),
        click.option(
            "--data-dir",
            type=click.Path(file_okay=False, path_type=Path),
            default=None,
            help="Data directory of the embedded server (as given to `annotate up`).",
        ),
    )


@dataclass(frozen=True)
class DataFlags:
    """The data a command reads (DATA or --data) and how: --map FIELD=COLUMN, --id-column, --limit and the
    read limits (greval.cli.common.read_limit_options)."""

    data: str
    maps: Sequence[str] = ()
    id_column: str | None = None
    limit: int | None = None
    limits: ReadLimits = field(default_factory=ReadLimits)

    def mapping(self) -> dict[str, str] | None:
        """The --map pairs as greval field → column (None without any); a pair that is not FIELD=COLUMN is a
        UserError."""
        return parse_map(self.maps) or None

    def source(self) -> DataSource:
        """The one value a run reads its records from (a bad --map is a UserError here)."""
        from greval.dataset.source import DataSource

        return DataSource(
            data=self.data, mapping=self.mapping(), id_column=self.id_column, limit=self.limit, limits=self.limits
        )


#: --map as ``greval run`` declares it (``spec try`` and ``reliability`` point to it).
MAP_OPTION = click.option(
    "--map",
    "maps",
    multiple=True,
    metavar="FIELD=COLUMN",
    help="Read FIELD from COLUMN (dotted paths reach nested JSON), e.g. --map question=query.",
)


@dataclass(frozen=True)
class RunFlags:
    """How a run judges: concurrency, adaptivity, the structured-output method and retries, errors judged
    again, the direct call path, log-probabilities, the sample, the engine, and what the run is (promoting its
    versions, an experiment, its dataset's name). A command without one of these flags leaves its field at
    :class:`~greval.runner.options.RunOptions`' default (``concurrency`` None: the run chooses, the embedded
    judge's slots or 8)."""

    concurrency: int | None = None
    no_adaptive: bool = False
    method: str = "auto"
    max_attempts: int = 6
    sample_n: int | None = None
    sample_items: int | None = None
    sample_seed: int | None = None
    retry_errors: bool = False
    no_direct: bool = False
    logprobs: bool = False
    top_logprobs: int = 10
    engine: str = "local"
    ray_address: str | None = None
    shards: int | None = None
    workers: int | None = None
    promote: bool = False
    experiment: str | None = None
    dataset_name: str | None = None

    def check(self) -> None:
        """Flags that make no sense without another: a usage error (exit 2)."""
        if self.sample_seed is not None and self.sample_n is None and self.sample_items is None:
            raise click.UsageError("--sample-seed chooses a sample: give --sample N and / or --sample-items N with it")
        if self.engine != "ray" and (self.ray_address is not None or self.shards is not None):
            raise click.UsageError("--ray-address and --shards go with --engine ray")
        if self.engine == "ray" and self.workers is not None:
            raise click.UsageError("--workers goes with --engine local (on Ray, --shards)")
        if self.promote and self.experiment is not None:
            raise click.UsageError("--promote and --experiment: an experiment never changes a production version")

    def sample(self) -> Sample | None:
        """The sample asked for (--sample / --sample-items / --sample-seed), or None."""
        from greval.dataset.sample import Sample

        if self.sample_n is None and self.sample_items is None:
            return None
        return Sample(records=self.sample_n, items=self.sample_items, seed=self.sample_seed or 0)

    def options(self) -> RunOptions:
        """The run's options (an unset concurrency stays unset: the run chooses it)."""
        from greval.llm.retry import RetryPolicy
        from greval.runner.options import RunOptions

        return RunOptions(
            **({"concurrency": self.concurrency} if self.concurrency is not None else {}),
            adaptive=not self.no_adaptive,
            method=self.method,
            retry=RetryPolicy(max_attempts=self.max_attempts),
            retry_errors=self.retry_errors,
            direct=not self.no_direct,
            logprobs=self.top_logprobs if self.logprobs else None,
            sample=self.sample(),
            engine="ray" if self.engine == "ray" else "local",
            shards=self.shards,
            workers=self.workers,
            ray_address=self.ray_address,
            promote=self.promote,
            experiment=self.experiment,
            dataset_name=self.dataset_name,
        )

"""The ``greval`` command line: click only (parse flags, call one function, print). User mistakes print one line
and exit 2; nothing prints a traceback for them.

The main group and its table of commands live here; each command lives in its own module of this package
(``spec``, ``run``, ``results``, ``annotate``, ``agreement``, ``report``, ``reliability``, ``local_judge``,
``quickstart``), shared options and printing in ``common``.
"""

from __future__ import annotations

from typing import Any

import click

from greval.cli.common import command_line, fail, interrupted_exit, on_sigterm
from greval.cli.lazy import Lazy, LazyGroup
from greval.errors import StoreUnavailable, UserError


class GrevalGroup(LazyGroup):
    """Turns user errors into one line and exit code 2; Ctrl-C and SIGTERM into one line and 130 / 143; a
    store that went away into one line with the command that resumes, and 75.

    Its commands are resolved inside ``invoke``, so a lazily imported command gets the same treatment."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["greval.argv"] = list(args)  # the command line as given, to print again to resume
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_sigterm)
        try:
            return super().invoke(ctx)
        except UserError as exc:
            fail(exc)
        except StoreUnavailable as exc:
            again = command_line(ctx.meta.get("greval.argv", []))
            fail(f"{exc}; to resume, run again: {again}", exc.exit_code)
        except KeyboardInterrupt as exc:
            interrupted_exit(exc, "everything done so far is stored; run the same command again to resume")


# ------------------------------------------------------------------------------------- command table
# Every command of `greval`, where it lives and its short help (the first sentence of its docstring;
# tests/test_cli_startup.py checks they agree). A command's module is imported only when the command runs
# or its help is asked for, so `greval --help` imports no stage. No `except ImportError`: a module that
# cannot be imported fails loudly when its command is used.
COMMANDS: dict[str, Lazy] = {
    "align": Lazy(
        "greval.cli.align:align_cmd",
        "Improve a spec from people's labels; adopt it only if it proves better on labels the search never read.",
    ),
    "agreement": Lazy(
        "greval.cli.agreement:agreement",
        "Agreement between an LLM judge and human labels in FILE (csv/tsv/jsonl/json/parquet, .gz ok), or in a "
        "greval store (--store S --spec NAME).",
    ),
    "annotate": Lazy(
        "greval.cli.annotate:annotate",
        "Human review of judge verdicts in a local Argilla server (no Docker, Elasticsearch or Redis).",
    ),
    "gate": Lazy(
        "greval.cli.gate:gate_cmd",
        "Exit 0 if every condition on a metric holds, 1 if not (one line per failed condition).",
    ),
    "history": Lazy(
        "greval.cli.history:history_cmd",
        "A metric's history: every run's score and agreement with CIs, its production versions, drops flagged.",
    ),
    "local-judge": Lazy(
        "greval.cli.local_judge:local_judge",
        "Build and run the offline judge (llama.cpp's llama-server with a bundled small model).",
    ),
    "quickstart": Lazy(
        "greval.cli.quickstart:quickstart_cmd",
        "Run greval's whole loop on a bundled example, offline, in one command.",
    ),
    "reliability": Lazy(
        "greval.cli.reliability:reliability_cmd",
        "Position bias and model dependence of a judge: re-judge a sample with chunks / triples and labels "
        "reordered, report how often verdicts flip, and how well a panel of judge models agrees.",
    ),
    "report": Lazy(
        "greval.cli.report:report_cmd",
        "Write an HTML report of a store: metrics, systems side by side, judge-vs-human agreement.",
    ),
    "results": Lazy("greval.cli.results:results", "Read verdicts out of a store."),
    "review": Lazy(
        "greval.cli.review:review",
        "Push the next round of items people should label for a metric, to its review dataset in Argilla.",
    ),
    "run": Lazy("greval.cli.run:run_cmd", "Judge DATA (JSONL, JSON, CSV or Parquet) with one or more metric specs."),
    "serve": Lazy(
        "greval.cli.serve:serve_cmd",
        "Serve metrics over HTTP: greval's JSON API and LangServe routes per spec, sharing the store of `greval run`.",
    ),
    "spec": Lazy("greval.cli.spec:spec", "Inspect, validate and document metric specs."),
    "store": Lazy(
        "greval.cli.store:store",
        "Inspect, migrate and copy stores (a SQLite file, or a PostgreSQL database shared by a team).",
    ),
    "watch": Lazy(
        "greval.cli.watch:watch",
        "Judge a live system's traces as they come: sampled, judged by each metric's production version, written "
        "back, a share sent to people, every window compared with its baseline.",
    ),
}


@click.group(
    cls=GrevalGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
)
@click.version_option(package_name="greval")
def main() -> None:
    """greval — LLM judges for RAG and GraphRAG that people can check.

    Write a metric as a YAML spec, run it over your dataset, review the verdicts in Argilla, and measure
    how well the judge agrees with people.

    \b
      greval spec list                          predefined metrics
      greval run data.jsonl --spec answer_alignment --judge openai:gpt-4o-mini
      greval results export --format csv -o verdicts.csv
    """


# ------------------------------------------------------------------------------------------------ run

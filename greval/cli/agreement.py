"""`greval agreement FILE ...` / `greval agreement --store S --spec NAME`: judge-vs-human agreement, printed as
compact rich tables (greval.report.terminal) and written as JSON / HTML / Markdown.

The flags arrive as five bundles, each built from its flags here and nowhere else: where the answers are
(:class:`Source`), which columns hold what (:class:`Columns`), the scale (:class:`ScaleFlags`), how to compute
(:class:`ComputeFlags`) and what to write (:class:`Outputs`); and the read limits every command that reads a
file shares (greval.cli.common.read_limit_options). greval.cli.agreement_modes picks the mode (a
file, a store, two runs of the judge paired by a column; several judges or versions compared; a batch of
files and column pairs in one process, one JSON) and runs it.

User mistakes (missing column, unknown label, bad flag) exit 2 with one line on stderr, no traceback.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from pydantic import ValidationError
from rich.console import Console

from greval.agreement.models import AgreementOptions, AgreementScale, GoldChoice
from greval.agreement.tables import read_table, to_agreement_frame
from greval.cli.bundle import bundle
from greval.cli.common import INVALID_OPTION, fail, read_limit_options, store_option
from greval.dataset.limits import ReadLimits
from greval.errors import UserError

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Source:
    """Where the judge's answers and the human labels come from: FILE (several: a batch, one report each), or a
    store's metric (versions)."""

    files: tuple[Path, ...]
    store: str | None
    spec_refs: tuple[str, ...]
    datasets: tuple[str, ...]
    level: str


@dataclass(frozen=True)
class Columns:
    """Which columns of FILE hold what (dots select nested fields); ``judges`` and ``slices`` also apply to a
    store (which judge's verdicts, which record fields to slice by). Several ``humans``: a batch, the i-th judge
    column against the i-th human column."""

    judges: tuple[str, ...]
    version: str | None
    humans: tuple[str, ...]
    annotator: str | None
    item: str | None
    group: str | None
    slices: tuple[str, ...]
    score: str | None
    confidence: str | None
    reason: str | None
    comment: str | None
    pair_by: str | None

    @property
    def human(self) -> str | None:
        """The human column of one table (the first of a batch's)."""
        return self.humans[0] if self.humans else None


@dataclass(frozen=True)
class ScaleFlags:
    """The scale of FILE's answers (a store knows its specs' scales)."""

    kind: str
    labels: str | None
    ordered: bool
    vmin: float | None
    vmax: float | None

    def scale(self) -> AgreementScale:
        labels = [x.strip() for x in self.labels.split(",") if x.strip()] if self.labels else None
        return AgreementScale(kind=self.kind, labels=labels, ordered=self.ordered, min=self.vmin, max=self.vmax)


@dataclass(frozen=True)
class ComputeFlags:
    """How to compute: relabelling, missing answers, the invalid-answer policy, the positive label and
    threshold, the protocol, the bootstrap and the calibration bins. ``old_map``: the retired ``--map``."""

    relabel: tuple[str, ...]
    old_map: tuple[str, ...]
    missing_values: tuple[str, ...]
    invalid: str
    pos_label: str | None
    calibration_bins: int
    threshold: float | None
    threshold_rule: str
    choose_threshold: str | None
    select_on: str | None
    invalid_pairs: str
    protocol: str
    resamples: int
    seed: int
    gold: str | None = None

    def gold_choice(self) -> GoldChoice | None:
        """--gold: which label is an item's truth (none: people's majority / mean, as before)."""
        return GoldChoice.parse(self.gold) if self.gold is not None else None

    def mapping(self) -> dict[str, str]:
        """--relabel FROM=TO pairs (the retired --map is refused with a pointer to --relabel)."""
        if self.old_map:
            raise UserError(
                f"--map {self.old_map[0]!r}: agreement relabels answers with --relabel FROM=TO now (e.g. --relabel "
                '"2=0"); --map means FIELD=COLUMN in the other commands'
            )
        out: dict[str, str] = {}
        for p in self.relabel:
            if "=" not in p:
                raise UserError(f'--relabel {p!r}: expected FROM=TO, e.g. --relabel "2=0"')
            a, b = p.split("=", 1)
            out[a.strip()] = b.strip()
        return out

    def options(self, slices: list[str]) -> AgreementOptions:
        """Every computing flag, as the options of a file's agreement."""
        return AgreementOptions(
            invalid=self.invalid,
            protocol=self.protocol,
            bootstrap=self.resamples,
            seed=self.seed,
            slices=slices,
            mapping=self.mapping(),
            missing_values=[x.strip() for v in self.missing_values for x in v.split(",") if x.strip()],
            pos_label=self.pos_label,
            threshold=self.threshold,
            threshold_rule=self.threshold_rule,
            choose_threshold=self.choose_threshold,
            select_on=self.select_on,
            invalid_pairs=self.invalid_pairs,
            calibration_bins=self.calibration_bins,
        )

    def store_options(self, slices: list[str]) -> AgreementOptions:
        """The options of a store's agreement: what applies to stored verdicts and labels."""
        return AgreementOptions(
            invalid=self.invalid,
            bootstrap=self.resamples,
            seed=self.seed,
            mapping=self.mapping(),
            slices=slices,
            calibration_bins=self.calibration_bins,
        )


@dataclass(frozen=True)
class Outputs:
    """What to write besides the terminal tables, and how many decimals they show."""

    json_out: Path | None
    html_out: Path | None
    md_out: Path | None
    decimals: int


SOURCE = bundle(
    "source",
    Source,
    click.argument("files", nargs=-1, metavar="[FILE]...", type=click.Path(dir_okay=False, path_type=Path)),
    store_option(
        default=None,
        must_exist=True,
        env=False,
        help="Read judge verdicts and pulled / imported human labels from a greval store instead of FILE.",
    ),
    click.option(
        "--spec",
        "spec_refs",
        multiple=True,
        help="with --store: metric NAME, or NAME@HASH for one version; repeat to compare side by side",
    ),
    click.option(
        "--dataset",
        "datasets",
        multiple=True,
        help="with --store: which human-label datasets to compare with (an Argilla dataset's name, or 'import' "
        "for imported labels); repeatable; default: all. Needed when one person labelled the same items in "
        "several datasets (e.g. a --blind copy and the one with suggestions)",
    ),
    click.option(
        "--level",
        type=click.Choice(["item", "record"]),
        default="item",
        show_default=True,
        help="with --store, chunk/triple metrics: per item, or on the aggregated record score",
    ),
)

COLUMNS = bundle(
    "columns",
    Columns,
    click.option(
        "--judge",
        "judges",
        multiple=True,
        help="judge column (dots select nested fields); repeat to compare versions side by side. "
        "With --store: which judge's verdicts (default: the one with most)",
    ),
    click.option(
        "--version",
        default=None,
        help="column naming the judge version of each row (rows per item and version): compare the versions",
    ),
    click.option(
        "--human",
        "humans",
        multiple=True,
        help="human label column (FILE mode). Repeat, with --judge as often, for a batch: the i-th --judge against "
        "the i-th --human, one report each (one --human: the --judge columns compared side by side)",
    ),
    click.option(
        "--annotator",
        default=None,
        help="annotator id column (enables the human–human ceiling). Without it, several rows for one --item "
        "are read as anonymous annotators (#1, #2 … in file order), with a note",
    ),
    click.option("--item", default=None, help="item id column (default: one item per row)"),
    click.option(
        "--group",
        default=None,
        help="cluster column (source document, or the item when one item appears under several conditions): the "
        "bootstrap resamples whole groups; with --protocol per-group, the groups to average over",
    ),
    click.option("--slice", "slices", multiple=True, help="report per value of this column (repeatable)"),
    click.option(
        "--score",
        default=None,
        help="column with the judge's raw score or probability for --pos-label: adds ROC-AUC and PR-AUC (average "
        "precision) with CIs; without --judge, labels come from --threshold / --choose-threshold (or only AUCs)",
    ),
    click.option(
        "--confidence",
        default=None,
        help="column with the judge's confidence in its answer (0..1): adds a calibration report (reliability "
        "diagram, ECE, Brier). Default: a column named judge_confidence, when the file has one",
    ),
    click.option("--reason", default=None, help="column shown as 'reason' in the HTML gallery"),
    click.option("--comment", default=None, help="column shown as 'comment' in the HTML gallery"),
    click.option(
        "--pair-by",
        "pair_by",
        default=None,
        help="column naming two runs of the judge per item (e.g. order = original / swapped, or seed): report "
        "how often the two runs agree (consistency) and κ, instead of agreement with people (no --human)",
    ),
)

SCALE = bundle(
    "scale",
    ScaleFlags,
    click.option("--kind", type=click.Choice(["categorical", "value"]), default="categorical", show_default=True),
    click.option("--labels", default=None, help="comma-separated labels in the spec's order (low → high if ordered)"),
    click.option("--ordered", is_flag=True, help="labels are ordered: weighted κ, ordinal α, signed bias"),
    click.option("--min", "vmin", type=float, default=None, help="value scale minimum"),
    click.option("--max", "vmax", type=float, default=None, help="value scale maximum"),
)

COMPUTE = bundle(
    "compute",
    ComputeFlags,
    click.option(
        "--relabel",
        multiple=True,
        metavar="FROM=TO",
        help='relabel raw answers on both sides (repeatable), e.g. --relabel "2=0". Formerly --map, which means '
        "FIELD=COLUMN in every other command and is refused here",
    ),
    click.option("--map", "old_map", multiple=True, hidden=True, help="retired: --relabel FROM=TO"),
    click.option(
        "--missing-values",
        "missing_values",
        multiple=True,
        help="answers that mean 'no answer' (repeatable or comma list, exact text), e.g. --missing-values NA,n/a. "
        "Default: only an empty cell or a JSON/Parquet null; 'NA', 'None', 'null', 'N/A', 'nan' are labels "
        "otherwise",
    ),
    INVALID_OPTION,
    click.option(
        "--pos-label",
        default=None,
        help="the positive label: adds its precision, recall and F1 (vs the rest) to the headline; needed by --score",
    ),
    click.option(
        "--calibration-bins",
        type=click.IntRange(1, 100),
        default=10,
        show_default=True,
        help="equal-width confidence bins of the calibration report",
    ),
    click.option(
        "--threshold",
        type=float,
        default=None,
        help="with --score: the judge says --pos-label when its score passes T (see --threshold-rule), else the "
        "other label",
    ),
    click.option(
        "--threshold-rule",
        type=click.Choice(["gt", "ge"]),
        default="ge",
        show_default=True,
        help="gt: positive when score > T; ge: when score ≥ T (papers differ: say which yours used)",
    ),
    click.option(
        "--choose-threshold",
        type=click.Choice(["max-f1", "max-balanced-accuracy", "youden"]),
        default=None,
        help="with --score and --select-on: choose T on the selection rows (grid: their distinct scores; ties → "
        "the lowest T) and evaluate on the other rows",
    ),
    click.option(
        "--select-on",
        default=None,
        metavar="COL=VALUE",
        help="rows that choose the threshold, e.g. split=dev; every other row is evaluated",
    ),
    click.option(
        "--invalid-pairs",
        type=click.Choice(["agree", "disagree"]),
        default="disagree",
        show_default=True,
        help="with --pair-by: whether an item whose two answers are both invalid counts as consistent",
    ),
    click.option(
        "--protocol",
        type=click.Choice(["pooled", "per-group"]),
        default="pooled",
        show_default=True,
        help="per-group (needs --group): every headline figure inside each group, then the unweighted mean over "
        "the groups ('Average' in papers); per-group values are listed; the bootstrap resamples items within "
        "groups",
    ),
    click.option(
        "--bootstrap",
        "resamples",
        type=click.IntRange(min=0),
        default=1000,
        show_default=True,
        help="resamples for the CIs (0: none); the report says what was resampled: rows, items, groups, or items "
        "within groups",
    ),
    click.option("--seed", type=int, default=0, show_default=True),
    click.option(
        "--gold",
        default=None,
        metavar="METHOD|ANNOTATOR",
        help="compare the judge with this gold instead of people's majority, and show each reviewer against it "
        "with the judge beside them: majority (ties reported), dawid-skene or mace (a label model's estimate, "
        "with its posterior), adjudicated:NAME[,NAME] (those adjudicators' labels win, else the majority), or "
        "an annotator's name (annotator:NAME when it is also a method's)",
    ),
)

OUTPUTS = bundle(
    "outputs",
    Outputs,
    click.option(
        "--json",
        "json_out",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="write the full report as JSON (full precision); a batch writes one JSON, its tables in order",
    ),
    click.option(
        "--html",
        "html_out",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="write a self-contained HTML report (one --judge)",
    ),
    click.option(
        "--markdown",
        "md_out",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="write a Markdown summary (one --judge)",
    ),
    click.option(
        "--decimals",
        type=click.IntRange(0, 15),
        default=6,
        show_default=True,
        help="decimals printed (JSON keeps full precision)",
    ),
)


@click.command("agreement")
@SOURCE
@COLUMNS
@SCALE
@COMPUTE
@OUTPUTS
@read_limit_options
def agreement(
    source: Source, columns: Columns, scale: ScaleFlags, compute: ComputeFlags, outputs: Outputs, limits: ReadLimits
) -> None:
    """Agreement between an LLM judge and human labels in FILE (csv/tsv/jsonl/json/parquet, .gz ok),
    or in a greval store (--store S --spec NAME). Several FILEs, or --judge / --human given in pairs, make a
    batch: one report per file and pair, in one process, one --json.

    \b
      greval agreement --store greval.sqlite --spec answer_alignment --html agreement.html
      greval agreement --store s.sqlite --spec faithfulness@1a2b3c4d5e6f --spec faithfulness@9f8e7d6c5b4a
      greval agreement --store s.sqlite --spec answer_alignment --dataset answer_alignment-blind
      greval agreement data.csv --judge judge_label --human human_label --annotator annotator --item id
      greval agreement data.csv --judge j --human h --annotator who --item id --gold dawid-skene
      greval agreement data.csv --judge j --human h --relabel "2=0" --relabel "3=1"
      greval agreement a.csv b.csv --judge j1 --human h1 --judge j2 --human h2 --json all.json   # a batch
    """
    from greval.cli.agreement_modes import run

    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        run(console, source, columns, scale, compute, outputs, limits)
    except UserError as exc:
        fail(exc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        fail(f"{where + ': ' if where else ''}{msg}")


def frame_from_file(
    file: str | Path,
    judge: str,
    human: str,
    item: str | None = None,
    annotator: str | None = None,
    group: str | None = None,
) -> pd.DataFrame:
    """Convenience for Python callers: read a file and map its columns like the CLI does."""
    return to_agreement_frame(read_table(file), judge, human, item=item, annotator=annotator, group=group)

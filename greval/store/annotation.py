"""What was pushed to Argilla for people to label: each push and the units it selected, with the probability
each unit had of being selected (agreement on a non-uniform sample is reweighted with it)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import NamedTuple, TypedDict

from greval.store.connection import StoreFile


class PushedUnit(TypedDict):
    """One unit a push selected: a record (``item_id == ""``) or one of its items, and why."""

    record_hash: str
    item_id: str
    record_id: str
    argilla_id: str
    stratum: str
    probability: float
    rank: int


class SelectedUnit(TypedDict):
    """Where an Argilla record of a metric came from."""

    argilla_id: str
    record_hash: str
    item_id: str
    record_id: str


class ReviewCounts(NamedTuple):
    """What an Argilla dataset of a metric holds for people, as the store knows it (see
    :meth:`AnnotationPushes.review_counts`): the one count every command prints."""

    units: int  # records (or items) in the dataset
    labelled: int  # of those, with the submitted answers the dataset asks for

    @property
    def waiting(self) -> int:
        """Units still waiting for a person's label."""
        return self.units - self.labelled


class AnnotationPushes(StoreFile):
    """The ``annotation_pushes`` and ``annotation_selection`` tables."""

    def start_push(
        self,
        push_id: str,
        *,
        spec_name: str,
        spec_key: str,
        spec_hash: str,
        judge_key: str,
        dataset: str,
        workspace: str | None,
        api_url: str,
        strategy: str,
        params: str,
        population: int,
        units: Sequence[PushedUnit],
    ) -> None:
        """Record a push and its selection before anything is sent (a push run again counts an attempt)."""
        now = time.time()
        with self._tx() as db:
            db.execute(
                "INSERT INTO annotation_pushes (push_id, spec_name, spec_key, spec_hash, judge_key, dataset,"
                " workspace, api_url, strategy, params, population, selected, pushed, status, attempts,"
                " created_at, updated_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,0,'running',1,?,?) ON CONFLICT(push_id) DO UPDATE SET"
                " status='running', attempts=attempts+1, updated_at=excluded.updated_at",
                (
                    push_id,
                    spec_name,
                    spec_key,
                    spec_hash,
                    judge_key,
                    dataset,
                    workspace,
                    api_url,
                    strategy,
                    params,
                    population,
                    len(units),
                    now,
                    now,
                ),
            )
            db.executemany(
                "INSERT INTO annotation_selection (push_id, spec_name, record_hash, item_id, record_id,"
                " argilla_id, stratum, probability, rank, pushed_at) VALUES (?,?,?,?,?,?,?,?,?,NULL)"
                " ON CONFLICT DO NOTHING",
                [
                    (
                        push_id,
                        spec_name,
                        u["record_hash"],
                        u["item_id"],
                        u["record_id"],
                        u["argilla_id"],
                        u["stratum"],
                        u["probability"],
                        u["rank"],
                    )
                    for u in units
                ],
            )

    def mark_pushed(self, push_id: str, units: Sequence[tuple[str, str]], pushed: int) -> None:
        """A batch of (record hash, item id) units reached Argilla; ``pushed`` units of the push so far."""
        stamp = time.time()
        with self._tx() as db:
            db.executemany(
                "UPDATE annotation_selection SET pushed_at=? WHERE push_id=? AND record_hash=? AND item_id=?",
                [(stamp, push_id, h, i) for h, i in units],
            )
            db.execute("UPDATE annotation_pushes SET pushed=?, updated_at=? WHERE push_id=?", (pushed, stamp, push_id))

    def finish_push(self, push_id: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE annotation_pushes SET status='done', updated_at=? WHERE push_id=?", (time.time(), push_id)
            )

    def latest_push(self, spec_name: str) -> str | None:
        """The id of a metric's most recent push (None when it was never pushed)."""
        rows = self._rows(
            "SELECT push_id FROM annotation_pushes WHERE spec_name=? ORDER BY updated_at DESC LIMIT 1", (spec_name,)
        )
        return str(rows[0][0]) if rows else None

    def latest_push_to(self, spec_name: str, dataset: str, strategy: str) -> tuple[str, str, str] | None:
        """(push id, judge key, params JSON) of the most recent push of a metric to one dataset with one strategy."""
        rows = self._rows(
            "SELECT push_id, judge_key, params FROM annotation_pushes WHERE spec_name=? AND dataset=? AND strategy=?"
            " ORDER BY updated_at DESC LIMIT 1",
            (spec_name, dataset, strategy),
        )
        return (str(rows[0][0]), str(rows[0][1]), str(rows[0][2])) if rows else None

    def push_units(self, push_id: str) -> dict[tuple[str, str], tuple[str, float]]:
        """(record hash, item id) -> (stratum, inclusion probability) of every unit one push selected."""
        rows = self._rows(
            "SELECT record_hash, item_id, stratum, probability FROM annotation_selection WHERE push_id=?"
            " ORDER BY record_hash, item_id",
            (push_id,),
        )
        return {(str(h), str(i)): (str(s), float(p)) for h, i, s, p in rows}

    def selection_probabilities(self, push_id: str) -> dict[tuple[str, str], float]:
        """(record hash, item id) -> the probability that unit had of being selected by a push."""
        rows = self._rows(
            "SELECT record_hash, item_id, probability FROM annotation_selection WHERE push_id=?"
            " ORDER BY record_hash, item_id",
            (push_id,),
        )
        return {(h, i): float(p) for h, i, p in rows}

    def dataset_selections(self, spec_name: str) -> dict[str, dict[tuple[str, str], tuple[str, float]]]:
        """Per Argilla dataset of a metric, how its latest push chose each unit: (record hash, item id) ->
        (stratum, inclusion probability). Datasets filled by import-labels have no push and are absent."""
        rows = self._rows(
            "SELECT p.dataset, s.record_hash, s.item_id, s.stratum, s.probability FROM annotation_selection s"
            " JOIN annotation_pushes p ON p.push_id = s.push_id WHERE p.spec_name=? AND p.push_id = ("
            "SELECT q.push_id FROM annotation_pushes q WHERE q.spec_name = p.spec_name AND q.dataset = p.dataset"
            " ORDER BY q.updated_at DESC, q.rowid DESC LIMIT 1) ORDER BY p.rowid, s.record_hash, s.item_id",
            (spec_name,),
        )
        out: dict[str, dict[tuple[str, str], tuple[str, float]]] = {}
        for dataset, h, i, stratum, prob in rows:
            out.setdefault(str(dataset), {})[(str(h), str(i))] = (str(stratum), float(prob))
        return out

    def selected_units(self, spec_name: str) -> list[SelectedUnit]:
        """Every unit any push of a metric selected, with its Argilla record id."""
        rows = self._rows(
            "SELECT DISTINCT argilla_id, record_hash, item_id, record_id FROM annotation_selection WHERE spec_name=?"
            " ORDER BY record_hash, item_id, argilla_id, record_id",
            (spec_name,),
        )
        return [SelectedUnit(argilla_id=a, record_hash=h, item_id=i, record_id=r) for a, h, i, r in rows]

    def review_counts(self, spec_name: str, dataset: str) -> ReviewCounts:
        """The one definition of "labelled" and "waiting for a label" in an Argilla dataset of a metric.

        Its units are those a push sent there (every push to it: Argilla keeps what earlier pushes sent) and
        those with answers stored under it (imported into it, or pulled from it); a unit is labelled once it
        has as many submitted answers as the dataset asks for (its latest push's annotators per record, else
        1). Answers given in Argilla count once pulled: pull first for Argilla's own figure."""
        pushes = self._rows(
            "SELECT params FROM annotation_pushes WHERE spec_name=? AND dataset=? ORDER BY updated_at DESC LIMIT 1",
            (spec_name, dataset),
        )
        needed = int(json.loads(pushes[0][0]).get("annotators_per_record") or 1) if pushes else 1
        rows = self._rows(
            "SELECT COUNT(*), COALESCE(SUM(CASE WHEN a.n >= ? THEN 1 ELSE 0 END), 0) FROM ("
            "SELECT s.record_hash, s.item_id FROM annotation_selection s JOIN annotation_pushes p"
            " ON p.push_id = s.push_id WHERE p.spec_name=? AND p.dataset=? AND s.pushed_at IS NOT NULL"
            " UNION SELECT record_hash, item_id FROM human_labels WHERE spec_name=? AND dataset=?) u"
            " LEFT JOIN (SELECT record_hash, item_id, COUNT(DISTINCT annotator) AS n FROM human_labels"
            " WHERE spec_name=? AND dataset=? AND status='submitted' GROUP BY record_hash, item_id) a"
            " ON a.record_hash = u.record_hash AND a.item_id = u.item_id",
            (needed, spec_name, dataset, spec_name, dataset, spec_name, dataset),
        )
        return ReviewCounts(units=int(rows[0][0]), labelled=int(rows[0][1]))

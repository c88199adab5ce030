"""Which version of a metric a reader reads: the loop's state kept in the store (schema 7).

A metric (a spec name) has one **production** version per store, the last row of ``promotions`` for its name. The
first run that declares the metric sets it; it changes only when someone says so — ``greval spec promote``,
``greval align --adopt``, a run asked to promote — or when a finished run judged the same spec under a new key
whose dependencies are production too (a new prompt layout, a dependency promoted): the same metric, re-judged.

Runs are ``run`` or ``experiment`` (align candidates, ``spec try``, side runs). An experiment is stored like any
run (resumable, paid once) but no reader picks it by default, by construction: it never promotes, the spec
versions only experiments declared are marked so (``specs.experiment``, written in the same statement that
declares them), and the record ids only it brought are kept in its snapshot alone, never in ``record_ids``, which
every default reader joins. There is nothing to restore after an experiment, so a crash leaves nothing behind.

Every reader asks :meth:`SpecVersions.metric_version` (``NAME`` → production, ``NAME@HASH`` → that version) or
:meth:`SpecVersions.reader_keys` (the versions a default reader reads) and says which version it read.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, Field

from greval.errors import UserError
from greval.spec import BaseSpec
from greval.store.backend import DB
from greval.store.connection import StoreFile

#: Why a metric's production version changed (``promotions.source``).
PromotionSource = Literal["first run", "promote", "align", "run", "same spec", "migration"]

#: The kinds of runs: an experiment is never what a reader reads by default.
RunKind = Literal["run", "experiment"]


class Version(BaseModel):
    """One stored version of a metric, as a reader resolved it."""

    name: str
    spec_key: str
    spec_hash: str
    production: bool = Field(description="The metric's production version (what readers default to).")
    experiment: bool = Field(description="Only experiments (align candidates, spec try, side runs) declared it.")
    named: bool = Field(False, description="Asked for by NAME@HASH (else the reader's default).")

    @property
    def ref(self) -> str:
        """``NAME@HASH``: how a user names this version on the command line."""
        return f"{self.name}@{self.spec_hash}"

    def said(self) -> str:
        """How a reader says what it read: ``faithfulness@1a2b3c4d5e6f (production)``."""
        what = "production" if self.production else "experiment" if self.experiment else "not production"
        return f"{self.ref} ({what})"


class Promotion(BaseModel):
    """One change of a metric's production version."""

    name: str
    spec_key: str
    spec_hash: str
    at: float
    source: str
    note: str | None = None
    run_id: str | None = None


class VersionRow(BaseModel):
    """One stored version of a metric, as ``greval spec versions`` lists it."""

    name: str
    spec_key: str
    spec_hash: str
    declared_at: float = Field(description="When a run (or a server) last declared it.")
    production: bool
    experiment: bool
    verdicts: int = Field(description="Its verdicts a reader sees (an experiment's own: all of them).")
    runs: int = Field(description="Finished runs, experiments included, whose summary lists it.")


class Follow(BaseModel):
    """What a finished run did to the production versions of its metrics, and what to tell its user."""

    promoted: list[Promotion] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


def parse_ref(ref: str) -> tuple[str, str]:
    """``NAME`` or ``NAME@HASH`` → (name, version: '' when none)."""
    name, _, version = ref.partition("@")
    return name.strip(), version.strip()


class SpecVersions(StoreFile):
    """Reads and writes of the loop's state: production versions, experiment versions and runs."""

    # ------------------------------------------------------------------------------------------- reads
    def production_keys(self) -> dict[str, str]:
        """Each metric's production version (its key), by name."""
        rows = self._rows("SELECT name, spec_key FROM promotions ORDER BY name, at, rowid")
        return {str(name): str(key) for name, key in rows}

    def production_key(self, name: str) -> str | None:
        row = self._rows("SELECT spec_key FROM promotions WHERE name=? ORDER BY at DESC, rowid DESC LIMIT 1", (name,))
        return str(row[0][0]) if row else None

    def experiment_keys(self) -> set[str]:
        """The spec versions only experiments declared."""
        return {str(k) for (k,) in self._rows("SELECT spec_key FROM specs WHERE experiment=1")}

    def metric_names(self, *, experiments: bool = False) -> list[str]:
        """The metrics the store knows (those only experiments declared, when ``experiments``)."""
        where = "" if experiments else " WHERE experiment=0"
        return sorted({str(n) for (n,) in self._rows(f"SELECT DISTINCT name FROM specs{where}")})

    def metric_version(self, ref: str) -> Version:
        """``NAME``: the metric's production version; ``NAME@HASH``: the version whose spec hash or key is, or
        starts with, HASH (any version, experiments included: named, it is what the user asked for). A name or
        version the store does not have is a :class:`UserError` naming what it has."""
        name, wanted = parse_ref(ref)
        rows = self._rows(
            "SELECT spec_key, spec_hash, experiment FROM specs WHERE name=? ORDER BY created_at DESC, rowid DESC",
            (name,),
        )
        if not rows:
            raise UserError(self._no_metric(name))
        production = self.production_key(name)
        if wanted:
            found = [r for r in rows if str(r[1]).startswith(wanted) or str(r[0]).startswith(wanted)]
            exact = [r for r in found if wanted in (r[0], r[1])]
            if not found:
                have = ", ".join(dict.fromkeys(str(r[1])[:12] for r in rows))
                raise UserError(f"{self.name}: no version {wanted!r} of {name!r} (its versions: {have})")
            if len({r[0] for r in exact or found}) > 1 and not exact:
                raise UserError(f"{self.name}: {ref!r} names several versions of {name!r}: give more of the hash")
            # one hash, several keys (a new prompt layout, another dependency): production, else the newest run's
            chosen = sorted(exact or found, key=lambda r: (r[0] != production, bool(r[2])))
            key, spec_hash, experiment = chosen[0]
            return Version(
                name=name,
                spec_key=key,
                spec_hash=spec_hash,
                production=key == production,
                experiment=bool(experiment),
                named=True,
            )
        if production is None:  # only experiments declared it
            raise UserError(
                f"{self.name}: {name!r} has no production version: only experiments judged it "
                f"(name one as {name}@HASH; `greval spec versions {name}` lists them)"
            )
        spec_hash = next(str(r[1]) for r in rows if r[0] == production)
        return Version(name=name, spec_key=production, spec_hash=spec_hash, production=True, experiment=False)

    def _no_metric(self, name: str) -> str:
        known = self.metric_names()
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f" (has: {', '.join(known) or 'none'})"
        return f"{self.name}: no metric {name!r} in this store{hint}"

    def reader_keys(self, spec: str | None = None, *, all_versions: bool = False) -> list[str]:
        """The spec versions a reader reads: ``spec`` given (NAME or NAME@HASH), that metric's version
        (:meth:`metric_version`), or with ``all_versions`` every version of the metric no experiment alone declared;
        else the production version of every metric (every version none but experiments declared, with
        ``all_versions``)."""
        if spec is not None:
            name, wanted = parse_ref(spec)
            if wanted or not all_versions:
                return [self.metric_version(spec).spec_key]
            self.metric_version(name)  # the name must exist
            rows = self._rows(
                "SELECT spec_key FROM specs WHERE name=? AND experiment=0 ORDER BY created_at, rowid", (name,)
            )
            return [str(k) for (k,) in rows]
        if all_versions:
            return [str(k) for (k,) in self._rows("SELECT spec_key FROM specs WHERE experiment=0 ORDER BY name")]
        return list(self.production_keys().values())

    def version_rows(self, name: str) -> list[VersionRow]:
        """Every stored version of ``name``, oldest first (a name the store lacks: one line with did you mean)."""
        rows = self._rows(
            "SELECT s.spec_key, s.spec_hash, s.created_at, s.experiment, (SELECT COUNT(*) FROM verdicts v"
            " WHERE v.spec_key = s.spec_key AND (s.experiment = 1 OR NOT EXISTS (SELECT 1 FROM experiment_verdicts e"
            " WHERE e.spec_key = v.spec_key AND e.judge_key = v.judge_key AND e.record_hash = v.record_hash)))"
            " FROM specs s WHERE s.name=? ORDER BY s.created_at, s.rowid",
            (name,),
        )
        if not rows:
            raise UserError(self._no_metric(name))
        production = self.production_key(name)
        runs: dict[str, int] = {}
        for (summary,) in self._rows("SELECT summary FROM runs WHERE status='finished' AND summary IS NOT NULL"):
            for m in _summary_metrics(summary):
                if m.get("spec") == name and m.get("spec_key"):
                    runs[str(m["spec_key"])] = runs.get(str(m["spec_key"]), 0) + 1
        return [
            VersionRow(
                name=name,
                spec_key=k,
                spec_hash=h,
                declared_at=float(at),
                production=k == production,
                experiment=bool(exp),
                verdicts=int(n),
                runs=runs.get(k, 0),
            )
            for k, h, at, exp, n in rows
        ]

    def promotions(self, name: str | None = None) -> list[Promotion]:
        """Every change of production versions, oldest first (of one metric: ``name``)."""
        where, params = (" WHERE p.name=?", (name,)) if name else ("", ())
        rows = self._rows(
            "SELECT p.name, p.spec_key, s.spec_hash, p.at, p.source, p.note, p.run_id FROM promotions p"
            f" JOIN specs s ON s.spec_key = p.spec_key{where} ORDER BY p.at, p.rowid",
            params,
        )
        return [
            Promotion(name=n, spec_key=k, spec_hash=h, at=float(at), source=src, note=note, run_id=run)
            for n, k, h, at, src, note, run in rows
        ]

    def run_kind(self, run_id: str | None) -> RunKind:
        """Whether a run is an experiment (a run this store does not know, or none, is a run)."""
        if run_id is None:
            return "run"
        row = self._rows("SELECT kind FROM runs WHERE run_id=?", (run_id,))
        return "experiment" if row and row[0][0] == "experiment" else "run"

    def has_hidden(self) -> bool:
        """Whether any judgement an experiment made is still hidden from readers (most stores: none, and the
        readers' queries skip the check)."""
        return bool(self._rows("SELECT 1 FROM experiment_verdicts LIMIT 1"))

    # ------------------------------------------------------------------------------------------ writes
    def adopt(self, run_id: str, versions: Iterable[tuple[str, str]]) -> None:
        """A run (not an experiment) reused judgements an experiment made, under these (spec key, judge key):
        those of its records are the run's now, and readers see them."""
        pairs = list(dict.fromkeys(versions))
        if not pairs or not self.has_hidden():
            return

        def write(db: DB) -> None:
            for spec_key, judge_key in pairs:
                db.execute(
                    "DELETE FROM experiment_verdicts WHERE spec_key=? AND judge_key=? AND record_hash IN"
                    " (SELECT m.record_hash FROM snapshot_members m JOIN runs r ON r.snapshot = m.snapshot"
                    " WHERE r.run_id=?)",
                    (spec_key, judge_key, run_id),
                )

        self._write(write)

    def adopt_judgement(self, spec_key: str, judge_key: str, record_hash: str) -> None:
        """:meth:`adopt` for one judgement a server answered from the store."""
        if self.has_hidden():
            self._write(
                lambda db: db.execute(
                    "DELETE FROM experiment_verdicts WHERE spec_key=? AND judge_key=? AND record_hash=?",
                    (spec_key, judge_key, record_hash),
                )
            )

    def promote(
        self, name: str, spec_key: str, source: PromotionSource, note: str | None = None, run_id: str | None = None
    ) -> Promotion:
        """Make ``spec_key`` the production version of ``name`` (the version becomes a normal one: whatever an
        experiment declared, once promoted it is what readers read)."""
        now = time.time()

        def write(db: DB) -> None:
            db.execute(
                "INSERT INTO promotions (name, spec_key, at, source, note, run_id) VALUES (?,?,?,?,?,?)",
                (name, spec_key, now, source, note, run_id),
            )
            db.execute("UPDATE specs SET experiment=0 WHERE spec_key=?", (spec_key,))
            # what experiments judged of it on the store's records (not an experiment's own) is production's now
            db.execute(
                "DELETE FROM experiment_verdicts WHERE spec_key=?"
                " AND record_hash IN (SELECT record_hash FROM record_ids)",
                (spec_key,),
            )

        self._write(write)
        spec_hash = str(self._rows("SELECT spec_hash FROM specs WHERE spec_key=?", (spec_key,))[0][0])
        return Promotion(
            name=name, spec_key=spec_key, spec_hash=spec_hash, at=now, source=source, note=note, run_id=run_id
        )

    def follow(
        self, specs: Sequence[BaseSpec], keys: Mapping[str, str], *, promote: Iterable[str] = (), run_id: str
    ) -> Follow:
        """After a finished run (not an experiment) of ``specs`` under ``keys``: promote the versions the user
        asked to (``promote``: names), and those that are the production version's spec under a new key whose
        dependencies are production (a new prompt layout; a dependency promoted). Every other version judged
        stays beside production, and a note says how to promote it."""
        out = Follow()
        asked = set(promote)
        for s in specs:  # in dependency order: a dependency promoted here counts for the metrics reading it
            key, current = keys[s.name], self.production_key(s.name)
            if key == current:
                continue
            same = current is not None and self._hash_of(current) == s.hash
            deps_production = all(keys.get(d) == self.production_key(d) for d in s.depends_on)
            if s.name in asked or (same and deps_production):
                source: PromotionSource = "run" if s.name in asked else "same spec"
                out.promoted.append(self.promote(s.name, key, source, run_id=run_id))
            elif current is not None:
                out.notes.append(
                    f"{s.name}: this run judged version {s.hash}; the production version stays "
                    f"{self._hash_of(current)} (what gate, agreement, report and export read by default): "
                    f"promote it with `greval spec promote {s.name}@{s.hash}`"
                )
        return out

    def _hash_of(self, spec_key: str) -> str:
        rows = self._rows("SELECT spec_hash FROM specs WHERE spec_key=?", (spec_key,))
        return str(rows[0][0]) if rows else spec_key


def _summary_metrics(summary: str) -> list[dict[str, object]]:
    """A stored run summary's metric entries (none when it cannot be read)."""

    try:
        found = json.loads(summary).get("metrics", [])
    except (ValueError, AttributeError):
        return []
    return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []


__all__ = [
    "Follow",
    "Promotion",
    "PromotionSource",
    "RunKind",
    "SpecVersions",
    "Version",
    "VersionRow",
    "parse_ref",
]

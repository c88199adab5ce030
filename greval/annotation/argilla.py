"""The connection to Argilla and its REST helpers: workspaces, datasets, users, records in bulk.

Bulk calls go straight to the REST API (one request per batch; its record list keeps the response
timestamps the SDK drops); the SDK is used to log in and to create a dataset from its settings. Every
refusal becomes an ``AnnotationError`` whose message carries no echoed input and no secret.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import argilla as rg
import httpx
from argilla._exceptions import ArgillaCredentialsError  # argilla 2.x exports its exceptions only here

from greval.annotation import dataset as ds
from greval.annotation import server
from greval.annotation.errors import AnnotationError
from greval.errors import Remedy, option
from greval.spec import CategoricalScale, Spec

DEFAULT_BATCH = 500
_LIST_LIMIT = 1000  # argilla-server's maximum page size for listing records


@dataclass
class Connection:
    """An Argilla client plus its raw HTTP client (bulk calls go straight to the REST API, one request per
    batch). ``repr`` shows no key."""

    url: str
    client: rg.Argilla = field(repr=False)
    workspace: str | None = None

    @property
    def http(self) -> httpx.Client:
        h: httpx.Client = self.client.api.http_client
        return h

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.http.close()


def connect(
    api_url: str | None, api_key: str | None, data_dir: Path | None = None, workspace: str | None = None
) -> Connection:
    """Connect to ``api_url`` with ``api_key``, or by default to the embedded server's credentials."""
    if api_url and not api_key:
        raise AnnotationError(f"{option('api_url')} needs an API key: pass {option('api_key')} or set ARGILLA_API_KEY")
    if not api_url:
        st = server.status(data_dir)
        if not st.running or not st.url:
            raise AnnotationError(
                f"no Argilla server: pass {option('api_url')}/{option('api_key')} (or set ARGILLA_API_URL / "
                "ARGILLA_API_KEY)",
                remedy=Remedy("annotate up", why="to start the embedded one"),
            )
        creds = server.read_credentials(data_dir)
        api_url, api_key = st.url, api_key or creds.get("api_key")
        workspace = workspace or creds.get("workspace")
        if not api_key:
            raise AnnotationError(f"no API key in the embedded server's credentials ({st.data_dir})")
    try:
        client = rg.Argilla(api_url=api_url, api_key=api_key, timeout=120)
        me = client.api.http_client.get("/api/v1/me")
    except ArgillaCredentialsError:  # the SDK's answer to a 401 when it checks the key
        raise AnnotationError(f"Argilla at {api_url} refused the API key") from None
    except Exception as exc:  # the SDK wraps connection failures in its own types
        raise AnnotationError(f"cannot reach Argilla at {api_url}: {_short(exc)}") from None
    if me.status_code in (401, 403):
        raise AnnotationError(f"Argilla at {api_url} refused the API key (HTTP {me.status_code})")
    return Connection(url=api_url, client=client, workspace=workspace)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _scrub(value: Any) -> Any:
    """Drop echoed inputs and secrets from an error body before it reaches a message."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in ("input", "password", "api_key", "ctx")}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _check(resp: httpx.Response, what: str) -> Any:
    if resp.status_code >= 400:
        try:
            detail = json.dumps(_scrub(resp.json().get("detail")))[:300]
        except (ValueError, AttributeError):
            detail = resp.text[:300]
        raise AnnotationError(f"Argilla refused to {what} (HTTP {resp.status_code}): {detail}")
    return resp.json() if resp.content else None


def _workspace(conn: Connection, workspace: str | None) -> str:
    name = workspace or conn.workspace
    if name:
        return name
    items = _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]
    if not items:
        raise AnnotationError(f"this Argilla user has no workspace; pass {option('workspace')}")
    return str(items[0]["name"])


def find_dataset(conn: Connection, name: str, workspace: str | None) -> dict[str, Any] | None:
    """The dataset named ``name`` in the workspace, as the REST API describes it (None if absent)."""
    ws = _workspace(conn, workspace)
    items = _check(conn.http.get("/api/v1/me/datasets"), "list datasets")["items"]
    ws_ids = {w["name"]: w["id"] for w in _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]}
    for d in items:
        if d["name"] == name and d["workspace_id"] == ws_ids.get(ws):
            return dict(d)
    return None


def _questions(conn: Connection, dataset_id: str) -> dict[str, dict[str, Any]]:
    items = _check(conn.http.get(f"/api/v1/datasets/{dataset_id}/questions"), "read the questions")["items"]
    return {q["name"]: q for q in items}


def _names(conn: Connection, dataset_id: str, what: str, me: bool = False) -> set[str]:
    prefix = "/api/v1/me/datasets" if me else "/api/v1/datasets"
    items = _check(conn.http.get(f"{prefix}/{dataset_id}/{what}"), f"read the {what}")["items"]
    return {str(i["name"]) for i in items}


def _options(question: Mapping[str, Any]) -> list[Any]:
    return [o["value"] for o in question.get("settings", {}).get("options", [])]


@dataclass(frozen=True)
class DistributionChange:
    """``--annotators-per-record`` changed on a dataset that already existed (applied with ``force``)."""

    before: int
    after: int
    completed: int | None  # records completed under the old setting (None: the server did not say)
    total: int | None


@dataclass
class DatasetHandle:
    """What a push needs to know about the dataset on the server."""

    id: str
    name: str
    workspace: str
    question_id: str
    comment_id: str | None
    fields: set[str]
    metadata: set[str]
    created: bool = False
    distribution_change: DistributionChange | None = None
    annotators_per_record: int | None = None  # the dataset's setting after this call (None: unknown)
    updated: tuple[str, ...] = ()  # what this call brought in line with the spec ("guidelines", "question")


def dataset_progress(conn: Connection, dataset_id: str) -> tuple[int, int] | None:
    """(completed, total) records of a dataset, or None when the server will not say."""
    try:
        resp = conn.http.get(f"/api/v1/datasets/{dataset_id}/progress")
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    body = resp.json()
    return int(body.get("completed", 0)), int(body.get("total", 0))


def ensure_dataset(
    conn: Connection,
    spec: Spec,
    name: str,
    workspace: str | None,
    *,
    blind: bool = False,
    annotators_per_record: int | None = None,
    create: bool = True,
    force: bool = False,
    adjudication: bool = False,
) -> DatasetHandle:
    """Create the dataset for a spec, or check that the existing one asks the same question.

    ``annotators_per_record``: the submitted answers a record needs (Argilla's task distribution). A new
    dataset gets it (default 1); an existing one keeps its own when it is None. Changing it on an existing
    dataset recounts every record's progress, so it is refused unless ``force``. ``adjudication``: a dataset
    of disputed records, with every review shown (see ``adjudicate.py``)."""
    ws = _workspace(conn, workspace)
    found = find_dataset(conn, name, ws)
    created = False
    if found is None:
        if not create:
            raise AnnotationError(f"no Argilla dataset {name!r} in workspace {ws!r}; push first")
        found = _create_dataset(conn, spec, name, ws, blind, annotators_per_record or 1, adjudication)
        created = True
    did = str(found["id"])
    questions = _questions(conn, did)
    q = questions.get(ds.QUESTION)
    if q is None:
        raise AnnotationError(
            f"Argilla dataset {name!r} has no question {ds.QUESTION!r}; it was not made by "
            f"greval - choose another name with {option('dataset')}"
        )
    change: DistributionChange | None = None
    updated: tuple[str, ...] = ()
    current = (found.get("distribution") or {}).get("min_submitted")
    if create:
        _check_options(q, spec, name)
        updated = sync_texts(conn, found, q, spec, blind, adjudication)
        if not created and annotators_per_record is not None and current not in (None, annotators_per_record):
            change = _change_distribution(conn, did, name, int(current), annotators_per_record, force)
    comment = questions.get(ds.COMMENT)
    return DatasetHandle(
        id=did,
        name=name,
        workspace=ws,
        question_id=str(q["id"]),
        comment_id=str(comment["id"]) if comment else None,
        fields=_names(conn, did, "fields"),
        metadata=_names(conn, did, "metadata-properties", me=True),
        created=created,
        distribution_change=change,
        annotators_per_record=change.after if change else (int(current) if current is not None else None),
        updated=updated,
    )


def sync_texts(
    conn: Connection,
    found: Mapping[str, Any],
    q: Mapping[str, Any],
    spec: Spec,
    blind: bool,
    adjudication: bool = False,
) -> tuple[str, ...]:
    """The dataset's guidelines and its question's title and description made the spec's (argilla-server 2.8
    updates both on a published dataset; a field's description it cannot change after publishing)."""
    done = []
    text = ds.guidelines(spec, blind=blind, adjudication=adjudication)
    if found.get("guidelines") != text:
        _check(conn.http.patch(f"/api/v1/datasets/{found['id']}", json={"guidelines": text}), "update the guidelines")
        done.append("guidelines")
    title, desc = ds.question_text(spec)
    if q.get("title") != title or q.get("description") != desc:
        body = {"title": title, "description": desc}
        _check(conn.http.patch(f"/api/v1/questions/{q['id']}", json=body), "update the question")
        done.append("question")
    return tuple(done)


def _create_dataset(
    conn: Connection, spec: Spec, name: str, ws: str, blind: bool, annotators_per_record: int, adjudication: bool
) -> dict[str, Any]:
    """A new dataset asking the spec's question; what the server lists for it."""
    settings = ds.build_settings(
        spec, conn.client, blind=blind, annotators_per_record=annotators_per_record, adjudication=adjudication
    )
    try:
        rg.Dataset(name=name, settings=settings, workspace=ws, client=conn.client).create()
    except Exception as exc:
        raise AnnotationError(f"cannot create the Argilla dataset {name!r} in {ws!r}: {_short(exc)}") from None
    found = find_dataset(conn, name, ws)
    if found is None:
        raise AnnotationError(f"the Argilla dataset {name!r} vanished right after it was created")
    return found


def _check_options(q: dict[str, Any], spec: Spec, name: str) -> None:
    """The dataset's question offers the spec's labels (or its values), in the spec's order."""
    want = (
        spec.scale.names
        if isinstance(spec.scale, CategoricalScale)
        else list(range(spec.scale.min, spec.scale.max + 1))
    )
    have = _options(q)
    if [str(x) for x in have] != [str(x) for x in want]:
        raise AnnotationError(
            f"Argilla dataset {name!r} asks for {have} but spec {spec.name!r} has {want}; "
            f"push to a new dataset with {option('dataset')}"
        )


def _change_distribution(
    conn: Connection, did: str, name: str, current: int, annotators_per_record: int, force: bool
) -> DistributionChange:
    """A dataset's submitted answers per record set to ``annotators_per_record`` (refused without ``force``:
    the server recounts every record's progress)."""
    progress = dataset_progress(conn, did)
    done = f"; {progress[0]} of {progress[1]} records are completed" if progress else ""
    if not force:
        raise AnnotationError(
            f"Argilla dataset {name!r} needs {current} submitted answer(s) per record{done}; "
            f"{option('annotators_per_record')} {annotators_per_record} would change that and recount "
            f"every record's progress: pass {option('force')} to apply it (or leave "
            f"{option('annotators_per_record')} out to keep {current})"
        )
    resp = conn.http.patch(
        f"/api/v1/datasets/{did}",
        json={"distribution": {"strategy": "overlap", "min_submitted": annotators_per_record}},
    )
    _check(resp, f"change {option('annotators_per_record')} of {name!r}")
    return DistributionChange(
        before=current,
        after=annotators_per_record,
        completed=progress[0] if progress else None,
        total=progress[1] if progress else None,
    )


def usernames(conn: Connection) -> dict[str, str]:
    """User id -> username: everyone for an owner; otherwise oneself and the members of the workspaces this key
    may list (an admin's), so a user who has left them is one the key cannot name."""
    resp = conn.http.get("/api/v1/users")
    if resp.status_code == 200:
        return {str(u["id"]): str(u["username"]) for u in resp.json()["items"]}
    me = _check(conn.http.get("/api/v1/me"), "read the current user")
    names = {str(me["id"]): str(me["username"])}
    for w in _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]:
        members = conn.http.get(f"/api/v1/workspaces/{w['id']}/users")
        if members.status_code == 200:
            names.update({str(u["id"]): str(u["username"]) for u in members.json()["items"]})
    return names


def iter_records(conn: Connection, dataset_id: str, include: str = "responses") -> Iterator[dict[str, Any]]:
    """Every record of a dataset, page by page (the REST list keeps response timestamps the SDK drops)."""
    offset = 0
    while True:
        resp = conn.http.get(
            f"/api/v1/datasets/{dataset_id}/records",
            params={"include": include, "offset": offset, "limit": _LIST_LIMIT},
        )
        page = _check(resp, "list the records")["items"]
        yield from page
        if len(page) < _LIST_LIMIT:
            return
        offset += len(page)


def ensure_user(conn: Connection, username: str, workspace: str) -> str:
    """The id of an annotator user (created with a random password if missing), member of the workspace."""
    users = {v: k for k, v in usernames(conn).items()}
    uid = users.get(username)
    if uid is None:
        resp = conn.http.post(
            "/api/v1/users",
            json={
                "username": username,
                "first_name": username,
                "role": "annotator",
                "password": secrets.token_urlsafe(18),
            },
        )
        uid = str(_check(resp, f"create the user {username!r}")["id"])
    ws = {w["name"]: w["id"] for w in _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]}
    if workspace in ws:
        members = _check(conn.http.get(f"/api/v1/workspaces/{ws[workspace]}/users"), "list workspace users")
        if uid not in {str(u["id"]) for u in members["items"]}:
            resp = conn.http.post(f"/api/v1/workspaces/{ws[workspace]}/users", json={"user_id": uid})
            _check(resp, f"add {username!r} to the workspace {workspace!r}")
    return uid


def bulk_upsert(
    conn: Connection, dataset_id: str, items: Sequence[Mapping[str, Any]], done: int = 0, total: int = 0
) -> None:
    """One request; a dead server becomes a one-line error saying that re-running finishes the job."""
    try:
        resp = conn.http.put(f"/api/v1/datasets/{dataset_id}/records/bulk", json={"items": list(items)})
    except httpx.HTTPError as exc:
        raise AnnotationError(
            f"Argilla at {conn.url} stopped answering after {done} of {total} records ({_short(exc)}); "
            "re-run the same command to finish (pushing is idempotent)"
        ) from None
    _check(resp, "store the records")


def batches(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]

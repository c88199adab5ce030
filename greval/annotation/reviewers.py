"""Reviewers of a team (issue 43): real Argilla users with a role, and their passwords kept in a private file.

Argilla 2.8 knows the roles owner, admin and annotator and controls access by workspace, so a greval
*annotator* is an Argilla annotator who is a member of the review workspace, and a greval *adjudicator* an
Argilla annotator who is a member of the adjudication workspace (``<workspace>-adjudication``): the
adjudication datasets live there, where the reviewers whose labels are being settled cannot answer them.
The role is therefore what Argilla itself enforces, and any owner's ``users list`` reads it back.

A generated password is written to a file readable by its owner only (0600, its directory 0700), keyed by
server URL and username; it is never printed or logged.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from greval.annotation.argilla import Connection, _check, _workspace
from greval.annotation.errors import AnnotationError
from greval.errors import option

Role = Literal["annotator", "adjudicator"]
ROLES: tuple[str, ...] = ("annotator", "adjudicator")
ADJUDICATION_SUFFIX = "-adjudication"
PASSWORDS_FILE = "reviewers.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


@dataclass(frozen=True)
class Reviewer:
    """One Argilla user as a reviewer: greval role(s) from workspace membership, Argilla's own role."""

    name: str
    roles: tuple[str, ...]  # "annotator", "adjudicator" (both: member of both workspaces); empty: neither
    argilla_role: str
    user_id: str
    workspace: str = ""  # where :func:`add_reviewer` made it a member


def adjudication_workspace(workspace: str) -> str:
    """The workspace of a review workspace's adjudication datasets (its members are the adjudicators)."""
    return f"{workspace}{ADJUDICATION_SUFFIX}"


def _workspaces(conn: Connection) -> dict[str, str]:
    items = _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]
    return {str(w["name"]): str(w["id"]) for w in items}


def ensure_workspace(conn: Connection, name: str) -> str:
    """The id of workspace ``name``, created when missing (needs an owner's key)."""
    found = _workspaces(conn).get(name)
    if found is not None:
        return found
    return str(
        _check(conn.http.post("/api/v1/workspaces", json={"name": name}), f"create the workspace {name!r}")["id"]
    )


def _members(conn: Connection, workspace_id: str) -> set[str]:
    items = _check(conn.http.get(f"/api/v1/workspaces/{workspace_id}/users"), "list workspace users")["items"]
    return {str(u["id"]) for u in items}


def _all_users(conn: Connection) -> list[dict[str, Any]]:
    resp = conn.http.get("/api/v1/users")
    if resp.status_code in (401, 403):
        raise AnnotationError("listing and adding reviewers needs an Argilla owner's API key")
    return list(_check(resp, "list users")["items"])


def list_reviewers(conn: Connection, workspace: str | None = None) -> list[Reviewer]:
    """Every user of the server with the greval role(s) their workspace memberships give, by name."""
    ws = _workspace(conn, workspace)
    spaces = _workspaces(conn)
    review = _members(conn, spaces[ws]) if ws in spaces else set()
    adj_ws = spaces.get(adjudication_workspace(ws))
    adjudicate = _members(conn, adj_ws) if adj_ws else set()
    out = []
    for u in _all_users(conn):
        uid, argilla_role = str(u["id"]), str(u["role"])
        roles = tuple(
            r
            for r, members in (("annotator", review), ("adjudicator", adjudicate))
            if uid in members and argilla_role == "annotator"
        )
        out.append(Reviewer(str(u["username"]), roles, argilla_role, uid))
    return sorted(out, key=lambda r: r.name)


def annotators(conn: Connection, workspace: str | None = None) -> list[str]:
    """The names of the workspace's annotators (the reviewers a push with overlap assigns records to)."""
    return [r.name for r in list_reviewers(conn, workspace) if "annotator" in r.roles]


def add_reviewer(conn: Connection, name: str, role: Role, passwords: Path, workspace: str | None = None) -> Reviewer:
    """Create Argilla user ``name`` (role annotator, a generated password saved in ``passwords``) and make it a
    member of the review workspace (annotator) or of the adjudication workspace (adjudicator)."""
    if not _NAME.match(name):
        raise AnnotationError(
            f"reviewer name {name[:40]!r}: use letters, digits, '_', '-', '.' (starting with a letter or digit)"
        )
    if role not in ROLES:
        raise AnnotationError(f"{option('role')} must be one of {', '.join(ROLES)}")
    ws = _workspace(conn, workspace)
    if any(u["username"] == name for u in _all_users(conn)):
        raise AnnotationError(f"an Argilla user {name!r} already exists; choose another name")
    target = ws if role == "annotator" else adjudication_workspace(ws)
    _load(passwords)  # a file that cannot take the password is refused before the user exists
    ws_id = ensure_workspace(conn, target)
    password = secrets.token_urlsafe(18)
    body = {"username": name, "first_name": name, "role": "annotator", "password": password}
    uid = str(_check(conn.http.post("/api/v1/users", json=body), f"create the user {name!r}")["id"])
    save_password(passwords, conn.url, name, password, role)  # before anything else can fail: never lost
    _check(conn.http.post(f"/api/v1/workspaces/{ws_id}/users", json={"user_id": uid}), f"add {name!r} to {target!r}")
    return Reviewer(name, (role,), "annotator", uid, target)


def _private_dir(d: Path) -> None:
    if not d.exists():
        d.mkdir(mode=0o700, parents=True)


def _load(path: Path) -> dict[str, Any]:
    """The passwords file's logins by server URL ({} when it does not exist yet)."""
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        raise AnnotationError(f"{path}: not a reviewers' passwords file (a JSON object); give another one")
    return data


def save_password(path: Path, url: str, name: str, password: str, role: str) -> None:
    """Add one login to the passwords file (0600; its directory 0700 when greval creates it), atomically."""
    _private_dir(path.parent)
    data = _load(path)
    data.setdefault(url, {})[name] = {"password": password, "role": role}
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)

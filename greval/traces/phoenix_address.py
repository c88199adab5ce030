"""Where a Phoenix server is and how to reach it: the ``phoenix://`` address (window and filters as query
parameters), Phoenix's client with ``PHOENIX_API_KEY`` as its bearer token, and a failed request as one line.
Read by the trace source (:mod:`greval.traces.phoenix`) and by the annotations written back
(:mod:`greval.traces.phoenix_annotations`), so neither imports the other."""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, Field

from greval.errors import DataError, UserError
from greval.traces.spans import parse_time

if TYPE_CHECKING:
    from phoenix.client import Client

__all__ = [
    "KEY_ENV",
    "TIMEOUT_S",
    "PhoenixAddress",
    "is_phoenix_ref",
    "parse_address",
    "phoenix_client",
    "phoenix_error",
]

SCHEMES = ("phoenix://", "phoenix+http://", "phoenix+https://")
KEY_ENV = "PHOENIX_API_KEY"
TIMEOUT_S = 60


class PhoenixAddress(BaseModel):
    """Where the traces are and which to read."""

    base_url: str
    project: str
    start: datetime | None = None
    end: datetime | None = None
    root: str | None = Field(None, description="Only traces whose root span has this name.")
    limit: int = Field(1000, ge=1, description="Traces to read at most (the newest).")

    @property
    def label(self) -> str:
        return f"phoenix {self.base_url} project {self.project!r}"


def is_phoenix_ref(data: str) -> bool:
    return str(data).lower().startswith(SCHEMES)


_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _time(ref: str, name: str, value: str) -> datetime:
    parsed = parse_time(value)
    if parsed is None:
        raise DataError(f"{ref}: {name}={value!r} is not an ISO 8601 time (e.g. 2025-05-01T00:00:00Z)")
    return parsed


def parse_address(ref: str) -> PhoenixAddress:
    """``phoenix://HOST:PORT/PROJECT?last=24h&root=rag&limit=500`` as a :class:`PhoenixAddress`."""
    parts = urlsplit(ref)
    if parts.username or parts.password:
        raise UserError(f"phoenix address: put the API key in {KEY_ENV}, not in the address")
    scheme = "https" if parts.scheme.lower() == "phoenix+https" else "http"
    path = [p for p in parts.path.split("/") if p]
    if not parts.hostname or not path:
        raise DataError(f"{ref}: expected phoenix://HOST:PORT/PROJECT (the project's name, e.g. 'default')")
    prefix = "/".join(path[:-1])
    base = f"{scheme}://{parts.netloc}" + (f"/{prefix}" if prefix else "")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - {"last", "start", "end", "root", "limit"})
    if unknown:
        raise DataError(f"{ref}: unknown parameter(s) {', '.join(unknown)}; use last, start, end, root, limit")
    start = _time(ref, "start", query["start"]) if "start" in query else None
    end = _time(ref, "end", query["end"]) if "end" in query else None
    if "last" in query:
        m = _DURATION.match(query["last"].strip())
        if m is None:
            raise DataError(f"{ref}: last={query['last']!r}: use a number and s, m, h, d or w (e.g. last=24h)")
        start = datetime.now(UTC) - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    limit = query.get("limit", "1000")
    if not limit.isdigit() or int(limit) < 1:
        raise DataError(f"{ref}: limit={limit!r} must be a whole number of traces, at least 1")
    return PhoenixAddress(
        base_url=base, project=path[-1], start=start, end=end, root=query.get("root") or None, limit=int(limit)
    )


def phoenix_client(addr: PhoenixAddress) -> Client:
    """Phoenix's client for the address, with ``PHOENIX_API_KEY`` (if set) as its bearer token."""
    try:
        from phoenix.client import Client
    except ImportError:
        raise UserError("reading Phoenix needs its client: pip install 'greval[phoenix]'") from None
    return Client(base_url=addr.base_url, api_key=os.environ.get(KEY_ENV) or None)


def phoenix_error(addr: PhoenixAddress, exc: Exception) -> UserError:
    """A failed request as one line (the URL and status, never a header)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        if code in (401, 403):
            return UserError(f"{addr.label}: Phoenix refused the request (HTTP {code}); check {KEY_ENV}")
        if code == 404:
            return DataError(f"{addr.label}: not found on the server (HTTP 404): is the project's name right?")
        return UserError(f"{addr.label}: Phoenix answered HTTP {code} to {exc.request.url.path}")
    if isinstance(exc, httpx.HTTPError):
        return UserError(f"{addr.label}: cannot reach Phoenix ({type(exc).__name__}: {exc})")
    raise exc

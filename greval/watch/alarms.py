"""Where a watch's alarms go: a line in its log (the CLI prints what the flow returns), a JUnit XML file (one test
case per metric, window and figure compared, as ``greval gate --junit`` writes them), and an optional POST to a
webhook (JSON) named in the user's own config file — never on the command line, never in a log: the URL and the
headers may hold secrets, so messages name the webhook by its scheme and host alone.

The config file is ``$GREVAL_WATCH_CONFIG``, else ``watch.yaml`` in greval's data directory::

    webhook:
      url: http://127.0.0.1:9000/hooks/alerts          # the whole URL is secret to greval's output
      headers: {Authorization: "Bearer ${ALERT_TOKEN}"}  # ${VAR}: read from the environment
      timeout: 5

A POST that fails is said in one line and tried again on the next pass (each alarm is posted until it goes through).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from greval.errors import UserError
from greval.gate.checks import Check
from greval.gate.junit import write_junit
from greval.paths import data_dir
from greval.watch.windows import WindowFigures, window_label

if TYPE_CHECKING:
    from greval.gate.checks import Check

__all__ = ["CONFIG_ENV", "Webhook", "config_path", "load_webhook", "post_alarm", "window_checks", "write_checks"]

CONFIG_ENV = "GREVAL_WATCH_CONFIG"
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class Webhook(BaseModel):
    """Where alarms are POSTed. Its ``url`` and ``headers`` are never shown: :attr:`shown` is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    timeout: float = Field(5.0, gt=0, le=60)

    @property
    def shown(self) -> str:
        """The webhook as messages name it: scheme and host, nothing that may be a secret."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}/…"


def config_path() -> Path:
    """The user's watch config: ``$GREVAL_WATCH_CONFIG``, else ``watch.yaml`` in greval's data directory."""
    env = os.environ.get(CONFIG_ENV)
    if env:
        return Path(env).expanduser()

    return data_dir() / "watch.yaml"


def _expand(value: str, path: Path) -> str:
    def var(m: re.Match[str]) -> str:
        if m.group(1) not in os.environ:
            raise UserError(f"{path}: webhook: the environment variable {m.group(1)} is not set")
        return os.environ[m.group(1)]

    return _VAR.sub(var, value)


def load_webhook(path: Path | None = None) -> Webhook | None:
    """The webhook of the user's config (None: no config file, or none in it); a bad one is one line naming the
    file and the key (never a value)."""
    path = config_path() if path is None else path
    if not path.is_file():
        if os.environ.get(CONFIG_ENV) and path == config_path():
            raise UserError(f"{path}: no such watch config (${CONFIG_ENV})")
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise UserError(f"{path}: cannot read the watch config ({type(exc).__name__})") from None
    hook = data.get("webhook") if isinstance(data, Mapping) else None
    if hook is None:
        return None
    try:
        parsed = Webhook.model_validate(hook)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise UserError(f"{path}: webhook.{where}: {err['msg']}") from None
    if urlsplit(parsed.url).scheme not in ("http", "https") or not urlsplit(parsed.url).hostname:
        raise UserError(f"{path}: webhook.url: an http:// or https:// address")
    headers = {k: _expand(v, path) for k, v in parsed.headers.items()}
    return Webhook(url=_expand(parsed.url, path), headers=headers, timeout=parsed.timeout)


def _utc(when: Any) -> str | None:
    """A window's end written as its start is (``window_label``: UTC, ISO 8601), not as a Unix time."""
    return None if when is None else window_label(float(when))


def post_alarm(hook: Webhook, source: str, figures: Mapping[str, Any]) -> str | None:
    """POST one window's alarm; None when it went through, else the one line saying why not (no secret in it)."""
    import httpx

    body = {
        "source": "greval watch",
        "watch": source,
        "metric": figures.get("metric"),
        "window": {"start": figures.get("label"), "end": _utc(figures.get("end"))},
        "alarms": figures.get("alarms", []),
        "score": figures.get("score"),
        "agreement_figure": figures.get("agreement_figure"),
        "agreement": figures.get("agreement"),
        "baseline": figures.get("baseline"),
        "volume": figures.get("volume"),
    }
    try:
        got = httpx.post(hook.url, json=body, headers=hook.headers, timeout=hook.timeout)
    except httpx.HTTPError as exc:
        return f"webhook {hook.shown}: no answer ({type(exc).__name__}); the alarm is posted again next pass"
    if got.status_code >= 300:
        return f"webhook {hook.shown}: HTTP {got.status_code}; the alarm is posted again next pass"
    return None


def window_checks(windows: Sequence[WindowFigures]) -> list[Check]:
    """One check per window and figure compared with a baseline: failed when in alarm."""

    checks = []
    for w in windows:
        if w.baseline is None:
            continue
        figures = ["score"] + ([w.agreement_figure or "agreement"] if w.baseline.agreement and w.agreement else [])
        for figure in figures:
            line = next((a for a in w.alarms if f": {figure} " in a or f": {figure} vs people" in a), None)
            name = f"{w.metric} {w.label} {figure}"
            text = line or f"{w.metric}: window {w.label}: {figure} holds against the baseline ({w.baseline.what})"
            checks.append(Check(name=name, passed=line is None, text=text))
    return checks


def write_checks(path: Path, source: str, windows: Sequence[WindowFigures]) -> None:
    """The pass's checks as a JUnit XML report (greval gate's writer; 0600)."""

    write_junit(path, "greval watch", f"greval.watch {source}", window_checks(windows))

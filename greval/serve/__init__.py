"""``greval serve``: metrics over HTTP (greval's JSON API and LangServe routes per spec), sharing the verdict
store and cache of ``greval run``. Needs the ``serve`` extra (FastAPI, uvicorn, LangServe)."""

from __future__ import annotations

from greval.serve.app import ServeSettings, check_binding, create_app
from greval.serve.service import JudgeService, ServedVerdict

__all__ = ["JudgeService", "ServeSettings", "ServedVerdict", "check_binding", "create_app"]

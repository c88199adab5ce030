"""llama.cpp's server from the ``xllamacpp`` wheel, as a child process: what ``llama-server`` is for a build.

Started by :mod:`greval.llm.local.server` as ``python -P xllamacpp_main.py SETTINGS_JSON`` (the settings of
:class:`greval.llm.local.engine.Launch`); serves until SIGTERM or SIGINT, then stops the server and exits 0.
Imports nothing of greval: it runs as a script, and only needs the wheel. The server writes its log to stderr,
which the parent sends to the judge's log file.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Any


def _params(settings: dict[str, Any]) -> Any:
    """xllamacpp's CommonParams for ``settings`` (the same choices greval passes llama-server as flags)."""
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = settings["model"]
    params.model_alias = {settings["alias"]}
    params.hostnames = [settings["host"]]
    params.port = int(settings["port"])
    params.cpuparams.n_threads = int(settings["threads"])
    params.cpuparams_batch.n_threads = int(settings["threads"])
    params.n_parallel = int(settings["parallel"])
    params.n_ctx = int(settings["ctx_total"])  # split over the slots: each gets its own part
    params.kv_unified = False
    params.use_jinja = True
    params.ui = False
    params.offline = True
    return params


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: xllamacpp_main.py SETTINGS_JSON", file=sys.stderr)
        return 2
    settings = json.loads(argv[0])
    try:
        import xllamacpp
    except ImportError as exc:
        print(f"error: the xllamacpp wheel is not installed in {sys.executable}: {exc}", file=sys.stderr)
        return 3
    # Blocked before the server's threads start (they inherit the mask), so SIGTERM and SIGINT reach sigwait
    # below and the server stops cleanly, whichever thread the kernel picks.
    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)
    print(f"xllamacpp {getattr(xllamacpp, '__version__', '?')}: {xllamacpp.get_system_info()}", file=sys.stderr)
    try:
        server = xllamacpp.Server(_params(settings))
    except RuntimeError as exc:  # its own log lines above say why (a port taken, a model it cannot load)
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"serving at {server.listening_address}", file=sys.stderr, flush=True)
    signal.sigwait(stop)
    del server  # stops the HTTP server and the model's threads
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Human review in a local Argilla server: its management (server.py) and the `annotate` CLI group."""

from greval.annotation.server import (
    AnnotationServerError,
    PortInUseError,
    ServerInfo,
    ServerStatus,
    ensure_venv,
    running_server,
    start,
    status,
    stop,
)

__all__ = [
    "AnnotationServerError",
    "PortInUseError",
    "ServerInfo",
    "ServerStatus",
    "ensure_venv",
    "running_server",
    "start",
    "status",
    "stop",
]

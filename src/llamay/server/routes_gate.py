"""Which optional routes a server answers (llama-server's --no-slots, --metrics, --no-ui) and the refusal
of one that is off: llama-server's 501 (ERROR_TYPE_NOT_SUPPORTED), or a 404 for the Studio's pages."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Routes:
    slots: bool = True  # GET /slots
    metrics: bool = True  # GET /metrics
    ui: bool = True  # the Studio (/studio and its API), and / sending browsers there


def require(routes: Routes, name: str):
    """Raises the refusal when the route `name` (a Routes field) is off."""
    if not getattr(routes, name):
        from .protocol.base import ProtocolError
        flag = {"slots": "--slots", "metrics": "--metrics", "ui": "the UI (no --no-ui)"}[name]
        raise ProtocolError(501, f"This server does not support {name} endpoint. Start it with `{flag}`",
                            "not_supported")

"""WebSocket routes.

- ``ws/agent/``: the node agents' link; authenticated by the per-node token (no browser session, no
  Origin check: agents are not browsers).
- ``ws/live/``: the dashboard's live feed; rides on the browser session and must come from an allowed
  origin.
"""

from __future__ import annotations

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from controlplane.live.routes import agent_routes, dashboard_routes


def _build() -> Any:
    return URLRouter(
        [
            *agent_routes(),
            path("", AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(dashboard_routes())))),
        ]
    )


websocket_application = _build()

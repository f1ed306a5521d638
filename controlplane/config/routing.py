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
from django.urls import re_path

from controlplane.live.routes import agent_routes, dashboard_routes


def _build() -> Any:
    return URLRouter(
        [
            *agent_routes(),
            # A prefix route must be re_path("^") when the inner URLRouter is wrapped in middleware:
            # Channels treats path("") as a prefix only when it points straight at a URLRouter.
            re_path(r"^", AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(dashboard_routes())))),
        ]
    )


websocket_application = _build()

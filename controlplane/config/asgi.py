"""ASGI entry point: HTTP through Django, WebSockets (agent link, dashboard) through Channels."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
django_asgi_app = get_asgi_application()  # must run before importing consumers (they import models)

from channels.routing import ProtocolTypeRouter  # noqa: E402

from controlplane.config.routing import websocket_application  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application})

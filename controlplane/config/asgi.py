"""ASGI entry point: HTTP through Django, WebSockets (agent link, dashboard) through Channels."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
django_asgi_app = get_asgi_application()  # must run before importing consumers (they import models)

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from controlplane.config.routing import websocket_application  # noqa: E402

# The dashboard's CSS/JS/vendored uPlot under STATIC_URL, from the staticfiles finders (no collectstatic
# and no DEBUG needed): daphne serves them itself, in `make demo` as in the container.
application = ProtocolTypeRouter(
    {"http": ASGIStaticFilesHandler(django_asgi_app), "websocket": websocket_application}
)

"""ASGI entry point: HTTP through Django, WebSockets (agent link, dashboard) through Channels.

It refuses to start without a ``SECRET_KEY`` when ``DEBUG`` is off (the settings leave it empty then,
so that tools which never sign anything, such as ``makemigrations`` or mypy, still load them).

With ``DATABASE_URL`` / ``REDIS_URL`` unset it starts the embedded servers where they do not run yet."""

from __future__ import annotations

import logging
import os
from typing import Any

from django.core.asgi import get_asgi_application

from controlplane.config.embedded import start_servers

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
# daphne run by hand with nothing set: the embedded servers (shared where they already run, stopped at exit)
start_servers()
django_asgi_app = get_asgi_application()  # must run before importing consumers (they import models)

from channels.routing import ProtocolTypeRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation  # noqa: E402
from django.http import HttpRequest, HttpResponseBadRequest  # noqa: E402

from controlplane.config.env import ConfigError  # noqa: E402
from controlplane.config.heap import prepare_server_heap  # noqa: E402
from controlplane.config.routing import websocket_application  # noqa: E402

security_log = logging.getLogger("django.security.SuspiciousFileOperation")
MISSING_SECRET_KEY = (
    "SECRET_KEY must be set (or SECRET_KEY_FILE, a file holding it) when DEBUG is off: sessions, CSRF "
    "tokens and password resets are signed with it. Generate one with "
    "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`."
)


def require_secret_key() -> None:
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured as exc:  # Django refuses an empty key when it is read
        raise ConfigError(MISSING_SECRET_KEY) from exc
    if not key:
        raise ConfigError(MISSING_SECRET_KEY)


require_secret_key()


class StaticFilesHandler(ASGIStaticFilesHandler):
    """The dashboard's CSS/JS/vendored uPlot under STATIC_URL, from the staticfiles finders (no
    collectstatic and no DEBUG needed). A path that leaves the static directories (``/static/..%2f``)
    is a 400 with one line on ``django.security``, not a 500 with a traceback."""

    def serve(self, request: HttpRequest) -> Any:
        try:
            return super().serve(request)
        except SuspiciousOperation as exc:
            security_log.warning("static path refused: %s (%s)", request.path, exc)
            return HttpResponseBadRequest("Bad static file path.", content_type="text/plain")


# daphne serves the static files itself, in `make demo` as in the container.
application = ProtocolTypeRouter(
    {"http": StaticFilesHandler(django_asgi_app), "websocket": websocket_application}
)
prepare_server_heap()  # the start's objects out of the collector's way, fewer collections (config/heap.py)

"""``GET /metrics``: the Prometheus exposition (:mod:`controlplane.apps.metrics.exposition`), behind a
bearer token.

``UNICRON_METRICS_TOKEN`` (or ``UNICRON_METRICS_TOKEN_FILE``) is read at each request, so a rotated
token file takes effect without a restart. Unset: 403 with how to enable it (no loopback exception:
behind a reverse proxy every client would look local). Missing or wrong token: 401. Tokens are compared
in constant time.
"""

from __future__ import annotations

import hmac
import logging

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from controlplane.apps.metrics.exposition import render_exposition
from controlplane.config.env import ConfigError, env_str

log = logging.getLogger(__name__)

TOKEN_ENV = "UNICRON_METRICS_TOKEN"
DISABLED = (
    f"/metrics is disabled: set {TOKEN_ENV} (or {TOKEN_ENV}_FILE) on the control plane and scrape with "
    f"'Authorization: Bearer <token>'.\n"
)


def _text(status: int, body: str, **headers: str) -> HttpResponse:
    response = HttpResponse(body, status=status, content_type="text/plain; charset=utf-8")
    for name, value in headers.items():
        response[name] = value
    return response


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    try:
        expected = env_str(TOKEN_ENV)
    except ConfigError as exc:
        log.error("metrics: %s", exc)
        return _text(503, f"/metrics is unavailable: {TOKEN_ENV}_FILE cannot be read (see the server log).\n")
    if not expected:  # unset, or an empty token file: never let an empty bearer in
        return _text(403, DISABLED)
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        return _text(401, "missing or wrong bearer token\n", **{"WWW-Authenticate": 'Bearer realm="metrics"'})
    return HttpResponse(render_exposition(), content_type=CONTENT_TYPE_LATEST)

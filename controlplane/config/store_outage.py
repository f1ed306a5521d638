"""A PostgreSQL outage answered cleanly on the web tier: 503 with a JSON body and ``Retry-After``.

While PostgreSQL restarts (or is unreachable) every request that touches it raises Django's
``OperationalError`` or ``InterfaceError``; without this middleware that is a 500 with a traceback in the
log for each request. Deadlocks and serialization failures are not outages: the API's exception handler
answers those first (code ``retry``: nothing was written, send it again)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import server_error

log = logging.getLogger("controlplane.store")

STORE_RETRY_AFTER_S = 5
"""What ``Retry-After`` asks: a PostgreSQL restart takes a few seconds."""

STORE_UNAVAILABLE_DETAIL = (
    "The database is unavailable (restarting or unreachable). Retry after a few seconds; a change sent "
    "now may not have been applied, so read it back before sending it again."
)


def store_unavailable_response(request: HttpRequest, exc: BaseException) -> JsonResponse:
    log.warning("%s %s: database unavailable: %s", request.method, request.path, str(exc).strip()[:200])
    return JsonResponse(
        {"detail": STORE_UNAVAILABLE_DETAIL, "code": "store_unavailable"},
        status=503,
        headers={"Retry-After": str(STORE_RETRY_AFTER_S)},
    )


class StoreOutageMiddleware:
    """A view's database error becomes a 503 (the REST API's views, the dashboard's, ``/healthz``)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, OperationalError | InterfaceError):
            return store_unavailable_response(request, exception)
        return None


def server_error_or_store_unavailable(request: HttpRequest) -> HttpResponse:
    """``handler500``: a database error raised outside a view (a middleware reading the session or the
    user) is a 503 too; any other error is Django's plain 500."""
    exc = sys.exc_info()[1]
    if isinstance(exc, OperationalError | InterfaceError):
        return store_unavailable_response(request, exc)
    return server_error(request)

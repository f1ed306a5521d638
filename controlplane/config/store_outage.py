"""A store outage answered cleanly: on the web tier a 503 with a JSON body and ``Retry-After``, and in every
process's log one line instead of a traceback.

While PostgreSQL restarts (or is unreachable) every request that touches it raises Django's
``OperationalError`` or ``InterfaceError``; without this middleware that is a 500 with a traceback in the
log for each request. Deadlocks and serialization failures are not outages: the API's exception handler
answers those first (code ``retry``: nothing was written, send it again).

Every process logs through :class:`StoreOutageAsOneLine`: a record that carries the traceback of a lost
PostgreSQL or Redis connection (:func:`is_store_outage`) — a periodic task that ran while PostgreSQL
restarted, the beat scheduler's read of its schedule, an agent report the link could not store — is one
WARNING line with the error's words. The condition is expected and handled (the next run, the next read or
the agent's re-send does the work); its traceback would be noise an operator cannot tell from a bug. Any
other error keeps its traceback and level."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import PurePath

import psycopg
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import server_error
from kombu.exceptions import OperationalError as BrokerUnavailable
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

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


_OUTAGE_SQLSTATE_CLASSES = ("08", "57P")
"""SQLSTATE classes of a lost server: connection exception (08) and operator intervention (57P: the server
shutting down, crashed or starting). A connection that failed before any SQLSTATE has none."""


def _raised_in_a_closed_broker_channel(exc: BaseException) -> bool:
    """Kombu's Redis channel reading its connection's parameters after a lost connection closed the channel
    under it (``'NoneType' object has no attribute 'client'`` in ``Channel._connparams``): what beat's
    publish of a due task meets when Redis restarts twice within a few seconds. The next tick publishes on
    a new channel."""
    if not isinstance(exc, AttributeError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_name == "_connparams" and PurePath(code.co_filename).parts[-3:] == (
        "kombu",
        "transport",
        "redis.py",
    )


def is_store_outage(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or an error it was raised from) is PostgreSQL or Redis unreachable or restarting —
    not a deadlock, a constraint or a bad query, which are errors of their own."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, RedisConnectionError | RedisTimeoutError | BrokerUnavailable):
            return True
        if _raised_in_a_closed_broker_channel(exc):
            return True
        if isinstance(exc, psycopg.InterfaceError):
            return True
        if isinstance(exc, psycopg.OperationalError):
            state = exc.sqlstate
            return state is None or state.startswith(_OUTAGE_SQLSTATE_CLASSES)
        if isinstance(exc, InterfaceError) and exc.__cause__ is None:
            return True  # Django's own "connection already closed"
        exc = exc.__cause__ or exc.__context__
    return False


def _one_line(exc: BaseException) -> str:
    words = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {words[:300]}" if words else type(exc).__name__


class StoreOutageAsOneLine(logging.Filter):
    """A record logged with a store outage's traceback becomes one WARNING line: its message, then the
    error's type and words. Records of any other error pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not is_store_outage(exc):
            return True
        record.msg = f"{record.getMessage()} [store unavailable: {_one_line(exc)}]"
        record.args = None
        record.exc_info = None
        record.exc_text = None
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        return True


def log_store_outages_as_one_line(logger: logging.Logger | None = None) -> None:
    """Put :class:`StoreOutageAsOneLine` on every handler of ``logger`` (the root logger by default) that
    does not have it yet: a Celery worker or beat sets its handlers up itself."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, StoreOutageAsOneLine) for f in handler.filters):
            handler.addFilter(StoreOutageAsOneLine())

"""The API exception handler: domain errors become 4xx with field errors, never a 500."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import OperationalError
from psycopg import errors as pg_errors
from rest_framework.response import Response
from rest_framework.views import exception_handler

from controlplane.apps.common.errors import DomainError

TRANSIENT_DB_ERRORS = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
"""PostgreSQL aborted the request's transaction because of a concurrent one: nothing was written, and the
same request succeeds when sent again."""


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, OperationalError) and isinstance(exc.__cause__, TRANSIENT_DB_ERRORS):
        deadlock = isinstance(exc.__cause__, pg_errors.DeadlockDetected)
        kind = "deadlock" if deadlock else "serialization failure"
        return Response(
            {
                "detail": f"The request collided with a concurrent change ({kind}) and was rolled back: "
                "nothing was changed. Send it again.",
                "code": "retry",
            },
            status=503,
            headers={"Retry-After": "1"},
        )
    if isinstance(exc, DomainError):
        return Response(exc.as_payload(), status=exc.status)
    if isinstance(exc, DjangoValidationError):
        payload: Any = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return Response(payload, status=400)
    return exception_handler(exc, context)

"""The API exception handler: domain errors become 4xx with field errors, never a 500."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework.response import Response
from rest_framework.views import exception_handler

from controlplane.apps.common.errors import DomainError


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(exc.as_payload(), status=exc.status)
    if isinstance(exc, DjangoValidationError):
        payload: Any = exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        return Response(payload, status=400)
    return exception_handler(exc, context)

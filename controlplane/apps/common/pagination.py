"""The API's page size is bounded: ``?limit`` is clamped to ``UNICRON_API_MAX_PAGE_SIZE``, and an
``?offset`` beyond what PostgreSQL can count is a 400, never a 500."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

MAX_OFFSET = 2**53
"""Larger offsets cannot name a row (and ``offset + limit`` must stay a PostgreSQL bigint)."""


class CappedLimitOffsetPagination(LimitOffsetPagination):
    """``LimitOffsetPagination`` whose ``limit`` is at most ``settings.UNICRON_API_MAX_PAGE_SIZE``."""

    @property
    def max_limit(self) -> int:  # type: ignore[override]
        return int(settings.UNICRON_API_MAX_PAGE_SIZE)

    def get_limit(self, request: Request) -> int | None:
        limit = super().get_limit(request)  # the default page size when ?limit is missing or malformed
        return min(limit, self.max_limit) if limit is not None else None

    def get_offset(self, request: Request) -> int:
        offset = super().get_offset(request)
        if offset > MAX_OFFSET:
            raise ValidationError({self.offset_query_param: [f"Must be at most {MAX_OFFSET}."]})
        return offset

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["schema"]["maximum"] = self.max_limit
                parameter["description"] += f" At most {self.max_limit}; larger values are clamped."
            if parameter["name"] == self.offset_query_param:
                parameter["schema"]["maximum"] = MAX_OFFSET
        return parameters

"""API rate limits, per user and per API token.

Rates come from ``settings.UNICRON_THROTTLE_RATES`` (``UNICRON_THROTTLE_USER``, ``_TOKEN``) and are
read on every request, so that an override (tests, ``override_settings``) takes effect at once. The
counters live in Django's default cache, i.e. per server process. (Every API operation needs an
authenticated user, and DRF refuses anonymous requests before it counts them: there is no anonymous
rate. Login forms have their own lock-out, django-axes.)
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework import throttling
from rest_framework.request import Request

from controlplane.apps.accounts.models import ApiToken


class _SettingsRate:
    scope: str

    def get_rate(self) -> str | None:
        rates: dict[str, str | None] = settings.UNICRON_THROTTLE_RATES
        return rates.get(self.scope)


class UserRateThrottle(_SettingsRate, throttling.UserRateThrottle):
    """Every request of a user (browser session and all their tokens together)."""

    scope = "user"


class TokenRateThrottle(_SettingsRate, throttling.SimpleRateThrottle):
    """Requests authenticated by one API token."""

    scope = "token"

    def get_cache_key(self, request: Request, view: Any) -> str | None:
        if not isinstance(request.auth, ApiToken):
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}

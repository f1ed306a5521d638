"""DRF authentication by a user's API token: ``Authorization: Token <key>``; only the key's hash is
stored, and a token past its ``expires_at`` is refused (rotate it: ``POST /api/v1/me/token/`` or
``manage.py issue_api_token``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from controlplane.apps.accounts.models import ApiToken
from controlplane.apps.accounts.selectors import get_api_token

LAST_USED_RESOLUTION = timedelta(minutes=1)
"""``last_used_at`` is written at most this often per token (not one write per request)."""


class ApiTokenAuthentication(TokenAuthentication):
    keyword = "Token"
    model = ApiToken

    def authenticate_credentials(self, key: str) -> tuple[Any, ApiToken]:
        token = get_api_token(key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        now = timezone.now()
        if token.expires_at <= now:
            raise exceptions.AuthenticationFailed("Token expired: rotate it for a new one.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

"""Account queries."""

from __future__ import annotations

from controlplane.apps.accounts.models import ApiToken
from controlplane.apps.accounts.tokens import hash_api_token


def get_api_token(key: str) -> ApiToken | None:
    """The token whose key is ``key`` (expired or not), with its user, or None."""
    return ApiToken.objects.select_related("user").filter(key_hash=hash_api_token(key)).first()


def list_api_tokens(user_id: int) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user_id=user_id))

"""API requests are rate-limited per token and per user (UNICRON_THROTTLE_TOKEN / _USER); past the
rate a caller gets 429 with Retry-After while others are unaffected."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from pytest_django.fixtures import SettingsWrapper
from rest_framework.test import APIClient

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.services import do_rotate_api_token
from tests.controlplane.conftest import make_user


@pytest.fixture
def low_rates(settings: SettingsWrapper) -> None:
    settings.UNICRON_THROTTLE_RATES = {"user": "6/min", "token": "3/min"}
    cache.clear()


def _token_client(role: Role) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {do_rotate_api_token(None, make_user(role))[1]}")
    return client


def test_a_token_past_its_rate_gets_429_and_another_token_does_not(db: None, low_rates: None) -> None:
    busy, other = _token_client(Role.VIEWER), _token_client(Role.VIEWER)

    statuses = [busy.get("/api/v1/me/").status_code for _ in range(4)]

    assert statuses == [200, 200, 200, 429]
    assert int(busy.get("/api/v1/me/")["Retry-After"]) > 0
    assert other.get("/api/v1/me/").status_code == 200


def test_a_user_past_their_rate_gets_429(db: None, low_rates: None) -> None:
    client = APIClient()
    client.force_authenticate(make_user(Role.VIEWER))

    statuses = [client.get("/api/v1/me/").status_code for _ in range(7)]

    assert statuses == [200] * 6 + [429]

"""A user's REST API token is issued or rotated by POST /api/v1/me/token/ (or manage.py
issue_api_token), shown once and stored as its SHA-256 only; it authenticates as
``Authorization: Token <key>`` until it expires or is rotated."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.apps.accounts.models import ApiToken
from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.tokens import hash_api_token
from tests.controlplane.conftest import make_user


def _token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def test_a_rotated_token_is_shown_once_and_stored_hashed(db: None) -> None:
    user = make_user(Role.VIEWER)
    session = APIClient()
    session.force_authenticate(user)

    issued = session.post("/api/v1/me/token/")

    assert issued.status_code == 201
    key = issued.json()["token"]
    stored = ApiToken.objects.get(user=user)
    assert stored.key_hash == hash_api_token(key)
    assert key not in str(list(ApiToken.objects.values()))
    described = _token_client(key).get("/api/v1/me/token/")
    assert described.status_code == 200
    assert "token" not in described.json()[0]
    assert _token_client(key).get("/api/v1/me/").json() == {"username": user.username, "role": "viewer"}


def test_rotating_makes_the_previous_token_stop_working(db: None) -> None:
    user = make_user(Role.OPERATOR)
    old = _token_client_key(user)

    new = _token_client(old).post("/api/v1/me/token/").json()["token"]

    assert _token_client(old).get("/api/v1/me/").status_code == 401
    assert _token_client(new).get("/api/v1/me/").status_code == 200


def test_an_expired_token_is_refused(db: None) -> None:
    user = make_user(Role.VIEWER)
    key = _token_client_key(user)
    ApiToken.objects.filter(user=user).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = _token_client(key).get("/api/v1/me/")

    assert response.status_code == 401
    assert "expired" in response.json()["detail"]


def test_the_management_command_prints_a_working_token(db: None) -> None:
    user = make_user(Role.ADMIN)
    out = StringIO()

    call_command("issue_api_token", user.username, "--ttl-days", "2", stdout=out, stderr=StringIO())

    key = out.getvalue().strip()
    assert _token_client(key).get("/api/v1/me/").json()["role"] == "admin"
    expires = ApiToken.objects.get(user=user).expires_at
    assert timedelta(days=1) < expires - timezone.now() <= timedelta(days=2)


def _token_client_key(user: object) -> str:
    from controlplane.apps.accounts.services import do_rotate_api_token

    return do_rotate_api_token(None, user)[1]  # type: ignore[arg-type]

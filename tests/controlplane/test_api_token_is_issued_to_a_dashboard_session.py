"""A user logged in to the dashboard (a session, not a token) gets a new API token from
POST /api/v1/me/token/: how ``unicron login --username`` obtains one."""

from __future__ import annotations

from rest_framework.test import APIClient

from controlplane.apps.accounts.models import ApiToken, AuditEntry
from controlplane.apps.accounts.roles import Role
from tests.controlplane.conftest import make_user


def test_a_session_user_gets_a_token_and_the_rotation_is_audited(db: None) -> None:
    user = make_user(Role.OPERATOR)
    session = APIClient()
    session.force_login(user)  # the session cookie of a dashboard login: request.user is a lazy proxy

    issued = session.post("/api/v1/me/token/")

    assert issued.status_code == 201, issued.content
    assert ApiToken.objects.filter(user=user).count() == 1
    audit = AuditEntry.objects.get(verb="rotate_api_token")
    assert (audit.object_type, audit.object_id, audit.actor_id) == ("auth.user", str(user.pk), user.pk)

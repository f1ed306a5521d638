"""Every login attempt leaves an audit row: a success names the user, a failure the attempted username
and the client address (and never the password)."""

from __future__ import annotations

from django.test import Client

from controlplane.apps.accounts.models import AuditEntry
from tests.controlplane.factories import UserFactory

PASSWORD = "correct horse battery staple"


def test_a_successful_and_a_failed_login_are_both_audited(db: None) -> None:
    user = UserFactory(is_staff=True)
    user.set_password(PASSWORD)
    user.save()

    Client().post("/login/", {"username": user.username, "password": "not-it"})
    Client().post("/admin/login/", {"username": user.username, "password": PASSWORD})

    failed = AuditEntry.objects.get(verb="login_failed")
    assert failed.actor is None
    assert failed.after["username"] == user.username
    assert failed.after["address"] == "127.0.0.1"
    assert failed.after["path"] == "/login/"
    succeeded = AuditEntry.objects.get(verb="login")
    assert (succeeded.actor, succeeded.object_id) == (user, str(user.pk))
    assert succeeded.after["path"] == "/admin/login/"
    assert "not-it" not in str(list(AuditEntry.objects.values()))


def test_a_login_for_an_unknown_user_is_audited_as_a_failure(db: None) -> None:
    Client().post("/api-auth/login/", {"username": "nobody-here", "password": "guess"})

    assert AuditEntry.objects.get(verb="login_failed").object_id == "nobody-here"

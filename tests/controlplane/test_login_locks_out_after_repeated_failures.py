"""Brute force on any login path locks the account out for that client: after
UNICRON_LOGIN_FAILURE_LIMIT (5) wrong passwords even the right one is refused (429) until the lock-out
ends, on the dashboard's /login/, the admin's /admin/login/ and the browsable API's /api-auth/login/."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client

from tests.controlplane.factories import UserFactory

PASSWORD = "correct horse battery staple"


@pytest.mark.parametrize("path", ["/login/", "/admin/login/", "/api-auth/login/"])
def test_twelve_wrong_passwords_then_the_right_one_is_refused(db: None, path: str) -> None:
    user = UserFactory(is_staff=True)
    user.set_password(PASSWORD)
    user.save()
    client = Client()

    statuses = [
        client.post(path, {"username": user.username, "password": f"wrong-{i}"}).status_code
        for i in range(12)
    ]
    right = client.post(path, {"username": user.username, "password": PASSWORD})

    limit = settings.AXES_FAILURE_LIMIT
    assert limit < 12
    assert set(statuses[: limit - 1]) == {200}  # the form again, with its error
    assert set(statuses[limit:]) == {429}
    assert right.status_code == 429
    assert "_auth_user_id" not in client.session


def test_a_right_password_before_the_limit_logs_in_and_resets_the_count(db: None) -> None:
    user = UserFactory()
    user.set_password(PASSWORD)
    user.save()
    client = Client()
    for i in range(settings.AXES_FAILURE_LIMIT - 1):
        client.post("/login/", {"username": user.username, "password": f"wrong-{i}"})

    response = client.post("/login/", {"username": user.username, "password": PASSWORD})

    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)

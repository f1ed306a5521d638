"""The dashboard's live socket (ws/live/) admits viewers and above; an authenticated user without a
role is closed with 4403 (it used to be admitted), an anonymous one with 4401."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from controlplane.apps.accounts.roles import Role
from controlplane.live.dashboard import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED, DashboardConsumer
from tests.controlplane.conftest import make_user


async def _connect(user: Any) -> tuple[bool, int | None]:
    communicator = WebsocketCommunicator(DashboardConsumer.as_asgi(), "/ws/live/")
    communicator.scope["user"] = user
    connected, code = await communicator.connect(timeout=30)
    await communicator.disconnect()
    return connected, code


@pytest.mark.django_db(transaction=True)
async def test_a_user_without_a_role_is_refused() -> None:
    user = await database_sync_to_async(make_user)(None)

    assert await _connect(user) == (False, CLOSE_FORBIDDEN)


@pytest.mark.django_db(transaction=True)
async def test_an_anonymous_socket_is_refused() -> None:
    assert await _connect(AnonymousUser()) == (False, CLOSE_UNAUTHENTICATED)


@pytest.mark.django_db(transaction=True)
async def test_a_viewer_is_admitted() -> None:
    user = await database_sync_to_async(make_user)(Role.VIEWER)

    connected, _ = await _connect(user)

    assert connected

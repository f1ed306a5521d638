"""The dashboard's live socket: it only authenticates and forwards broadcaster events.

Only users with a role (viewer or above, as for every API read) are admitted: an anonymous socket is
closed with 4401, an authenticated user without a role with 4403."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from controlplane.apps.accounts.roles import Role, has_role
from controlplane.apps.common.broadcast import DASHBOARD_GROUP

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class DashboardConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await database_sync_to_async(has_role)(user, Role.VIEWER):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def live_event(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])

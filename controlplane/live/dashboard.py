"""The dashboard's live socket: it only authenticates and forwards broadcaster events."""

from __future__ import annotations

from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer

from controlplane.live.broadcast import DASHBOARD_GROUP


class DashboardConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        await self.channel_layer.group_add(DASHBOARD_GROUP, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(DASHBOARD_GROUP, self.channel_name)

    async def live_event(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])

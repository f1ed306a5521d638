"""Route lists for the WebSocket consumers; filled in as consumers are added."""

from __future__ import annotations

from django.urls import URLPattern, path

from controlplane.live.agent_link import AgentLinkConsumer
from controlplane.live.dashboard import DashboardConsumer


def agent_routes() -> list[URLPattern]:
    return [path("ws/agent/", AgentLinkConsumer.as_asgi())]


def dashboard_routes() -> list[URLPattern]:
    return [path("ws/live/", DashboardConsumer.as_asgi())]

"""The one broadcaster: services call :func:`send_event_on_commit` and the event reaches every dashboard
socket after the transaction commits (Zulip's ``send_event_on_commit``). Events are JSON-round-tripped
so nothing that cannot cross the wire slips in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"


def group_send(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to a channel-layer group, best effort (what it says is committed in PostgreSQL).

    In an ASGI process (a database call of an agent link or a dashboard socket) the send is handed to the
    process's event loop and not waited for: waiting held the process's one database thread until the loop
    got round to it, half of a hello's time at a cold start of a fleet. Elsewhere (Celery, commands) it
    runs to completion here."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    in_asgi = getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) == os.getpid()
    if loop is not None and in_asgi and loop.is_running():
        asyncio.run_coroutine_threadsafe(_send_logged(layer, group, message), loop)
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        log.warning("%s to %s not delivered", message.get("type"), group, exc_info=True)


async def _send_logged(layer: Any, group: str, message: dict[str, Any]) -> None:
    try:
        await layer.group_send(group, message)
    except Exception:
        log.warning("%s to %s not delivered", message.get("type"), group, exc_info=True)


def _send(event: dict[str, Any]) -> None:
    group_send(DASHBOARD_GROUP, {"type": "live.event", "event": event})


def send_event_on_commit(kind: str, payload: dict[str, Any]) -> None:
    """Queue a live event of ``kind`` to be broadcast once the current transaction commits."""
    event = json.loads(json.dumps({"kind": kind, "payload": payload}, default=str))
    transaction.on_commit(lambda: _send(event))

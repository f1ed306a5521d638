"""The one broadcaster: services call :func:`send_event_on_commit` and the event reaches every dashboard
socket after the transaction commits (Zulip's ``send_event_on_commit``). Events are JSON-round-tripped
so nothing that cannot cross the wire slips in.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"


def _send(event: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(DASHBOARD_GROUP, {"type": "live.event", "event": event})
    except Exception:  # the channel layer is best effort: state is already committed in PostgreSQL
        log.warning("live event %s not delivered", event.get("kind"), exc_info=True)


def send_event_on_commit(kind: str, payload: dict[str, Any]) -> None:
    """Queue a live event of ``kind`` to be broadcast once the current transaction commits."""
    event = json.loads(json.dumps({"kind": kind, "payload": payload}, default=str))
    transaction.on_commit(lambda: _send(event))

"""The one broadcaster: services call :func:`send_event_on_commit` and the event reaches every dashboard
socket after the transaction commits (Zulip's ``send_event_on_commit``). Events are JSON-round-tripped
so nothing that cannot cross the wire slips in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Coroutine
from typing import Any

from asgiref.sync import SyncToAsync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

DASHBOARD_GROUP = "dashboard"
SEND_TIMEOUT_S = 5.0
"""How long a synchronous caller waits for one send (Redis unreachable: the send is given up and logged)."""


class _SenderLoop:
    """The event loop, on a thread of its own, that synchronous callers (Celery tasks, commands) send on.

    The channel layer keeps its Redis connections per event loop; ``async_to_sync`` ran every send on a
    new loop, so each send opened a connection and closed it: 3.9 ms a send, and a failure's answer
    commits a dozen (the command's wake-up among them). One loop per process keeps them open. A forked
    child (a Celery pool process) starts its own on first use."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def forget(self) -> None:
        """In a forked child: the parent's loop thread did not come along."""
        self._loop, self._lock = None, threading.Lock()

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="channel-layer-sends", daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, send: Coroutine[Any, Any, None]) -> None:
        """Run ``send`` on the loop and wait for it (at most :data:`SEND_TIMEOUT_S`)."""
        future = asyncio.run_coroutine_threadsafe(send, self._running())
        try:
            future.result(timeout=SEND_TIMEOUT_S)
        except TimeoutError:
            future.cancel()
            raise


_sender_loop = _SenderLoop()
os.register_at_fork(after_in_child=_sender_loop.forget)


def group_send(group: str, message: dict[str, Any]) -> None:
    """Send ``message`` to a channel-layer group, best effort (what it says is committed in PostgreSQL).

    In an ASGI process (a database call of an agent link or a dashboard socket) the send is handed to the
    process's event loop and not waited for: waiting held the process's one database thread until the loop
    got round to it, half of a hello's time at a cold start of a fleet. Elsewhere (Celery, commands) it
    runs to completion on the process's sender loop (:class:`_SenderLoop`)."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = getattr(SyncToAsync.threadlocal, "main_event_loop", None)
    in_asgi = getattr(SyncToAsync.threadlocal, "main_event_loop_pid", None) == os.getpid()
    if loop is not None and in_asgi and loop.is_running():
        asyncio.run_coroutine_threadsafe(_send_logged(layer, group, message), loop)
        return
    try:
        _sender_loop.run(layer.group_send(group, message))
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

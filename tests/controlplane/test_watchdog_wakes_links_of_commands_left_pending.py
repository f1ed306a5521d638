"""A command whose wake-up was lost (the process that committed it died before telling the agent link)
stays pending; the transition watchdog wakes the node's link again so it is sent without waiting for
a reconnect. Fresh commands and sent ones are left alone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.fleet.outbox import AGENT_COMMAND_EVENT, agent_group
from controlplane.apps.fleet.services import do_enqueue_command
from controlplane.apps.planning.transitions import check_transitions
from tests.controlplane.factories import NodeFactory

CaptureOnCommit = Callable[..., AbstractContextManager[list[Callable[[], None]]]]


async def _drain(layer: Any, channel: str, timeout: float) -> list[dict[str, Any]]:
    got = []
    while True:
        try:
            got.append(await asyncio.wait_for(layer.receive(channel), timeout))
        except TimeoutError:
            return got


def test_a_command_pending_too_long_wakes_its_link(
    db: None, django_capture_on_commit_callbacks: CaptureOnCommit
) -> None:
    layer = get_channel_layer()
    stale, fresh, sent = NodeFactory(devices=1), NodeFactory(devices=1), NodeFactory(devices=1)
    channels = {}
    for node in (stale, fresh, sent):
        channels[node.name] = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(agent_group(node.name), channels[node.name])
    with django_capture_on_commit_callbacks(execute=False):  # their first wake-up is lost
        old = do_enqueue_command(stale, "stop_workers", {"task": 1, "grace_s": 1.0})
        do_enqueue_command(fresh, "stop_workers", {"task": 1, "grace_s": 1.0})
        gone = do_enqueue_command(sent, "stop_workers", {"task": 1, "grace_s": 1.0})
    ago = timezone.now() - timedelta(seconds=10)
    AgentCommand.objects.filter(pk=old.pk).update(created_at=ago)
    AgentCommand.objects.filter(pk=gone.pk).update(created_at=ago, state="sent")
    with django_capture_on_commit_callbacks(execute=True):
        assert check_transitions()["woken"] == 1
    woken = {name: async_to_sync(_drain)(layer, ch, 0.3) for name, ch in channels.items()}
    assert woken[stale.name] == [{"type": AGENT_COMMAND_EVENT}]
    assert woken[fresh.name] == []
    assert woken[sent.name] == []

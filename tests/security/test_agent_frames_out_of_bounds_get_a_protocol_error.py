"""Agent frames with values the database cannot hold (``Infinity``, ``NaN``, integers past ``bigint``,
NUL characters, strings longer than their columns) or a ``seq`` that goes backwards are answered with
a ``protocol_error`` on an open link: nothing is stored, the node does not go suspect, and the task's
metrics keep answering."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from controlplane.apps.accounts.roles import Role
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.core.protocol import PROTOCOL_VERSION
from tests.controlplane.conftest import make_user
from tests.controlplane.factories import TaskFactory
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Connect, Registered

connect, register, registered = e2e.connect, e2e.register, e2e.registered  # the agent-link fixtures

pytestmark = pytest.mark.django_db(transaction=True)


def stats(task: int, **event: Any) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task),
        "epoch": 0,
        "rank": 0,
        "device": 0,
        "detector": None,
        "occurred_at": now,
        "detected_at": now,
        "event": {
            "kind": "iteration_stats",
            "first_iteration": 1,
            "last_iteration": 2,
            "iterations": 2,
            "median_s": 0.5,
            "max_s": 0.6,
            "compute_median_s": 0.4,
            "micro_batches": 8,
            "tokens": 2048,
            "model_flops": 8e9,
            **event,
        },
    }


@database_sync_to_async
def held_task(node: Node) -> TrainingTask:
    task: TrainingTask = TaskFactory(state="running")
    Allocation.objects.create(task=task, device=Device.objects.get(node=node, index=0), rank=0, epoch=0)
    return task


@database_sync_to_async
def stored(task: TrainingTask, node: Node) -> tuple[int, int, str]:
    t = TrainingTask.objects.get(pk=task.pk)
    return MetricSample.objects.filter(task=t).count(), t.iteration, Node.objects.get(pk=node.pk).state


@database_sync_to_async
def metrics_status(task: TrainingTask) -> int:
    user: User = make_user(Role.VIEWER)
    client = APIClient()
    client.force_authenticate(user)
    return int(client.get(f"/api/v1/metrics/tasks/{task.pk}/").status_code)


async def test_unbounded_values_are_refused_and_the_link_stays_up(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.hello(devices=1)
    await agent.settle()
    task = await held_task(registered.node)

    bad_frames = [
        # Infinity and NaN are valid for Python's json module, not for the metrics API's JSON
        json.dumps(stats(task.pk, median_s=float("inf"))),
        json.dumps(stats(task.pk, loss=float("nan"))),
        json.dumps(stats(task.pk, tokens=10**30)),  # past bigint
        json.dumps(stats(task.pk, last_iteration=2**63)),
        json.dumps(stats(task.pk, median_s=1e-300)),  # rates would overflow to infinity
        json.dumps({**stats(task.pk), "task_id": "9" * 101}),  # longer than any node or task name
        json.dumps({**stats(task.pk), "epoch": 2**31}),
        json.dumps({**stats(task.pk), "task_id": "9" * 40}),  # past any primary key: no task of this node
    ]
    codes = []
    for raw in bad_frames:
        agent.seq += 1
        frame = {
            "protocol_version": PROTOCOL_VERSION,
            "node": agent.node,
            "session": agent.session,
            "seq": agent.seq,
            "sent_at": datetime.now(UTC).isoformat(),
            "message": json.loads(raw),
        }
        await agent.send_raw(json.dumps(frame))
        codes.append((await agent.receive())["message"]["code"])
    await agent.send({"type": "hello", **_hello(agent_version="v\x00")})  # NUL: PostgreSQL refuses it
    codes.append((await agent.receive())["message"]["code"])
    await agent.send({"type": "heartbeat", "uptime_s": 1.0}, seq=1)  # backwards
    codes.append((await agent.receive())["message"]["code"])

    assert codes == ["invalid"] * 7 + ["forbidden", "invalid", "out_of_order"]
    await agent.heartbeat()
    await agent.settle()  # still answering
    assert await stored(task, registered.node) == (0, 0, "healthy")
    assert await metrics_status(task) == 200


def _hello(**fields: Any) -> dict[str, Any]:
    from tests.e2e.conftest import hello_message

    return {**hello_message(1), **fields}

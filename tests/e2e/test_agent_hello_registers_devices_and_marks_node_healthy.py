from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.models import Device, Node
from tests.e2e.conftest import Connect, Register, Registered

pytestmark = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def node_and_devices(pk: int) -> tuple[Node, list[tuple[int, str, int, str]]]:
    devices = Device.objects.filter(node_id=pk).order_by("index")
    return Node.objects.get(pk=pk), [(d.index, d.kind, d.memory_bytes, d.state) for d in devices]


async def test_hello_registers_the_inventory_and_marks_the_joining_node_healthy(
    registered: Registered, connect: Connect
) -> None:
    agent = await connect(registered.token, registered.name)
    await agent.send(
        {
            "type": "hello",
            "agent_version": "0.2.0",
            "hostname": "gpu-host-7",
            "worker_kind": "megatron",
            "devices": [
                {"index": 0, "kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "memory_bytes": 85520809984},
                {"index": 1, "kind": "cpu", "name": "cpu-slot-1", "memory_bytes": 0},
            ],
        }
    )
    await agent.settle()

    node, devices = await node_and_devices(registered.node.pk)
    assert node.state == "healthy"
    assert node.agent_version == "0.2.0"
    assert node.last_heartbeat_at is not None
    assert devices == [
        (0, "h100-80g", 85520809984, "healthy"),
        (1, "cpu-slot", 4 * 2**30, "healthy"),  # a CPU slot reports no memory: the kind's is used
    ]


async def test_a_device_missing_from_a_later_hello_is_marked_failed(
    register: Register, connect: Connect
) -> None:
    reg = await database_sync_to_async(register)(devices=3)
    agent = await connect(reg.token, reg.name)
    await agent.hello(devices=2)
    await agent.settle()

    _, devices = await node_and_devices(reg.node.pk)
    assert [(i, state) for i, _, _, state in devices] == [(0, "healthy"), (1, "healthy"), (2, "failed")]

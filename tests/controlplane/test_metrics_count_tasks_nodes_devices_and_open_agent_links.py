"""/metrics: tasks, nodes and devices by state (every state, zero included), the agent links open
(a fresh heartbeat and not suspect) and the agents' command queue with its oldest pending command."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from controlplane.apps.fleet.models import AgentCommand, Device, Node
from controlplane.apps.metrics.exposition import render_exposition
from controlplane.apps.training.models import TrainingTask
from tests.controlplane.factories import NodeFactory, TaskFactory


def _samples() -> list[Sample]:
    text = render_exposition().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _value(samples: list[Sample], name: str, **labels: str) -> float | None:
    hits = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(hits) <= 1, (name, labels, hits)
    return hits[0] if hits else None


def test_states_links_and_command_queue_follow_the_rows(db: None) -> None:
    now = timezone.now()
    linked = NodeFactory(devices=2, last_heartbeat_at=now)
    silent = NodeFactory(devices=1, last_heartbeat_at=now - timedelta(minutes=5), state="lost")
    closed = NodeFactory(last_heartbeat_at=now, state="suspect")  # its link just closed
    task = TaskFactory(state="running")
    TaskFactory(state="pending")
    before = _samples()
    assert _value(before, "unicron_tasks", state="running") == 1.0
    assert _value(before, "unicron_tasks", state="completed") == 0.0
    assert _value(before, "unicron_nodes", state="healthy") == 1.0
    assert _value(before, "unicron_nodes", state="lost") == 1.0
    assert _value(before, "unicron_devices", state="healthy") == 3.0
    assert _value(before, "unicron_agent_links_open") == 1.0
    assert _value(before, "unicron_agent_commands", state="pending") == 0.0
    assert _value(before, "unicron_agent_command_oldest_pending_age_seconds") is None

    TrainingTask.objects.filter(pk=task.pk).update(state="reconfiguring")
    Node.objects.filter(pk=closed.pk).update(state="healthy")  # heartbeat resumed
    Device.objects.filter(node=silent).update(state="failed")
    old = AgentCommand.objects.create(node=linked, type="start_workers")
    AgentCommand.objects.filter(pk=old.pk).update(created_at=now - timedelta(seconds=30))
    AgentCommand.objects.create(node=linked, type="stop_workers")
    AgentCommand.objects.create(node=linked, type="retry", state="sent")
    AgentCommand.objects.create(node=linked, type="retry", state="acked")
    after = _samples()

    assert _value(after, "unicron_tasks", state="running") == 0.0
    assert _value(after, "unicron_tasks", state="reconfiguring") == 1.0
    assert _value(after, "unicron_nodes", state="healthy") == 2.0
    assert _value(after, "unicron_devices", state="failed") == 1.0
    assert _value(after, "unicron_agent_links_open") == 2.0
    assert _value(after, "unicron_agent_commands", state="pending") == 2.0
    assert _value(after, "unicron_agent_commands", state="sent") == 1.0
    age = _value(after, "unicron_agent_command_oldest_pending_age_seconds")
    assert age is not None
    assert 29.0 <= age <= 120.0

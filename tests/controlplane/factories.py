"""factory-boy factories for the control-plane models."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import factory
from django.contrib.auth.models import User

from controlplane.apps.fleet import last_seen
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.tokens import hash_node_token
from controlplane.apps.incidents.choices import Detector, Severity
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.planning.models import Plan, Transition, TransitionStep
from controlplane.apps.training.models import TrainingTask

GB = 10**9


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User

    username = factory.Sequence(lambda n: f"user{n}")


class NodeFactory(factory.django.DjangoModelFactory[Node]):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node-{n}")
    address = factory.Sequence(lambda n: f"10.0.0.{n % 250}")
    state = "healthy"
    token_hash = factory.LazyAttribute(lambda o: hash_node_token(f"token-of-{o.name}"))

    @factory.post_generation
    def heard(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        """A node made with ``last_heartbeat_at`` was last heard from then: its heartbeat time is in Redis,
        where the agent link keeps it (``fleet.last_seen``)."""
        if create and self.last_heartbeat_at is not None:
            last_seen.record(self.pk, self.last_heartbeat_at.timestamp())

    @factory.post_generation
    def devices(self, create: bool, extracted: Any, **kwargs: Any) -> None:
        """``NodeFactory(devices=8)`` adds eight 80 GB H100s."""
        if create and extracted:
            for i in range(int(extracted)):
                DeviceFactory(node=self, index=i)


class DeviceFactory(factory.django.DjangoModelFactory[Device]):
    class Meta:
        model = Device

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n)
    kind = "h100-80g"
    memory_bytes = 80 * GB


class TaskFactory(factory.django.DjangoModelFactory[TrainingTask]):
    class Meta:
        model = TrainingTask

    name = factory.Sequence(lambda n: f"gpt-{n}")
    num_layers = 4
    hidden_size = 256
    num_attention_heads = 8
    seq_length = 512
    vocab_size = 32000
    global_batch_size = 32
    micro_batch_size = 4
    weight = 1.0
    min_workers = 1
    max_workers = 8


class FailureEventFactory(factory.django.DjangoModelFactory[FailureEvent]):
    class Meta:
        model = FailureEvent

    detector = Detector.PROCESS_SUPERVISION
    kind = "worker_exited"
    severity = Severity.SEV2
    node = factory.SubFactory(NodeFactory)
    occurred_at = factory.LazyFunction(lambda: datetime.now(UTC))
    detected_at = factory.LazyFunction(lambda: datetime.now(UTC))


class AlertFactory(factory.django.DjangoModelFactory[Alert]):
    class Meta:
        model = Alert

    severity = Severity.SEV1
    source_event = factory.SubFactory(FailureEventFactory)
    node = factory.LazyAttribute(lambda o: o.source_event.node)
    message = "node lost"


class PlanFactory(factory.django.DjangoModelFactory[Plan]):
    class Meta:
        model = Plan

    trigger = "failure"
    decisions = factory.LazyFunction(lambda: [{"task": 1, "old_workers": 8, "new_workers": 4}])


class TransitionFactory(factory.django.DjangoModelFactory[Transition]):
    class Meta:
        model = Transition

    plan = factory.SubFactory(PlanFactory)
    task = factory.SubFactory(TaskFactory)
    epoch = 1


class TransitionStepFactory(factory.django.DjangoModelFactory[TransitionStep]):
    class Meta:
        model = TransitionStep

    transition = factory.SubFactory(TransitionFactory)
    order = factory.Sequence(lambda n: n)
    name = "stop_workers"


class MetricSampleFactory(factory.django.DjangoModelFactory[MetricSample]):
    class Meta:
        model = MetricSample

    kind = "cluster_waf"
    value = 1.0
    at = factory.LazyFunction(lambda: datetime.now(UTC))


def task_placed_on_one_of_two_nodes() -> tuple[TrainingTask, Node, Node]:
    """Two 4-device nodes and a 4-worker task the planner placed on one of them: (the task, its node, the
    other node)."""
    from django.db import transaction

    from controlplane.apps.planning.replan import replan
    from controlplane.apps.training.models import Allocation

    a, b = NodeFactory(devices=4), NodeFactory(devices=4)
    task = TaskFactory(min_workers=4, max_workers=4)
    with transaction.atomic():
        replan("task_submitted")
    (here,) = {al.device.node_id for al in Allocation.objects.filter(task=task, active=True)}
    task.refresh_from_db()
    return task, (a if here == a.pk else b), (b if here == a.pk else a)

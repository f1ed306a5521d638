from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.apps.common.serializers import StrictInputSerializer
from controlplane.apps.training.models import Allocation, TrainingTask

MAX_WORKERS_LIMIT = 65536
MAX_TASK_WEIGHT = 1000.0
"""A task's priority w(t) is at most this (docs/DEPLOY.md): the cluster WAF (sum of w(t) x FLOP/s) must
stay a finite double in every sample, plan and report."""


def check_task_weight(value: float) -> None:
    """A weight is a finite number in [0, MAX_TASK_WEIGHT]; the admin form applies the same check."""
    if not math.isfinite(value):
        raise serializers.ValidationError("Weight must be a finite number.")
    if value < 0:
        raise serializers.ValidationError("Weight must be >= 0.")
    if value > MAX_TASK_WEIGHT:
        raise serializers.ValidationError(f"Weight must be <= {MAX_TASK_WEIGHT:g}.")


class AllocationSerializer(serializers.ModelSerializer[Allocation]):
    node = serializers.CharField(source="device.node.name", read_only=True)
    device_index = serializers.IntegerField(source="device.index", read_only=True)

    class Meta:
        model = Allocation
        fields = [
            "id",
            "device",
            "node",
            "device_index",
            "rank",
            "role",
            "tp_rank",
            "pp_rank",
            "dp_rank",
            "epoch",
        ]


class TaskSerializer(serializers.ModelSerializer[TrainingTask]):
    owner: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    allocations = serializers.SerializerMethodField(help_text="Active allocations, by rank.")

    class Meta:
        model = TrainingTask
        fields = [
            "id",
            "name",
            "owner",
            "state",
            "weight",
            "min_workers",
            "max_workers",
            "allocation_unit",
            "num_layers",
            "hidden_size",
            "num_attention_heads",
            "seq_length",
            "vocab_size",
            "global_batch_size",
            "micro_batch_size",
            "activation_recomputation",
            "epoch",
            "iteration",
            "total_iterations",
            "pending_reason",
            "created_at",
            "updated_at",
            "finished_at",
            "throughput_table",
            "allocations",
        ]

    @extend_schema_field(AllocationSerializer(many=True))
    def get_allocations(self, task: TrainingTask) -> list[dict[str, object]]:
        active = getattr(task, "active_allocations", None)
        if active is None:
            active = task.allocations.filter(active=True).select_related("device__node").order_by("rank")
        return AllocationSerializer(active, many=True).data  # type: ignore[return-value]


class TaskSubmitSerializer(StrictInputSerializer):
    name = serializers.CharField(max_length=120)
    num_layers = serializers.IntegerField(min_value=1, max_value=10_000)
    hidden_size = serializers.IntegerField(min_value=1, max_value=1_000_000)
    num_attention_heads = serializers.IntegerField(min_value=1, max_value=10_000)
    seq_length = serializers.IntegerField(min_value=1, max_value=10_000_000)
    vocab_size = serializers.IntegerField(min_value=1, max_value=100_000_000)
    global_batch_size = serializers.IntegerField(min_value=1, max_value=10_000_000)
    micro_batch_size = serializers.IntegerField(min_value=1, max_value=1_000_000)
    activation_recomputation = serializers.BooleanField(required=False, default=False)
    weight = serializers.FloatField(
        required=False, default=1.0, min_value=0.0, max_value=MAX_TASK_WEIGHT, validators=[check_task_weight]
    )
    min_workers = serializers.IntegerField(
        min_value=1, max_value=MAX_WORKERS_LIMIT, required=False, default=1
    )
    max_workers = serializers.IntegerField(
        min_value=1, max_value=MAX_WORKERS_LIMIT, required=False, default=1
    )
    allocation_unit = serializers.IntegerField(
        min_value=1, max_value=MAX_WORKERS_LIMIT, required=False, default=1
    )
    total_iterations = serializers.IntegerField(min_value=1, max_value=10**12, required=False, default=1000)


class ChangeWeightSerializer(StrictInputSerializer):
    weight = serializers.FloatField(min_value=0.0, max_value=MAX_TASK_WEIGHT, validators=[check_task_weight])

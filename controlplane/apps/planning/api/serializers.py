from __future__ import annotations

from rest_framework import serializers

from controlplane.apps.planning.models import Plan, Transition, TransitionStep


class PlanSerializer(serializers.ModelSerializer[Plan]):
    class Meta:
        model = Plan
        fields = [
            "id",
            "trigger",
            "failure_event",
            "input_snapshot",
            "decisions",
            "expected_waf",
            "transition_cost",
            "d_running_s",
            "compute_time_ms",
            "lookup",
            "explanation",
            "created_at",
        ]


class TransitionStepSerializer(serializers.ModelSerializer[TransitionStep]):
    class Meta:
        model = TransitionStep
        fields = ["order", "name", "state", "detail", "started_at", "finished_at"]


class TransitionSerializer(serializers.ModelSerializer[Transition]):
    steps = TransitionStepSerializer(many=True, read_only=True)
    task_name = serializers.CharField(source="task.name", read_only=True)

    class Meta:
        model = Transition
        fields = [
            "id",
            "plan",
            "task",
            "task_name",
            "state",
            "kind",
            "failure_event",
            "epoch",
            "previous_epoch",
            "resume_iteration",
            "old_workers",
            "new_workers",
            "phases_s",
            "detection_latency_s",
            "lost_microbatches",
            "lost_work_s",
            "migration_sources",
            "error",
            "created_at",
            "started_at",
            "finished_at",
            "steps",
        ]

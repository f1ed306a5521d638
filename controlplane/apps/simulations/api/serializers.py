from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.apps.common.serializers import StrictInputSerializer
from controlplane.apps.simulations.models import SimulationRun
from controlplane.apps.simulations.services import MAX_DAYS


class SimulationRequestSerializer(StrictInputSerializer):
    trace = serializers.CharField(max_length=64, help_text="A generated failure trace: trace-a or trace-b.")
    days = serializers.FloatField(min_value=0.001, max_value=MAX_DAYS, default=7.0)
    seed = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)


class SimulationRunSerializer(serializers.ModelSerializer[SimulationRun]):
    requested_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )
    ratios = serializers.SerializerMethodField()

    class Meta:
        model = SimulationRun
        fields = [
            "id",
            "requested_by",
            "trace",
            "days",
            "seed",
            "cluster",
            "tasks",
            "state",
            "progress",
            "ratios",
            "report",
            "error",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_ratios(self, run: SimulationRun) -> dict[str, float | None]:
        """Accumulated WAF of each policy over checkpoint-restart's (empty until the run succeeds)."""
        report: dict[str, Any] = run.report or {}
        return {name: p.get("ratio_to_checkpoint_restart") for name, p in report.get("policies", {}).items()}

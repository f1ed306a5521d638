from __future__ import annotations

from django.db import models
from django.db.models import Q

from controlplane.apps.metrics.choices import MetricKind


class MetricSample(models.Model):
    """One measurement; ``task`` is null for cluster-wide series (WAF)."""

    task = models.ForeignKey(
        "training.TrainingTask",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="metric_samples",
    )
    kind = models.CharField(max_length=32, choices=MetricKind.choices)
    value = models.FloatField()
    iteration = models.PositiveBigIntegerField(null=True, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["at", "id"]
        indexes = [
            models.Index(fields=["task", "kind", "at"], name="metric_task_kind_at"),
            models.Index(
                fields=["kind", "at"], condition=Q(task__isnull=True), name="metric_cluster_kind_at"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind}={self.value} @ {self.at:%Y-%m-%d %H:%M:%S}"

"""A what-if simulation is a background run, so it is a row (STYLE §5): who asked, what, its state, its
progress and its report or error."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from controlplane.apps.common.statemachine import StateMachine


class RunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


RUN_MACHINE = StateMachine(
    "simulation run",
    {
        RunState.QUEUED: frozenset({RunState.RUNNING, RunState.FAILED}),
        RunState.RUNNING: frozenset({RunState.SUCCEEDED, RunState.FAILED}),
        RunState.SUCCEEDED: frozenset(),
        RunState.FAILED: frozenset(),
    },
    terminal=frozenset({RunState.SUCCEEDED, RunState.FAILED}),
)


class SimulationRun(models.Model):
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    trace = models.CharField(max_length=64, help_text="Name of a generated failure trace.")
    days = models.FloatField(help_text="Simulated time span in days.")
    seed = models.PositiveIntegerField(null=True, blank=True)
    cluster = models.JSONField(default=dict, help_text="Snapshot of the live cluster the run simulates.")
    tasks = models.JSONField(default=list, help_text="Snapshot of the live tasks the run simulates.")
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    progress = models.FloatField(default=0.0)
    report = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(condition=models.Q(days__gt=0), name="simulation_days_positive"),
        ]

    def __str__(self) -> str:
        return f"simulation {self.pk} ({self.trace}, {self.state})"

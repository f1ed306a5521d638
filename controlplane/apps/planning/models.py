from __future__ import annotations

from django.db import models

from controlplane.apps.planning.choices import PlanTrigger, StepState, TransitionKind, TransitionState


class Plan(models.Model):
    """One output of the planner: worker counts and parallel configs for every task (docs/ARCHITECTURE.md
    §7.3-7.5)."""

    trigger = models.CharField(max_length=32, choices=PlanTrigger.choices)
    failure_event = models.ForeignKey(
        "incidents.FailureEvent", null=True, blank=True, on_delete=models.SET_NULL, related_name="plans"
    )
    input_snapshot = models.JSONField(
        default=dict, blank=True, help_text="Tasks, counts and units planned over."
    )
    decisions = models.JSONField(
        default=list,
        blank=True,
        help_text="Per task: {task, old_workers, new_workers, old_config, new_config}.",
    )
    expected_waf = models.FloatField(default=0.0)
    transition_cost = models.FloatField(default=0.0)
    d_running_s = models.FloatField(default=0.0, help_text="D_running used (seconds).")
    compute_time_ms = models.FloatField(default=0.0)
    lookup = models.BooleanField(
        default=False, help_text="True: the decision was a precomputed plan (a lookup), not a fresh DP."
    )
    explanation = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"plan {self.pk} ({self.trigger})"


class Transition(models.Model):
    """Carrying out a plan for one task: a persisted state machine advanced by acks and reports."""

    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="transitions")
    task = models.ForeignKey("training.TrainingTask", on_delete=models.CASCADE, related_name="transitions")
    state = models.CharField(max_length=16, choices=TransitionState.choices, default=TransitionState.PENDING)
    epoch = models.PositiveIntegerField(help_text="The task epoch this transition moves to.")
    kind = models.CharField(max_length=16, choices=TransitionKind.choices, default=TransitionKind.RECONFIGURE)
    failure_event = models.ForeignKey(
        "incidents.FailureEvent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The failure this transition recovers from (None: a plan-driven change).",
    )
    old_workers = models.PositiveIntegerField(default=0)
    new_workers = models.PositiveIntegerField(default=0)
    previous_epoch = models.PositiveIntegerField(null=True, blank=True)
    rendezvous_port = models.PositiveIntegerField(null=True, blank=True)
    resume_iteration = models.PositiveBigIntegerField(null=True, blank=True)
    phases_s = models.JSONField(default=dict, blank=True, help_text="Seconds per phase.")
    detection_latency_s = models.FloatField(
        null=True, blank=True, help_text="Failure detected_at - occurred_at."
    )
    lost_microbatches = models.PositiveIntegerField(default=0)
    lost_work_s = models.FloatField(default=0.0, help_text="Recomputation the transition cost, in seconds.")
    migration_sources = models.JSONField(default=dict, blank=True, help_text="Source used per rank.")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state"], name="transition_state")]
        constraints = [
            models.UniqueConstraint(fields=["task", "epoch"], name="transition_unique_task_epoch"),
        ]

    def __str__(self) -> str:
        return f"transition {self.pk} task {self.task_id} -> epoch {self.epoch} ({self.state})"


class TransitionStep(models.Model):
    transition = models.ForeignKey(Transition, on_delete=models.CASCADE, related_name="steps")
    order = models.PositiveIntegerField()
    name = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=StepState.choices, default=StepState.PENDING)
    detail = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["transition_id", "order"]
        constraints = [
            models.UniqueConstraint(fields=["transition", "order"], name="step_unique_order"),
        ]

    def __str__(self) -> str:
        return f"{self.transition_id}.{self.order} {self.name} ({self.state})"

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from controlplane.apps.training.choices import ParallelRole, TaskState


def new_snapshot_secret() -> str:
    """A task's snapshot-plane key: 256 random bits, hex."""
    return secrets.token_hex(32)


class TrainingTask(models.Model):
    """An LLM training job: its GPT model spec, its priority (weight) and elastic worker range."""

    name = models.CharField(max_length=120)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="tasks"
    )
    # model spec (a GPT; Narayanan et al. SC'21 FLOPs formula inputs)
    num_layers = models.PositiveIntegerField()
    hidden_size = models.PositiveIntegerField()
    num_attention_heads = models.PositiveIntegerField()
    seq_length = models.PositiveIntegerField()
    vocab_size = models.PositiveIntegerField()
    global_batch_size = models.PositiveIntegerField()
    micro_batch_size = models.PositiveIntegerField()
    activation_recomputation = models.BooleanField(default=False)
    recipe = models.JSONField(
        default=dict,
        help_text="The validated training recipe (controlplane.core.recipe, docs/DATA.md); the model spec "
        "fields above are its model section and batch, kept as columns for the planner's queries.",
    )
    # scheduling
    weight = models.FloatField(default=1.0, help_text="Priority w(t) >= 0 in the weighted achieved FLOP/s.")
    min_workers = models.PositiveIntegerField(default=1)
    max_workers = models.PositiveIntegerField(default=1)
    allocation_unit = models.PositiveIntegerField(default=1, help_text="Devices per planning unit.")
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.PENDING)
    epoch = models.PositiveIntegerField(
        default=0, help_text="Incremented on every reconfiguration (fencing)."
    )
    iteration = models.PositiveBigIntegerField(default=0)
    total_iterations = models.PositiveBigIntegerField(
        default=1000, help_text="Iterations to train in total; the task completes when every rank finished."
    )
    parallel_config = models.JSONField(
        default=dict, blank=True, help_text="The running layout {tp, pp, dp, micro_batch} (empty: none)."
    )
    pending_reason = models.TextField(
        blank=True, help_text="Why the task is queued or suspended (empty while it runs)."
    )
    throughput_table = models.JSONField(default=dict, blank=True)
    snapshot_secret = models.CharField(
        max_length=64,
        default=new_snapshot_secret,
        editable=False,
        help_text="Key of the task's snapshot transfers between agents (HMAC); sent only in its commands.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state"], name="task_state")]
        constraints = [
            models.CheckConstraint(condition=Q(weight__gte=0), name="task_weight_non_negative"),
            models.CheckConstraint(
                condition=Q(min_workers__lte=F("max_workers")), name="task_min_le_max_workers"
            ),
            models.CheckConstraint(condition=Q(min_workers__gte=1), name="task_min_workers_positive"),
            models.CheckConstraint(condition=Q(allocation_unit__gte=1), name="task_allocation_unit_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class Allocation(models.Model):
    """Task ↔ device with its rank; a device is in at most one active allocation (a DB constraint)."""

    task = models.ForeignKey(TrainingTask, on_delete=models.CASCADE, related_name="allocations")
    device = models.ForeignKey("fleet.Device", on_delete=models.PROTECT, related_name="allocations")
    rank = models.PositiveIntegerField()
    role = models.CharField(max_length=32, choices=ParallelRole.choices, default=ParallelRole.WORKER)
    tp_rank = models.PositiveIntegerField(default=0)
    pp_rank = models.PositiveIntegerField(default=0)
    dp_rank = models.PositiveIntegerField(default=0)
    epoch = models.PositiveIntegerField(default=0, help_text="The task epoch this allocation belongs to.")
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="The rank exited after its last iteration (task completion)."
    )

    class Meta:
        ordering = ["task_id", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["device"], condition=Q(active=True), name="allocation_one_active_per_device"
            ),
            models.UniqueConstraint(
                fields=["task", "rank"], condition=Q(active=True), name="allocation_unique_active_rank"
            ),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id} rank {self.rank} -> device {self.device_id}"


class Checkpoint(models.Model):
    """A persistent checkpoint an agent reported saved: the control plane's record of what a task can
    resume from (it never reads the checkpoint directory itself; the nodes share that storage)."""

    task = models.ForeignKey(TrainingTask, on_delete=models.CASCADE, related_name="checkpoints")
    iteration = models.PositiveBigIntegerField()
    path = models.TextField()
    size_bytes = models.PositiveBigIntegerField()
    validation_loss = models.FloatField(null=True, blank=True)
    epoch = models.PositiveIntegerField(help_text="The task epoch of the report.")
    rank = models.PositiveIntegerField(help_text="The rank that reported it.")
    saved_at = models.DateTimeField(help_text="When the agent saw it complete.")
    recorded_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-iteration"]
        constraints = [
            models.UniqueConstraint(fields=["task", "iteration"], name="checkpoint_task_iteration_unique")
        ]

    def __str__(self) -> str:
        return f"{self.task_id}@{self.iteration}"

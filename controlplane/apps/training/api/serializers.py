from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.apps.common.serializers import StrictInputSerializer
from controlplane.apps.training.models import Allocation, Checkpoint, TrainingTask
from controlplane.apps.training.services import TaskSubmission
from controlplane.core.recipe import Recipe, RecipeInvalid, load_recipe, recipe_from_mapping

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
            "recipe",
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


SHAPE_FIELDS = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "seq_length",
    "vocab_size",
    "global_batch_size",
    "micro_batch_size",
    "total_iterations",
)
"""Submit fields that a recipe gives (its model section, batch and length)."""


class TaskSubmitSerializer(StrictInputSerializer):
    """A task as a recipe (a JSON object, or JSON/YAML text) or as a bare model shape (synthetic tokens)."""

    name = serializers.CharField(max_length=120)
    recipe = serializers.JSONField(
        required=False,
        help_text="The training recipe (docs/DATA.md): a JSON object, or its JSON or YAML text. "
        "With a recipe, leave out the shape fields (num_layers ... total_iterations).",
    )
    num_layers = serializers.IntegerField(min_value=1, max_value=10_000, required=False)
    hidden_size = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    num_attention_heads = serializers.IntegerField(min_value=1, max_value=10_000, required=False)
    seq_length = serializers.IntegerField(min_value=1, max_value=10_000_000, required=False)
    vocab_size = serializers.IntegerField(min_value=1, max_value=100_000_000, required=False)
    global_batch_size = serializers.IntegerField(min_value=1, max_value=10_000_000, required=False)
    micro_batch_size = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
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
    total_iterations = serializers.IntegerField(min_value=1, max_value=10**12, required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "recipe" in attrs:
            given = [f for f in SHAPE_FIELDS if f in attrs]
            if given:
                raise serializers.ValidationError(
                    {f: ["Given by the recipe: leave it out when submitting a recipe."] for f in given}
                )
            attrs["recipe"] = parse_recipe(attrs["recipe"])
            return attrs
        missing = [f for f in SHAPE_FIELDS if f not in attrs and f != "total_iterations"]
        if missing:
            raise serializers.ValidationError(
                {f: ["This field is required (or submit a recipe)."] for f in missing}
            )
        return attrs

    def submission(self) -> TaskSubmission:
        """The validated submission (call after :meth:`is_valid`)."""
        data = dict(self.validated_data)
        recipe = data.pop("recipe", None)
        if recipe is None:
            return TaskSubmission(**data)
        return TaskSubmission.from_recipe(recipe=recipe, **data)


MAX_RECIPE_TEXT = 256 * 1024
"""Characters of recipe text (a recipe is a page; this bounds what the YAML parser is given)."""


def parse_recipe(document: Any) -> Recipe:
    """A recipe from a JSON object or JSON/YAML text; a ValidationError keyed ``recipe.<field path>``."""
    if isinstance(document, str) and len(document) > MAX_RECIPE_TEXT:
        raise serializers.ValidationError({"recipe": [f"longer than {MAX_RECIPE_TEXT} characters."]})
    try:
        if isinstance(document, str):
            return load_recipe(document)
        return recipe_from_mapping(document)
    except RecipeInvalid as e:
        errors: dict[str, list[str]] = {}
        for error in e.errors:
            key = f"recipe.{error.field}" if error.field else "recipe"
            errors.setdefault(key, []).append(error.message)
        raise serializers.ValidationError(errors) from None


class CheckpointSerializer(serializers.ModelSerializer[Checkpoint]):
    class Meta:
        model = Checkpoint
        fields = ["iteration", "path", "size_bytes", "validation_loss", "epoch", "rank", "saved_at"]


class ChangeWeightSerializer(StrictInputSerializer):
    weight = serializers.FloatField(min_value=0.0, max_value=MAX_TASK_WEIGHT, validators=[check_task_weight])

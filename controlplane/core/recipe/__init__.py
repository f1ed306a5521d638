"""Training recipes: one validated, versioned document describing a real training run.

- ``model``: :class:`Recipe` and its sections (model, data, optimizer, schedule, checkpoint, eval),
  :meth:`Recipe.to_spec` for the planning core's FLOPs/memory model, :func:`recipe_for_spec` for a
  task given only as a model shape.
- ``load``: :func:`load_recipe` (JSON or YAML text), :func:`check_recipe` (every problem as a
  :class:`RecipeError` naming its field path), :class:`RecipeInvalid`.

Pure: pydantic and PyYAML only.
"""

from controlplane.core.recipe.load import (
    RecipeError,
    RecipeInvalid,
    check_recipe,
    load_recipe,
    recipe_from_mapping,
)
from controlplane.core.recipe.model import (
    RECIPE_VERSION,
    BlendEntry,
    CheckpointSection,
    DataSection,
    EvalSection,
    ModelSection,
    OptimizerSection,
    Recipe,
    ScheduleSection,
    default_ffn_hidden_size,
    parse_split,
    recipe_for_spec,
)

__all__ = [
    "RECIPE_VERSION",
    "BlendEntry",
    "CheckpointSection",
    "DataSection",
    "EvalSection",
    "ModelSection",
    "OptimizerSection",
    "Recipe",
    "RecipeError",
    "RecipeInvalid",
    "ScheduleSection",
    "check_recipe",
    "default_ffn_hidden_size",
    "load_recipe",
    "parse_split",
    "recipe_for_spec",
    "recipe_from_mapping",
]

"""Invalid recipes and the field each is refused on: the cases of
``test_an_invalid_recipe_is_refused_naming_the_field_and_nothing_is_stored.py`` and of the table
``tools/recipe_errors.py`` prints into docs/DATA.md ("What a bad recipe gets").

Each case is ``(name, edit, field)``: ``edit`` changes :func:`valid` (in place, or returns the document
to send instead), and ``field`` is the key the API's 400 answer must have. :func:`answer` is what the
submit path answers without the database (Django is imported there only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def valid() -> dict[str, Any]:
    return {
        "version": 1,
        "model": {
            "num_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "seq_length": 32,
            "vocab_size": 2048,
        },
        "data": {
            "tokenizer": "/shared/tok/tokenizer.json",
            "blend": [{"path_prefix": "/shared/data/pydoc", "weight": 1.0}],
            "split": "98,2,0",
        },
        "schedule": {"lr": 3e-3, "min_lr": 3e-4, "warmup_iterations": 20},
        "checkpoint": {"directory": "/shared/ckpt/tiny", "interval": 100},
        "eval": {"interval": 50, "iterations": 4},
        "train_iterations": 500,
        "global_batch_size": 8,
        "micro_batch_size": 2,
    }


@dataclass(frozen=True)
class Edit:
    """A change to the valid recipe, and how the table describes it."""

    description: str
    apply: Callable[[dict[str, Any]], Any]

    def __call__(self, recipe: dict[str, Any]) -> Any:
        return self.apply(recipe)


def put(path: str, value: Any) -> Edit:
    def edit(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = r
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value

    return Edit(f"`{path}: {_json(value)}`", edit)


def drop(path: str) -> Edit:
    def edit(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = r
        for p in parents:
            node = node[p]
        del node[last]

    return Edit(f"without `{path}`", edit)


def change(description: str, apply: Callable[[dict[str, Any]], Any]) -> Edit:
    return Edit(description, apply)


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


CASES: list[tuple[str, Edit, str]] = [
    ("no version", drop("version"), "recipe.version"),
    ("a future version", put("version", 2), "recipe.version"),
    ("no model", drop("model"), "recipe.model"),
    ("zero layers", put("model.num_layers", 0), "recipe.model.num_layers"),
    ("layers as a string", put("model.num_layers", "2"), "recipe.model.num_layers"),
    (
        "heads that do not divide hidden",
        put("model.num_attention_heads", 5),
        "recipe.model.num_attention_heads",
    ),
    (
        "query groups that do not divide heads",
        put("model.num_query_groups", 3),
        "recipe.model.num_query_groups",
    ),
    ("an unknown activation", put("model.activation", "relu"), "recipe.model.activation"),
    ("an unknown model field", put("model.layers", 2), "recipe.model.layers"),
    (
        "rope with an odd head size",
        change(
            "`model: hidden_size 12, num_attention_heads 4, position_embedding rope`",
            lambda r: r["model"].update(hidden_size=12, num_attention_heads=4, position_embedding="rope"),
        ),
        "recipe.model.position_embedding",
    ),
    ("dropout of one", put("model.hidden_dropout", 1.0), "recipe.model.hidden_dropout"),
    ("a provider that is no import path", put("model.provider", "not a path"), "recipe.model.provider"),
    ("no vocabulary size", drop("model.vocab_size"), "recipe.model.vocab_size"),
    ("no tokenizer", drop("data.tokenizer"), "recipe.data.tokenizer"),
    ("a blend without a split", drop("data.split"), "recipe.data.split"),
    ("a split of two numbers", put("data.split", "98,2"), "recipe.data.split"),
    (
        "a blend prefix ending in .bin",
        put("data.blend.0.path_prefix", "/d/x.bin"),
        "recipe.data.blend.0.path_prefix",
    ),
    ("a zero blend weight", put("data.blend.0.weight", 0), "recipe.data.blend.0.weight"),
    ("no learning rate", drop("schedule.lr"), "recipe.schedule.lr"),
    ("min_lr above lr", put("schedule.min_lr", 1.0), "recipe.schedule.min_lr"),
    (
        "warmup as long as the run",
        put("schedule.warmup_iterations", 500),
        "recipe.schedule.warmup_iterations",
    ),
    ("an unknown decay style", put("schedule.decay_style", "step"), "recipe.schedule.decay_style"),
    ("an unknown optimizer", put("optimizer", {"name": "sgd"}), "recipe.optimizer.name"),
    ("a beta of one", put("optimizer", {"beta2": 1.0}), "recipe.optimizer.beta2"),
    ("a zero checkpoint interval", put("checkpoint.interval", 0), "recipe.checkpoint.interval"),
    ("a checkpoint without a directory", drop("checkpoint.directory"), "recipe.checkpoint.directory"),
    ("eval without validation data", put("data.split", "100,0,0"), "recipe.eval"),
    ("micro batch not dividing global", put("micro_batch_size", 3), "recipe.micro_batch_size"),
    ("both iterations and tokens", put("train_tokens", 1000), "recipe.train_tokens"),
    ("neither iterations nor tokens", drop("train_iterations"), "recipe.train_iterations"),
    ("an unknown section", put("tokenizer", "x"), "recipe.tokenizer"),
    ("a recipe that is a list", change("the recipe inside a list", lambda r: [r]), "recipe"),
    (
        "YAML that does not parse",
        change("the text `version: 1\\nmodel: [\\n`", lambda r: "version: 1\nmodel: [\n"),
        "recipe",
    ),
    (
        "YAML with aliases",
        change("the text `a: &x [1, 2]\\nb: [*x, *x]\\n`", lambda r: "a: &x [1, 2]\nb: [*x, *x]\n"),
        "recipe",
    ),
    ("recipe text too long", change("a text of 262,145 `#`", lambda r: "#" * (256 * 1024 + 1)), "recipe"),
]


def answer(document: Any) -> tuple[int, dict[str, Any]]:
    """The status and JSON body ``POST /api/v1/tasks/`` gives ``{"name": "bad", "recipe": document}``
    up to the database: the submit serializer's field errors, then the submission's
    (:meth:`TaskSubmission.from_recipe`); ``(201, {})`` when both accept it. Needs Django's settings."""
    import json

    from controlplane.apps.common.errors import DomainError
    from controlplane.apps.training.api.serializers import TaskSubmitSerializer

    serializer = TaskSubmitSerializer(data={"name": "bad", "recipe": document})
    if not serializer.is_valid():
        return 400, json.loads(json.dumps(serializer.errors))
    try:
        serializer.submission()
    except DomainError as e:
        return e.status, json.loads(json.dumps(e.as_payload()))
    return 201, {}

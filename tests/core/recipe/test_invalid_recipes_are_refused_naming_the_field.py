"""Each invalid recipe is refused, and the error names the field at fault."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from controlplane.core.recipe import RecipeInvalid, check_recipe, recipe_from_mapping
from tests.core.recipe.recipes import valid_recipe

Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    def edit(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = r
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[last] = value

    return edit


def _drop(path: str) -> Edit:
    def edit(r: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = r
        for p in parents:
            node = node[p]
        del node[last]

    return edit


def _blend_with_split(r: dict[str, Any]) -> None:
    r["data"] = {"tokenizer": "t.json", "blend": [{"path_prefix": "p"}]}


def _both_blend_kinds(r: dict[str, Any]) -> None:
    r["data"]["blend"] = [{"path_prefix": "p"}]
    r["data"]["split"] = "98,2,0"


def _valid_without_train(r: dict[str, Any]) -> None:
    del r["data"]["train"]


def _both_lengths(r: dict[str, Any]) -> None:
    r["train_tokens"] = 10**9


def _no_validation_data_with_eval(r: dict[str, Any]) -> None:
    r["data"] = {"tokenizer": "t.json", "blend": [{"path_prefix": "p"}], "split": "100,0,0"}


CASES: list[tuple[str, Edit, str, str]] = [
    (
        "query groups do not divide heads",
        _set("model.num_query_groups", 5),
        "model.num_query_groups",
        "must divide num_attention_heads (12)",
    ),
    (
        "heads do not divide hidden",
        _set("model.num_attention_heads", 7),
        "model.num_attention_heads",
        "must divide hidden_size (768)",
    ),
    ("zero layers", _set("model.num_layers", 0), "model.num_layers", "must be >= 1"),
    ("a string for a number", _set("model.hidden_size", "768"), "model.hidden_size", "must be an integer"),
    ("a fraction for an integer", _set("model.seq_length", 10.5), "model.seq_length", "must be an integer"),
    (
        "unknown position embedding",
        _set("model.position_embedding", "alibi"),
        "model.position_embedding",
        "'learned' or 'rope'",
    ),
    ("unknown normalization", _set("model.normalization", "BatchNorm"), "model.normalization", "RMSNorm"),
    ("unknown activation", _set("model.activation", "relu"), "model.activation", "swiglu"),
    ("dropout of 1", _set("model.hidden_dropout", 1.0), "model.hidden_dropout", "must be < 1"),
    ("negative dropout", _set("model.attention_dropout", -0.1), "model.attention_dropout", "must be >= 0"),
    (
        "provider without a function",
        _set("model.provider", "mypkg.models"),
        "model.provider",
        "package.module:function",
    ),
    (
        "rope with an odd head size",
        _set("model.hidden_size", 780),
        "model.position_embedding",
        "even head size",
    ),
    ("an unknown model field", _set("model.vocab", 50257), "model.vocab", "unknown field"),
    ("synthetic data without a vocabulary", _drop("data"), "model.vocab_size", "required without a data"),
    ("a zero vocabulary", _set("model.vocab_size", 0), "model.vocab_size", "must be >= 1"),
    ("an unknown top-level field", _set("epochs", 3), "epochs", "unknown field"),
    ("a zero blend weight", _set("data.train.1.weight", 0), "data.train.1.weight", "must be > 0"),
    (
        "a path with its suffix",
        _set("data.valid.0.path_prefix", "/d/x.bin"),
        "data.valid.0.path_prefix",
        "without .bin/.idx",
    ),
    ("an empty blend", _set("data.train", []), "data.train", "at least 1"),
    ("a blend without a split", _blend_with_split, "data.split", "required with blend"),
    ("blend and train together", _both_blend_kinds, "data.train", "not both"),
    ("valid without train", _valid_without_train, "data.train", "required with valid"),
    (
        "a two-part split",
        lambda r: (_blend_with_split(r), _set("data.split", "98,2")(r)),
        "data.split",
        "three comma-separated",
    ),
    (
        "a split with no training share",
        lambda r: (_blend_with_split(r), _set("data.split", "0,50,50")(r)),
        "data.split",
        "train share must be > 0",
    ),
    ("no tokenizer", _drop("data.tokenizer"), "data.tokenizer", "required"),
    ("beta of 1", _set("optimizer.beta2", 1.0), "optimizer.beta2", "must be < 1"),
    ("beta of 0", _set("optimizer.beta1", 0.0), "optimizer.beta1", "must be > 0"),
    ("zero eps", _set("optimizer.eps", 0.0), "optimizer.eps", "must be > 0"),
    (
        "negative weight decay",
        _set("optimizer.weight_decay", -0.01),
        "optimizer.weight_decay",
        "must be >= 0",
    ),
    ("zero gradient clip", _set("optimizer.clip_grad", 0), "optimizer.clip_grad", "must be > 0"),
    ("unknown optimizer", _set("optimizer.name", "sgd"), "optimizer.name", "'adam' or 'adamw'"),
    ("zero lr", _set("schedule.lr", 0.0), "schedule.lr", "must be > 0"),
    ("min_lr above lr", _set("schedule.min_lr", 1e-3), "schedule.min_lr", "must be <= lr (0.0006)"),
    ("negative warmup", _set("schedule.warmup_iterations", -1), "schedule.warmup_iterations", "must be >= 0"),
    (
        "decay ends before warmup",
        _set("schedule.decay_iterations", 50),
        "schedule.decay_iterations",
        "must be > warmup_iterations (100)",
    ),
    ("unknown decay style", _set("schedule.decay_style", "step"), "schedule.decay_style", "cosine"),
    (
        "warmup longer than the run",
        _set("train_iterations", 100),
        "schedule.warmup_iterations",
        "less than the run's 100 iterations",
    ),
    ("keep no checkpoints", _set("checkpoint.keep", 0), "checkpoint.keep", "must be >= 1"),
    ("an unknown checkpoint format", _set("checkpoint.format", "torch"), "checkpoint.format", "torch_dist"),
    ("zero checkpoint interval", _set("checkpoint.interval", 0), "checkpoint.interval", "must be >= 1"),
    ("zero eval iterations", _set("eval.iterations", 0), "eval.iterations", "must be >= 1"),
    ("eval without validation data", _no_validation_data_with_eval, "eval", "needs validation data"),
    (
        "global batch not a multiple of micro",
        _set("micro_batch_size", 5),
        "micro_batch_size",
        "must divide global_batch_size (64)",
    ),
    ("both run lengths", _both_lengths, "train_tokens", "exactly one"),
    ("no run length", _drop("train_iterations"), "train_iterations", "exactly one"),
    ("a negative seed", _set("seed", -1), "seed", "must be >= 0"),
    ("no schedule", _drop("schedule"), "schedule", "required"),
    ("a section that is not a mapping", _set("optimizer", [1, 2]), "optimizer", "must be a mapping"),
    ("an unknown version", _set("version", 2), "version", "unsupported recipe version 2"),
    ("no version", _drop("version"), "version", "required"),
]


def test_the_table_covers_at_least_twenty_distinct_fields() -> None:
    assert len({field for _, _, field, _ in CASES}) >= 20


def test_the_unedited_recipe_is_valid() -> None:
    assert check_recipe(valid_recipe()) == []


@pytest.mark.parametrize(("edit", "field", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_invalid_recipe_is_refused_naming_the_field(edit: Edit, field: str, message: str) -> None:
    recipe = valid_recipe()
    edit(recipe)
    errors = check_recipe(recipe)
    assert [e.field for e in errors] == [field], errors
    assert message in errors[0].message
    with pytest.raises(RecipeInvalid) as refused:
        recipe_from_mapping(recipe)
    assert str(refused.value).startswith(f"{field}: ")


def test_every_problem_of_a_recipe_is_reported_at_once() -> None:
    recipe = valid_recipe()
    recipe["model"]["num_query_groups"] = 5
    recipe["optimizer"]["beta2"] = 1.5
    recipe["checkpoint"]["frequency"] = 10
    fields = {e.field for e in check_recipe(recipe)}
    assert fields == {"model.num_query_groups", "optimizer.beta2", "checkpoint.frequency"}


def test_the_query_group_error_reads_as_documented() -> None:
    recipe = valid_recipe()
    recipe["model"]["num_query_groups"] = 5
    assert [str(e) for e in check_recipe(recipe)] == [
        "model.num_query_groups: must divide num_attention_heads (12)"
    ]

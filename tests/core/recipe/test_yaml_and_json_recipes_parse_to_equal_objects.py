"""The same recipe written as YAML or as JSON parses to equal objects; malformed text is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from controlplane.core.recipe import Recipe, RecipeInvalid, check_recipe, load_recipe
from tests.core.recipe.recipes import EXAMPLE, valid_recipe


def test_the_same_recipe_in_yaml_and_json_gives_equal_objects() -> None:
    data = valid_recipe()
    from_json = load_recipe(json.dumps(data))
    from_yaml = load_recipe(yaml.safe_dump(data, sort_keys=False))
    assert isinstance(from_json, Recipe)
    assert from_json == from_yaml
    assert from_json.model.query_groups == 4
    assert from_json.data.train is not None
    assert [e.weight for e in from_json.data.train] == [0.7, 0.3]


def test_a_parsed_recipe_dumps_back_to_an_equal_recipe() -> None:
    recipe = load_recipe(json.dumps(valid_recipe()))
    again = load_recipe(json.dumps(recipe.model_dump(mode="json")), "json")
    assert again == recipe


def test_yaml_exponents_without_a_dot_are_numbers() -> None:
    text = EXAMPLE.read_text()
    assert "eps: 1e-8" in text
    assert "lr: 3e-3" in text
    recipe = load_recipe(text)
    assert recipe.optimizer.eps == 1e-8
    assert recipe.schedule.lr == 3e-3


def test_duplicate_yaml_keys_are_refused() -> None:
    text = EXAMPLE.read_text().replace("seed: 1234", "seed: 1234\nseed: 99")
    errors = check_recipe(text)
    assert len(errors) == 1
    assert "duplicate key 'seed'" in errors[0].message
    assert "line" in errors[0].message


@pytest.mark.parametrize(
    ("text", "fmt", "message"),
    [
        ('{"version": 1,', None, "not valid JSON: line 1"),
        ("version: 1\nmodel: [unclosed", None, "not valid YAML"),
        ("- 1\n- 2\n", None, "must be a mapping (got list)"),
        ("", "yaml", "must be a mapping (got NoneType)"),
    ],
)
def test_malformed_text_is_refused_as_a_whole(text: str, fmt: str | None, message: str) -> None:
    with pytest.raises(RecipeInvalid) as refused:
        load_recipe(text, fmt)  # type: ignore[arg-type]
    [error] = refused.value.errors
    assert error.field == ""
    assert message in error.message

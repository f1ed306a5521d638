"""The shipped example recipe parses; recipes convert to the planning core's GPT spec."""

from __future__ import annotations

import json

from controlplane.core.planning import GPTSpec
from controlplane.core.recipe import load_recipe
from tests.core.recipe.recipes import EXAMPLE, valid_recipe


def test_the_example_recipe_trains_the_tiny_gpt() -> None:
    recipe = load_recipe(EXAMPLE.read_text())
    m = recipe.model
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length) == (2, 64, 4, 32)
    assert (recipe.global_batch_size, recipe.micro_batch_size) == (8, 2)
    assert recipe.data.has_validation_data
    assert recipe.checkpoint is not None
    assert recipe.checkpoint.format == "torch_dist"
    assert recipe.iterations == 500
    assert recipe.decay_iterations == 500


def test_the_example_recipe_with_default_options_gives_the_plain_spec() -> None:
    recipe = load_recipe(EXAMPLE.read_text())
    assert recipe.to_spec(2048) == GPTSpec(2, 64, 4, 32, 2048, 8, 2, num_query_groups=4)
    plain = GPTSpec(2, 64, 4, 32, 2048, 8, 2)
    assert recipe.to_spec(2048).flops_per_iteration() == plain.flops_per_iteration()
    assert recipe.to_spec(2048).parameter_count() == plain.parameter_count()


def test_model_options_reach_the_spec() -> None:
    recipe = load_recipe(json.dumps(valid_recipe()))
    spec = recipe.to_spec(50304)
    assert spec.num_query_groups == 4
    assert spec.gated_mlp
    assert spec.untie_embeddings
    assert not spec.learned_position_embeddings
    # SwiGLU's default width: 8/3 · 768 = 2048, already a multiple of 64.
    assert spec.ffn_size == 2048 == recipe.model.ffn_size
    assert spec.vocab_size == 50304


def test_a_token_budget_becomes_whole_iterations() -> None:
    data = valid_recipe()
    del data["train_iterations"]
    data["train_tokens"] = 64 * 1024 * 1000 + 1
    recipe = load_recipe(json.dumps(data))
    assert recipe.iterations == 1001
    train, valid = recipe.samples()
    assert train == 1001 * 64
    assert valid == (1001 // 100 + 1) * 10 * 64


def test_the_recipe_shown_in_the_data_docs_is_the_example_recipe() -> None:
    docs = (EXAMPLE.parents[3] / "docs" / "DATA.md").read_text()
    block = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert load_recipe(block) == load_recipe(EXAMPLE.read_text())

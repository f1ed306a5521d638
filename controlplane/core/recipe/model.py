"""The training recipe, version 1: model, data, optimizer, schedule, checkpoints, evaluation, batch.

Every section refuses unknown fields and wrong types (no silent coercion: ``"2"`` is not a number).
A check that involves two fields is attached to the field it judges (``model.num_query_groups``,
not ``model``), so every error names one field path. Cross-section checks live on :class:`Recipe`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from controlplane.core.planning.spec import GPTSpec

RECIPE_VERSION: Literal[1] = 1

_PROVIDER = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
_SPLIT = re.compile(r"^\s*(\d+(\.\d*)?)\s*,\s*(\d+(\.\d*)?)\s*,\s*(\d+(\.\d*)?)\s*$")

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Dropout = Annotated[float, Field(ge=0.0, lt=1.0)]
Beta = Annotated[float, Field(gt=0.0, lt=1.0)]


def refuse(field: str, message: str) -> PydanticCustomError:
    """An error about ``field`` (a dotted path relative to the model that raises it)."""
    return PydanticCustomError("recipe", "{field}: {message}", {"field": field, "message": message})


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _earlier(info: ValidationInfo, name: str) -> Any:
    """A field validated before this one, or None when it was missing or invalid."""
    return info.data.get(name)


def default_ffn_hidden_size(hidden_size: int, activation: str) -> int:
    """``4h``; for SwiGLU ``8h/3`` rounded down to a multiple of 64, as Megatron-LM does (``ceil(8h/3)``
    for ``h < 24``, where that multiple would be 0)."""
    if activation != "swiglu":
        return 4 * hidden_size
    return int(8 * hidden_size / 3 / 64) * 64 or math.ceil(8 * hidden_size / 3)


class ModelSection(_Section):
    """Megatron-Core GPT options."""

    num_layers: PositiveInt
    hidden_size: PositiveInt
    num_attention_heads: PositiveInt
    num_query_groups: PositiveInt | None = None
    """None: one group per head (multi-head attention)."""
    ffn_hidden_size: PositiveInt | None = None
    """None: ``4·hidden_size`` (``8/3·hidden_size`` rounded for SwiGLU, see
    :func:`default_ffn_hidden_size`)."""
    seq_length: PositiveInt
    vocab_size: PositiveInt | None = None
    """Vocabulary size (padded as the trainer pads it); None: the tokenizer's (``data.tokenizer``).
    Required without a data section, where the tokens are synthetic."""
    position_embedding: Literal["learned", "rope"] = "learned"
    normalization: Literal["LayerNorm", "RMSNorm"] = "LayerNorm"
    activation: Literal["gelu", "swiglu"] = "gelu"
    untie_embeddings: bool = False
    hidden_dropout: Dropout = 0.0
    attention_dropout: Dropout = 0.0
    provider: str | None = None
    """Import path ``package.module:function`` of a model provider; None: the built-in GPT."""

    @field_validator("num_attention_heads")
    @classmethod
    def _heads_divide_hidden(cls, heads: int, info: ValidationInfo) -> int:
        hidden = _earlier(info, "hidden_size")
        if hidden is not None and hidden % heads:
            raise ValueError(f"must divide hidden_size ({hidden})")
        return heads

    @field_validator("num_query_groups")
    @classmethod
    def _groups_divide_heads(cls, groups: int | None, info: ValidationInfo) -> int | None:
        heads = _earlier(info, "num_attention_heads")
        if groups is not None and heads is not None and heads % groups:
            raise ValueError(f"must divide num_attention_heads ({heads})")
        return groups

    @field_validator("position_embedding")
    @classmethod
    def _rope_needs_even_head_size(cls, kind: str, info: ValidationInfo) -> str:
        hidden, heads = _earlier(info, "hidden_size"), _earlier(info, "num_attention_heads")
        if kind == "rope" and hidden is not None and heads is not None and (hidden // heads) % 2:
            raise ValueError(
                f"rope needs an even head size (hidden_size / num_attention_heads = {hidden // heads})"
            )
        return kind

    @field_validator("provider")
    @classmethod
    def _provider_is_an_import_path(cls, provider: str | None) -> str | None:
        if provider is not None and not _PROVIDER.match(provider):
            raise ValueError(f"must be an import path 'package.module:function' (got {provider!r})")
        return provider

    @property
    def query_groups(self) -> int:
        return self.num_attention_heads if self.num_query_groups is None else self.num_query_groups

    @property
    def ffn_size(self) -> int:
        if self.ffn_hidden_size is not None:
            return self.ffn_hidden_size
        return default_ffn_hidden_size(self.hidden_size, self.activation)


class BlendEntry(_Section):
    """One indexed dataset (``PREFIX.bin`` + ``PREFIX.idx``) and its relative weight."""

    path_prefix: Annotated[str, Field(min_length=1)]
    weight: Annotated[float, Field(gt=0.0)] = 1.0

    @field_validator("path_prefix")
    @classmethod
    def _is_a_prefix(cls, prefix: str) -> str:
        if prefix.endswith((".bin", ".idx")):
            raise ValueError(f"must be the prefix without .bin/.idx (got {prefix!r})")
        return prefix


Blend = Annotated[list[BlendEntry], Field(min_length=1)]


def parse_split(split: str) -> tuple[float, float, float]:
    """``"98,2,0"`` → ``(98.0, 2.0, 0.0)``; ValueError when it is not three non-negative numbers."""
    m = _SPLIT.match(split)
    if not m:
        raise ValueError(f'must be three comma-separated non-negative numbers like "98,2,0" (got {split!r})')
    return float(m.group(1)), float(m.group(3)), float(m.group(5))


class DataSection(_Section):
    """Either ``train`` (+ optional ``valid``) blends, or one ``blend`` cut by ``split``."""

    tokenizer: Annotated[str, Field(min_length=1)]
    """Path of a ``tokenizer.json`` (Hugging Face tokenizers format); it gives the vocabulary size."""
    train: Blend | None = None
    valid: Blend | None = None
    blend: Blend | None = None
    split: str | None = None
    """Train, validation and test shares of ``blend``, e.g. ``"98,2,0"``."""

    @field_validator("split")
    @classmethod
    def _split_is_three_shares(cls, split: str | None) -> str | None:
        if split is not None:
            train, _, _ = parse_split(split)
            if train <= 0:
                raise ValueError(f"the train share must be > 0 (got {split!r})")
        return split

    @model_validator(mode="after")
    def _one_kind_of_data(self) -> DataSection:
        if self.blend is not None:
            if self.train is not None or self.valid is not None:
                field = "train" if self.train is not None else "valid"
                raise refuse(field, "give either train/valid blends or one blend with a split, not both")
            if self.split is None:
                raise refuse("split", 'required with blend (e.g. "98,2,0")')
        elif self.train is None:
            if self.valid is not None:
                raise refuse("train", "required with valid")
            raise refuse("train", "required: give train (and valid) blends, or one blend with a split")
        elif self.split is not None:
            raise refuse("split", "only used with blend (train/valid blends are already split)")
        return self

    @property
    def has_validation_data(self) -> bool:
        if self.blend is not None:
            return self.split is not None and parse_split(self.split)[1] > 0
        return self.valid is not None


class OptimizerSection(_Section):
    name: Literal["adam", "adamw"] = "adamw"
    beta1: Beta = 0.9
    beta2: Beta = 0.95
    eps: Annotated[float, Field(gt=0.0)] = 1e-8
    weight_decay: Annotated[float, Field(ge=0.0)] = 0.1
    clip_grad: Annotated[float, Field(gt=0.0)] = 1.0


class ScheduleSection(_Section):
    lr: Annotated[float, Field(gt=0.0)]
    min_lr: Annotated[float, Field(ge=0.0)] = 0.0
    warmup_iterations: NonNegativeInt = 0
    decay_style: Literal["constant", "linear", "cosine"] = "cosine"
    decay_iterations: PositiveInt | None = None
    """Iterations from the start to the end of the decay; None: the whole run."""

    @field_validator("min_lr")
    @classmethod
    def _min_lr_at_most_lr(cls, min_lr: float, info: ValidationInfo) -> float:
        lr = _earlier(info, "lr")
        if lr is not None and min_lr > lr:
            raise ValueError(f"must be <= lr ({lr})")
        return min_lr

    @field_validator("decay_iterations")
    @classmethod
    def _decay_after_warmup(cls, decay: int | None, info: ValidationInfo) -> int | None:
        warmup = _earlier(info, "warmup_iterations")
        if decay is not None and warmup is not None and decay <= warmup:
            raise ValueError(f"must be > warmup_iterations ({warmup})")
        return decay


class CheckpointSection(_Section):
    directory: Annotated[str, Field(min_length=1)]
    """Where checkpoints go; every node of the task must be able to read and write it."""
    interval: PositiveInt
    """Iterations between checkpoints."""
    keep: PositiveInt = 2
    """How many of the newest checkpoints to keep."""
    format: Literal["torch_dist"] = "torch_dist"


class EvalSection(_Section):
    interval: PositiveInt
    """Iterations between evaluations."""
    iterations: PositiveInt
    """Validation iterations (global batches) per evaluation."""


class Recipe(_Section):
    """One training run: what to train, on what, how, and how long."""

    version: Literal[1]
    model: ModelSection
    data: DataSection | None = None
    """None: synthetic tokens (the built-in arithmetic sequences), for drills and benchmarks."""
    optimizer: OptimizerSection = OptimizerSection()
    schedule: ScheduleSection
    checkpoint: CheckpointSection | None = None
    """None: the deployment's default (every ``UNICRON_CHECKPOINT_INTERVAL`` iterations under
    ``UNICRON_CHECKPOINT_ROOT/task-{id}``, all kept; interval 0: none)."""
    eval: EvalSection | None = None
    """None: no evaluation."""
    seed: NonNegativeInt = 1234
    global_batch_size: PositiveInt
    micro_batch_size: PositiveInt = 1
    train_iterations: PositiveInt | None = None
    train_tokens: PositiveInt | None = None
    """Instead of ``train_iterations``: iterations = ceil(tokens / (global_batch_size · seq_length))."""

    @field_validator("micro_batch_size")
    @classmethod
    def _micro_divides_global(cls, micro: int, info: ValidationInfo) -> int:
        global_batch = _earlier(info, "global_batch_size")
        if global_batch is not None and global_batch % micro:
            raise ValueError(f"must divide global_batch_size ({global_batch})")
        return micro

    @model_validator(mode="after")
    def _cross_section_checks(self) -> Recipe:
        if (self.train_iterations is None) == (self.train_tokens is None):
            field = "train_iterations" if self.train_tokens is None else "train_tokens"
            raise refuse(field, "give exactly one of train_iterations and train_tokens")
        iterations = self.iterations
        if self.schedule.warmup_iterations >= iterations:
            raise refuse("schedule.warmup_iterations", f"must be less than the run's {iterations} iterations")
        if self.data is None and self.model.vocab_size is None:
            raise refuse("model.vocab_size", "required without a data section (the tokens are synthetic)")
        if self.eval is not None and (self.data is None or not self.data.has_validation_data):
            raise refuse(
                "eval", "needs validation data: data.valid, or a non-zero validation share in data.split"
            )
        return self

    @property
    def iterations(self) -> int:
        """Training iterations (global batches) of the whole run."""
        if self.train_iterations is not None:
            return self.train_iterations
        assert self.train_tokens is not None
        return math.ceil(self.train_tokens / (self.global_batch_size * self.model.seq_length))

    @property
    def decay_iterations(self) -> int:
        return self.iterations if self.schedule.decay_iterations is None else self.schedule.decay_iterations

    def samples(self) -> tuple[int, int]:
        """Train and validation samples (sequences) the whole run reads."""
        train = self.iterations * self.global_batch_size
        if self.eval is None:
            return train, 0
        evaluations = self.iterations // self.eval.interval + 1
        return train, evaluations * self.eval.iterations * self.global_batch_size

    def to_spec(self, vocab_size: int | None = None) -> GPTSpec:
        """The planning core's view of this recipe, for FLOPs, parameters and memory.

        ``vocab_size`` comes from the tokenizer (pass the padded size when the trainer pads it);
        None: ``model.vocab_size`` (ValueError when that is not given either).
        """
        m = self.model
        if vocab_size is None:
            vocab_size = m.vocab_size
        if vocab_size is None:
            raise ValueError("model.vocab_size: required to size the model (or pass the tokenizer's)")
        return GPTSpec(
            num_layers=m.num_layers,
            hidden_size=m.hidden_size,
            num_attention_heads=m.num_attention_heads,
            seq_length=m.seq_length,
            vocab_size=vocab_size,
            global_batch_size=self.global_batch_size,
            micro_batch_size=self.micro_batch_size,
            num_query_groups=m.num_query_groups,
            ffn_hidden_size=None if m.ffn_hidden_size is None and m.activation == "gelu" else m.ffn_size,
            gated_mlp=m.activation == "swiglu",
            untie_embeddings=m.untie_embeddings,
            learned_position_embeddings=m.position_embedding == "learned",
        )


def recipe_for_spec(spec: GPTSpec, iterations: int) -> Recipe:
    """The recipe of a task given only as a model shape: synthetic tokens, Adam at a constant learning
    rate of 1e-3 (what the worker trains such a task with), ``iterations`` iterations."""
    return Recipe(
        version=RECIPE_VERSION,
        model=ModelSection(
            num_layers=spec.num_layers,
            hidden_size=spec.hidden_size,
            num_attention_heads=spec.num_attention_heads,
            num_query_groups=spec.num_query_groups,
            ffn_hidden_size=spec.ffn_hidden_size,
            seq_length=spec.seq_length,
            vocab_size=spec.vocab_size,
            position_embedding="learned" if spec.learned_position_embeddings else "rope",
            activation="swiglu" if spec.gated_mlp else "gelu",
            untie_embeddings=spec.untie_embeddings,
        ),
        optimizer=OptimizerSection(name="adam", beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01),
        schedule=ScheduleSection(lr=1e-3, min_lr=1e-3, decay_style="constant"),
        global_batch_size=spec.global_batch_size,
        micro_batch_size=spec.micro_batch_size,
        train_iterations=iterations,
    )

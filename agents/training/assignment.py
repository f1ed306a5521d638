"""What one worker process is told to do: its :class:`WorkerAssignment` (at launch or by an order)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from agents.training.elastic import TransitionSpec
from controlplane.core.planning.spec import GPTSpec
from controlplane.core.protocol import ModelSpec, StateSource, WorkerLaunch
from controlplane.core.recipe.model import ModelSection

ENV_WORKER = "UNICRON_WORKER"
"""The assignment's JSON in a launched worker's environment."""
ENV_ELASTIC_WAIT = "UNICRON_ELASTIC_WAIT_S"
"""Elastic mode: how long a worker waits for a transition order after a collective error (0: off)."""


class WorkerAssignment(BaseModel):
    """What one worker process is told to do (at launch, or by a transition order)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    epoch: int
    rank: int
    device: int
    launch: WorkerLaunch
    node: str = ""
    transition: TransitionSpec | None = None

    def own_state_source(self) -> StateSource | None:
        """The state source the coordinator named for this rank, if any."""
        for s in self.launch.state_sources:
            if s.rank == self.rank:
                return s
        return None


def gpt_spec(model: ModelSpec, architecture: ModelSection | None = None) -> GPTSpec:
    """The planner's :class:`GPTSpec` of a launched model (its FLOPs per iteration, for example), with
    the recipe's model options when the launch has them."""
    if architecture is not None:
        return GPTSpec(
            num_layers=model.layers,
            hidden_size=model.hidden,
            num_attention_heads=model.heads,
            seq_length=model.seq_len,
            vocab_size=model.vocab,
            global_batch_size=model.global_batch,
            micro_batch_size=model.micro_batch,
            num_query_groups=architecture.num_query_groups,
            ffn_hidden_size=architecture.ffn_size,
            gated_mlp=architecture.activation == "swiglu",
            untie_embeddings=architecture.untie_embeddings,
            learned_position_embeddings=architecture.position_embedding == "learned",
        )
    return GPTSpec(
        num_layers=model.layers,
        hidden_size=model.hidden,
        num_attention_heads=model.heads,
        seq_length=model.seq_len,
        vocab_size=model.vocab,
        global_batch_size=model.global_batch,
        micro_batch_size=model.micro_batch,
    )

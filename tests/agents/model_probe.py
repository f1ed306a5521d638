"""Build one rank's model the way the worker does, from a launch given as JSON, and train one step.

``python tests/agents/model_probe.py '<launch json>' PORT`` — a single rank (world size 1, gloo). It
prints one JSON line: the shapes of the built modules' weights, whether the output layer shares the
embedding's weight, whether a position table exists, the normalization class, and the loss of one
training step (forward, backward, gradient finalization, optimizer step).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(raw: str, port: int) -> dict[str, Any]:
    from megatron.core.distributed import finalize_model_grads

    from agents.training.assignment import WorkerAssignment
    from agents.training.cpu_compat import cpu_mode
    from agents.training.data import SyntheticSampler
    from agents.training.rank_model import RankModel, init_groups
    from controlplane.core.protocol import WorkerLaunch

    launch = WorkerLaunch.model_validate_json(raw)
    launch = launch.model_copy(
        update={"rendezvous": launch.rendezvous.model_copy(update={"master_port": port})}
    )
    assign = WorkerAssignment(task_id="probe", epoch=0, rank=0, device=0, launch=launch)
    with cpu_mode():
        init_groups(assign, on_gpu=False)
        state = RankModel(on_gpu=False)
        state.build(assign)
        state.wrap(launch.optimizer, launch.schedule, launch.iterations)
        model = state.model
        layer = model.decoder.layers[0]
        spec = launch.model
        mb = SyntheticSampler(
            launch.seed, spec.vocab, spec.seq_len, spec.micro_batch, spec.global_batch
        ).micro_batch(0, 0)
        state.zero_grads()
        out = state.ddp(mb.tokens, mb.position_ids, None, labels=mb.labels)
        loss = out.float().mean()
        loss.backward()
        finalize_model_grads([state.ddp])
        state.optimizer.step()
        return {
            "qkv": list(layer.self_attention.linear_qkv.weight.shape),
            "fc1": list(layer.mlp.linear_fc1.weight.shape),
            "fc2": list(layer.mlp.linear_fc2.weight.shape),
            "position_table": hasattr(model.embedding, "position_embeddings"),
            "rotary": getattr(model, "rotary_pos_emb", None) is not None,
            "norm": type(layer.input_layernorm).__name__,
            "final_norm": type(model.decoder.final_layernorm).__name__,
            "tied": model.share_embeddings_and_output_weights
            and model.shared_embedding_or_output_weight() is model.embedding.word_embeddings.weight,
            "output_weight": model.output_layer.weight is not None,
            "loss": float(loss),
        }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))), flush=True)

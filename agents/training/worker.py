"""A real Megatron-Core GPT training worker (one process per device, one compute thread).

Launched by the agent as ``python -m agents.training.worker`` with the environment:

- ``UNICRON_WORKER``: JSON of :class:`WorkerAssignment` (task, epoch, rank, device, WorkerLaunch);
- ``UNICRON_HOOK_SOCKET`` / ``UNICRON_STACK_FILE`` / ``UNICRON_RANK``: see :mod:`agents.training.hook`;
- ``UNICRON_TIMING_FILE`` (optional): append one JSON line per iteration with its duration
  (benchmarks compare runs with and without the hook from these).

TP/PP/DP come from the assignment. On a machine without CUDA the worker loads the CPU compatibility
layer and uses gloo; with CUDA it uses NCCL and loads nothing extra. The training loop is an ordinary
Megatron loop; the hook's lines are the only additions (marked ``# hook``).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.training.hook import reap_children
from controlplane.core.protocol import WorkerLaunch

ENV_WORKER = "UNICRON_WORKER"
ENV_TIMING_FILE = "UNICRON_TIMING_FILE"


class WorkerAssignment(BaseModel):
    """What one worker process is told to do."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    epoch: int
    rank: int
    device: int
    launch: WorkerLaunch


def model_flops_per_iteration(layers: int, hidden: int, seq: int, vocab: int, global_batch: int) -> float:
    """Narayanan et al. (SC'21), no activation recomputation: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))."""
    b, s, lyr, h, v = global_batch, seq, layers, hidden, vocab
    return 72.0 * b * s * lyr * h * h * (1 + s / (6 * h) + v / (12 * lyr * h))


def _latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    marker = root / "latest"
    if not marker.exists():
        return None
    it = int(marker.read_text().strip())
    return it, root / f"iter_{it:07d}"


def train(assign: WorkerAssignment) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    on_gpu = torch.cuda.is_available()
    from agents.training.hook import TrainingHook

    hook = TrainingHook.from_env()  # hook
    with hook.guard():  # hook
        if on_gpu:
            torch.cuda.set_device(assign.device)
            mode: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        else:
            from agents.training.cpu_compat import cpu_mode

            mode = cpu_mode()
        with mode:
            _train(assign, hook, on_gpu)
        hook.finished()  # hook


def _train(assign: WorkerAssignment, hook: Any, on_gpu: bool) -> None:
    import torch
    import torch.distributed as dist
    from megatron.core import dist_checkpointing, parallel_state
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
        finalize_model_grads,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer import TransformerConfig

    from agents.training.data import SyntheticSampler
    from agents.training.faults import WorkerFaults

    launch = assign.launch
    spec, par = launch.model, launch.parallel
    faults = WorkerFaults(hook)  # hook (fault injection for drills)
    timing_path = os.environ.get(ENV_TIMING_FILE)
    timing = open(timing_path, "a") if timing_path else None  # noqa: SIM115

    # -- process groups: every epoch has its own rendezvous port (never reuse a previous attempt's)
    rdzv = launch.rendezvous
    store = dist.TCPStore(  # type: ignore[attr-defined]
        rdzv.master_addr,
        rdzv.master_port,
        launch.world_size,
        is_master=assign.rank == 0,
        timeout=timedelta(seconds=rdzv.timeout_s),
    )
    dist.init_process_group(
        "nccl" if on_gpu else "gloo",
        store=store,
        rank=assign.rank,
        world_size=launch.world_size,
        timeout=timedelta(seconds=launch.collective_timeout_s),
    )
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=par.tp,
        pipeline_model_parallel_size=par.pp,
        distributed_timeout_minutes=launch.collective_timeout_s / 60.0,
    )
    model_parallel_cuda_manual_seed(launch.seed)
    torch.manual_seed(launch.seed)  # megatron DDP does not broadcast initial weights

    config = TransformerConfig(
        num_layers=spec.layers,
        hidden_size=spec.hidden,
        num_attention_heads=spec.heads,
        use_cpu_initialization=True,
        tensor_model_parallel_size=par.tp,
        pipeline_model_parallel_size=par.pp,
        pipeline_dtype=torch.float32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        params_dtype=torch.float32,
    )
    pre = parallel_state.is_pipeline_first_stage()
    post = parallel_state.is_pipeline_last_stage()
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=spec.vocab,
        max_sequence_length=spec.seq_len,
        pre_process=pre,
        post_process=post,
        share_embeddings_and_output_weights=False,
    )
    if on_gpu:
        model.cuda()
    ddp = DistributedDataParallel(
        config=config,
        ddp_config=DistributedDataParallelConfig(overlap_grad_reduce=False, use_distributed_optimizer=False),
        module=model,
    )
    optimizer = get_megatron_optimizer(
        OptimizerConfig(optimizer="adam", lr=1e-3, clip_grad=1.0, params_dtype=torch.float32), [ddp]
    )

    dp_rank = parallel_state.get_data_parallel_rank()
    dp_size = parallel_state.get_data_parallel_world_size()
    sampler = SyntheticSampler(launch.seed, spec.vocab, spec.seq_len, spec.micro_batch, spec.global_batch)
    indices = sampler.indices_for(dp_rank, dp_size)
    flops_share = (
        model_flops_per_iteration(spec.layers, spec.hidden, spec.seq_len, spec.vocab, spec.global_batch)
        / launch.world_size
    )
    tokens_share = spec.global_batch * spec.seq_len // launch.world_size

    ckpt_root = Path(launch.checkpoint_dir) if launch.checkpoint_dir else None

    def sharded_state() -> dict[str, Any]:
        model_sd = model.sharded_state_dict()
        return {"model": model_sd, "optimizer": optimizer.sharded_state_dict(model_sd)}

    start = 0
    if ckpt_root is not None and (found := _latest_checkpoint(ckpt_root)) is not None:
        with hook.slow_phase("checkpoint"):  # hook
            it_done, path = found
            state = dist_checkpointing.load(sharded_state(), str(path))
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            start = it_done + 1

    forward_backward = get_forward_backward_func()
    device = torch.device("cuda", assign.device) if on_gpu else torch.device("cpu")

    prev_t: float | None = None
    for it in range(start, launch.iterations):
        first = it == start
        now = time.perf_counter()
        if timing is not None and prev_t is not None:
            # Wall time from one iteration start to the next: includes the hook's own cost.
            timing.write(json.dumps({"it": it - 1, "dur": now - prev_t, "first": it - 1 == start}) + "\n")
        prev_t = now
        with hook.iteration(it, phase="first" if first else "train"):  # hook
            faults.on_iteration_start(it)  # hook (fault injection)
            batches = iter(sampler.for_replica(it, dp_rank, dp_size))
            mb_ids = iter(indices)
            done_losses: list[float] = []

            def forward_step(
                data_iterator: Any,
                mdl: Any,
                it: int = it,
                mb_ids: Any = mb_ids,
                done_losses: list[float] = done_losses,
            ) -> tuple[Any, Any]:
                mb = next(data_iterator)
                index = next(mb_ids)
                tstart = time.perf_counter()
                out = mdl(
                    mb.tokens.to(device),
                    mb.position_ids.to(device),
                    None,
                    labels=mb.labels.to(device),
                )

                def finish(
                    output: Any, index: int = index, tstart: float = tstart
                ) -> tuple[Any, dict[str, Any]]:
                    loss = output.float().mean()
                    done_losses.append(float(loss.detach()))
                    faults.stretch(time.perf_counter() - tstart)  # hook (straggler drill)
                    hook.micro_batch_done(it, index)  # hook
                    return loss, {"lm loss": loss.detach()}

                return out, finish

            ddp.zero_grad_buffer()
            optimizer.zero_grad()
            forward_backward(
                forward_step_func=forward_step,
                data_iterator=batches,
                model=[ddp],
                num_microbatches=len(indices),
                seq_length=spec.seq_len,
                micro_batch_size=spec.micro_batch,
                forward_only=False,
            )
            hook.compute_done()  # hook
            finalize_model_grads([ddp])
            optimizer.step()
            loss = sum(done_losses) / len(done_losses) if done_losses else None
            hook.set_progress(tokens=tokens_share, model_flops=flops_share, loss=loss)  # hook
        if (
            ckpt_root is not None
            and launch.checkpoint_interval
            and (it + 1) % launch.checkpoint_interval == 0
        ):
            with hook.slow_phase("checkpoint"):  # hook
                path = ckpt_root / f"iter_{it:07d}"
                if assign.rank == 0:
                    path.mkdir(parents=True, exist_ok=True)
                dist.barrier()
                dist_checkpointing.save(sharded_state(), str(path))
                dist.barrier()
                if assign.rank == 0:
                    tmp = ckpt_root / "latest.tmp"
                    tmp.write_text(str(it))
                    tmp.replace(ckpt_root / "latest")
    if timing is not None:
        timing.close()


def main() -> None:
    raw = os.environ.get(ENV_WORKER)
    if not raw:
        print(f"{ENV_WORKER} is not set: the worker is started by the agent", file=sys.stderr)
        os._exit(2)
    assign = WorkerAssignment.model_validate_json(raw)
    train(assign)
    sys.stdout.flush()
    sys.stderr.flush()
    reap_children()
    # Leave without running gloo/megatron destructors (they may abort after a peer's failure).
    os._exit(0)


if __name__ == "__main__":
    main()

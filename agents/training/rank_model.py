"""One rank's model, DDP wrapper, optimizer and gradient buffer, and its epoch's process groups.

An epoch builds them (:meth:`RankModel.build`, :meth:`RankModel.wrap`) over freshly initialised
groups (:func:`init_groups`); a transition tears them down (:meth:`RankModel.teardown`) keeping the
live tensors, which the next epoch puts back into the rebuilt objects when the layout is the same
(:meth:`RankModel.adopt_kept`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agents.training.assignment import WorkerAssignment
from agents.training.elastic import torch_optimizers
from controlplane.core.recipe.model import ModelSection, OptimizerSection, ScheduleSection


def architecture_options(arch: ModelSection | None) -> dict[str, Any]:
    """The ``TransformerConfig`` options of the recipe's model section beyond the shape (query groups,
    MLP width and activation, normalization, dropout); None: multi-head attention, GELU, a ``4h``
    MLP, LayerNorm and no dropout."""
    if arch is None:
        return {"hidden_dropout": 0.0, "attention_dropout": 0.0}
    options: dict[str, Any] = {
        "num_query_groups": arch.query_groups,
        "ffn_hidden_size": arch.ffn_size,
        "normalization": arch.normalization,
        "hidden_dropout": arch.hidden_dropout,
        "attention_dropout": arch.attention_dropout,
    }
    if arch.activation == "swiglu":
        from torch.nn.functional import silu

        options |= {"gated_linear_unit": True, "activation_func": silu, "bias_activation_fusion": False}
    return options


def init_groups(assign: WorkerAssignment, on_gpu: bool) -> None:
    """The epoch's world group and Megatron's groups, rendezvoused at the epoch's own port."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    launch = assign.launch
    rdzv = launch.rendezvous
    # Every epoch has its own rendezvous port (never reuse a previous attempt's addresses).
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
        tensor_model_parallel_size=launch.parallel.tp,
        pipeline_model_parallel_size=launch.parallel.pp,
        distributed_timeout_minutes=launch.collective_timeout_s / 60.0,
    )


def destroy_groups() -> None:
    """Destroy Megatron's groups and the world group (the objects holding them must be gone)."""
    import torch.distributed as dist
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    _forget_groups(parallel_state)
    if dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _forget_groups(module: Any) -> None:
    """Set every module global holding process groups to None.

    ``destroy_model_parallel`` (megatron-core 0.16) leaves a few behind, e.g.
    ``_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP``, which keeps the data-parallel sockets open.
    """
    from torch._C._distributed_c10d import ProcessGroup

    for name, value in list(vars(module).items()):
        if isinstance(value, ProcessGroup) or (
            isinstance(value, list | tuple) and value and all(isinstance(v, ProcessGroup) for v in value)
        ):
            setattr(module, name, None)


@dataclass
class KeptState:
    """The live state between an epoch's teardown and the next epoch (tensors only, no groups)."""

    layout: tuple[int, int] | None
    params: dict[str, Any]
    grads: dict[str, Any]
    optimizer: list[Any] | None
    partial_it: int | None
    done: list[int]


@dataclass
class RankModel:
    """The rank's training state: model, DDP, optimizer and the partial results of an iteration."""

    on_gpu: bool
    model: Any = None
    ddp: Any = None
    optimizer: Any = None
    scheduler: Any = None
    config: Any = None
    layout: tuple[int, int] | None = None
    """``(tp, pp)`` of the model's shards."""
    partial_it: int | None = None
    """The iteration whose micro-batches ``done`` hold gradients in the buffer (not yet reduced)."""
    done: list[int] = field(default_factory=list)
    kept: KeptState | None = None

    # ------------------------------------------------------------------ building
    def build(self, assign: WorkerAssignment) -> None:
        """A fresh model for the assignment's layout from the recipe's model provider (the built-in GPT
        unless ``model.provider`` names another, :mod:`agents.training.provider`), seeded: every rank
        starts identical."""
        import torch
        from megatron.core import parallel_state
        from megatron.core.tensor_parallel import get_cuda_rng_tracker, model_parallel_cuda_manual_seed
        from megatron.core.transformer import TransformerConfig

        from agents.training.provider import ProviderContext, build_model

        launch = assign.launch
        spec, par = launch.model, launch.parallel
        get_cuda_rng_tracker().reset()
        model_parallel_cuda_manual_seed(launch.seed)
        torch.manual_seed(launch.seed)  # megatron DDP does not broadcast initial weights
        arch = launch.architecture
        self.config = TransformerConfig(
            num_layers=spec.layers,
            hidden_size=spec.hidden,
            num_attention_heads=spec.heads,
            use_cpu_initialization=True,
            tensor_model_parallel_size=par.tp,
            pipeline_model_parallel_size=par.pp,
            pipeline_dtype=torch.float32,
            params_dtype=torch.float32,
            # Gradients are sums over tokens; the worker divides by the global batch's tokens after
            # the all-reduce, so the split of the batch among replicas does not change the update.
            calculate_per_token_loss=True,
            **architecture_options(arch),
        )
        self.model = build_model(
            arch.provider if arch is not None else None,
            ProviderContext(
                section=arch,
                config=self.config,
                pre_process=parallel_state.is_pipeline_first_stage(),
                post_process=parallel_state.is_pipeline_last_stage(),
                vocab_size=spec.vocab,
                seq_length=spec.seq_len,
            ),
        )
        if self.on_gpu:
            self.model.cuda()
        self.ddp = None
        self.optimizer = None
        self.layout = (par.tp, par.pp)

    def wrap(
        self,
        optimizer: OptimizerSection | None = None,
        schedule: ScheduleSection | None = None,
        iterations: int = 0,
    ) -> None:
        """Build DDP, the optimizer (the recipe's, or Adam at 1e-3 clipped at 1.0) and the learning-rate
        schedule (megatron-core's ``OptimizerParamScheduler``, over ``iterations`` unless the schedule
        names its decay length) around the model for the current process groups."""
        import torch
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        self.ddp = DistributedDataParallel(
            config=self.config,
            ddp_config=DistributedDataParallelConfig(
                overlap_grad_reduce=False, use_distributed_optimizer=False
            ),
            module=self.model,
        )
        lr = schedule.lr if schedule is not None else 1e-3
        min_lr = schedule.min_lr if schedule is not None else lr
        if optimizer is None:
            config = OptimizerConfig(
                optimizer="adam", lr=lr, min_lr=min_lr, clip_grad=1.0, params_dtype=torch.float32
            )
        else:  # megatron-core's Adam decays weights decoupled (AdamW) for "adam" and "adamw" alike
            config = OptimizerConfig(
                optimizer="adam",
                lr=lr,
                min_lr=min_lr,
                weight_decay=optimizer.weight_decay,
                adam_beta1=optimizer.beta1,
                adam_beta2=optimizer.beta2,
                adam_eps=optimizer.eps,
                clip_grad=optimizer.clip_grad,
                params_dtype=torch.float32,
            )
        self.optimizer = get_megatron_optimizer(config, [self.ddp])
        self.scheduler = None
        if schedule is not None:
            decay = schedule.decay_iterations or max(iterations, schedule.warmup_iterations + 1)
            self.scheduler = OptimizerParamScheduler(
                self.optimizer,
                init_lr=0.0 if schedule.warmup_iterations else schedule.lr,
                max_lr=schedule.lr,
                min_lr=schedule.min_lr,
                lr_warmup_steps=schedule.warmup_iterations,
                lr_decay_steps=max(decay, schedule.warmup_iterations + 1),
                lr_decay_style=schedule.decay_style,
                start_wd=config.weight_decay,
                end_wd=config.weight_decay,
                wd_incr_steps=1,
                wd_incr_style="constant",
            )

    def set_iteration(self, iteration: int) -> float:
        """Set the learning rate of ``iteration`` (a function of the iteration alone, so every rank and
        every epoch agrees whatever transitions happened); returns it."""
        if self.scheduler is not None:
            self.scheduler.num_steps = iteration
            self.scheduler.step(0)
        return float(self.optimizer.param_groups[0]["lr"])

    def adopt_kept(self) -> bool:
        """Put the state kept at teardown into the freshly built model, DDP and optimizer.

        Only for the same layout (same shards): parameters are re-attached (their tensors, no
        copy), the gradient buffer gets the kept sums, the optimizer its state. Returns whether it did.
        """
        import torch

        kept, self.kept = self.kept, None
        if kept is None or kept.layout != self.layout:
            self.partial_it, self.done = None, []
            return False
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.data = kept.params[n]
            for n, p in self.model.named_parameters():
                if n in kept.grads and hasattr(p, "main_grad"):
                    p.main_grad.copy_(kept.grads[n])
        if kept.optimizer is not None:
            for opt, sd in zip(torch_optimizers(self.optimizer), kept.optimizer, strict=True):
                opt.load_state_dict(sd)
        self.partial_it, self.done = kept.partial_it, kept.done
        return True

    # ------------------------------------------------------------------ teardown
    def teardown(self, collect: bool = False) -> None:
        """Keep the live state as plain tensors and drop every object that holds the epoch's groups.

        gloo closes a group's sockets only when the last reference to it goes away (an ``abort()``
        or ``destroy_process_group`` alone leaves them open: a live peer blocked in a collective
        with us would wait for the timeout). Megatron's DDP (its buckets), the optimizer and the
        model's modules (TP/PP groups) all hold groups, so they are dropped here and rebuilt in the
        next epoch around the same parameter tensors (no copy). ``collect``: a full garbage
        collection afterwards (reference counting frees the groups — measured: peers fail within
        ~0.1 s at DP2 and TP2 without it; a collection costs ~0.3 s here).
        """
        import gc

        dropped = self.model is not None
        if self.model is not None:
            self.kept = KeptState(
                layout=self.layout,
                params={n: p.data for n, p in self.model.named_parameters()},
                grads={n: p.main_grad for n, p in self.model.named_parameters() if hasattr(p, "main_grad")},
                optimizer=[o.state_dict() for o in torch_optimizers(self.optimizer)]
                if self.optimizer is not None
                else None,
                partial_it=self.partial_it,
                done=list(self.done),
            )
        if self.ddp is not None:
            # Its backward hooks stay registered on the parameters' grad accumulators: make them
            # no-ops and cut everything else they could keep alive.
            self.ddp.__dict__.clear()
            self.ddp.__dict__["param_to_bucket_group"] = {}
        self.model = self.ddp = self.optimizer = self.scheduler = self.config = None
        destroy_groups()
        if dropped and collect:
            gc.collect()

    # ------------------------------------------------------------------ gradients and state
    def stash_grads(self) -> dict[Any, Any]:
        return {p: p.main_grad.clone() for p in self.model.parameters() if hasattr(p, "main_grad")}

    def restore_grads(self, stash: dict[Any, Any] | None) -> None:
        import torch

        if stash is None:
            self.partial_it, self.done = None, []
            return
        with torch.no_grad():
            for p, g in stash.items():
                p.main_grad.copy_(g)

    def add_grads(self, stash: dict[Any, Any]) -> None:
        import torch

        with torch.no_grad():
            for p, g in stash.items():
                p.main_grad.add_(g)

    def zero_grads(self) -> None:
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        self.partial_it, self.done = None, []

    def sharded_state(self, is_loading: bool = False) -> dict[str, Any]:
        """The ``dist_checkpointing`` state of the model and optimizer (checkpoints, snapshots).

        ``is_loading``: for a load, the optimizer first gives every parameter without state a zero
        placeholder (Megatron's ``init_state_fn``), so a fresh rank, whose Adam has no state yet, offers
        the same sharded keys as a survivor that has trained: otherwise a restart that loads a
        checkpoint into both fails ``validate_sharding_integrity`` (a tensor no rank or one stage only
        accesses)."""
        model_sd = self.model.sharded_state_dict()
        optimizer_sd = self.optimizer.sharded_state_dict(model_sd, is_loading=is_loading)
        return {"model": model_sd, "optimizer": optimizer_sd}

    def state_bytes(self) -> int:
        """Bytes of parameters and optimizer state held by this rank."""
        n = sum(p.numel() * p.element_size() for p in self.model.parameters())
        for opt in torch_optimizers(self.optimizer):
            for st in opt.state.values():
                n += sum(t.numel() * t.element_size() for t in st.values() if hasattr(t, "numel"))
        return int(n)

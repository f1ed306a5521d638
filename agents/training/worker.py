"""A real Megatron-Core GPT training worker (one process per device, one compute thread).

Launched by the agent as ``python -m agents.training.worker`` — or handed to a warm spare process
that has already imported torch and Megatron-Core (:mod:`agents.training.spare`, which then calls
:func:`run_assignment` on its hook connection) — with the environment:

- ``UNICRON_WORKER``: JSON of :class:`WorkerAssignment` (task, epoch, rank, device, WorkerLaunch, and
  for a rank started by a transition the :class:`~agents.training.elastic.TransitionSpec`);
- ``UNICRON_HOOK_SOCKET`` / ``UNICRON_STACK_FILE`` / ``UNICRON_RANK``: see :mod:`agents.training.hook`;
- ``UNICRON_ELASTIC_WAIT_S`` (optional, default 0 = off): elastic mode. After a collective error the
  worker reports it and waits up to this long for a transition order instead of exiting;
- ``UNICRON_TIMING_FILE`` (optional): append one JSON line per iteration with its duration
  (benchmarks compare runs with and without the hook from these);
- ``UNICRON_STATE_DUMP`` (optional): a directory; after every completed iteration the rank writes its
  parameters and optimizer tensors there (``e{epoch}-it{iteration}-r{rank}.pt``), and after a
  transition's state migration ``e{epoch}-migrated-r{rank}.pt``, so tests can compare states;
  ``UNICRON_STATE_DUMP_FIRST=n`` limits the iteration dumps to the first n iterations of each epoch.
- ``UNICRON_CPU_BIND`` (optional, CPU only): ``task`` binds the worker to one core by its task
  (see :mod:`agents.training.cpu_bind`).

TP/PP/DP come from the assignment. On a machine without CUDA the worker loads the CPU compatibility
layer and uses gloo; with CUDA it uses NCCL and loads nothing extra. The training loop is an ordinary
Megatron loop; the hook's lines are the only additions (marked ``# hook``).

Transitions without restart (docs/ARCHITECTURE.md §7.6, :mod:`agents.training.elastic`)
-----------------------------------------------------------------------
The process outlives its epoch. An order arrives on the hook socket (at an iteration boundary, or
while the worker waits after a failed collective); the worker then

1. *teardown*: keeps references to its gradient buffer and optimizer state, destroys Megatron's
   parallel state and the process groups (``destroy_model_parallel``, ``destroy_process_group``);
2. *rendezvous*: a fresh ``TCPStore`` at the epoch's own port (never a previous attempt's address)
   and bounded timeouts for the world group and Megatron's groups;
3. rebuilds DDP and the optimizer around the **same** model (same layout) and puts the gradients and
   optimizer state back; a layout (TP/PP) change builds a new model instead and the state comes from a
   stored copy, which ``dist_checkpointing`` reshards;
4. *migrate*: one ``all_gather_object`` of every rank's :class:`~agents.training.elastic.RankState`,
   the same :func:`~agents.training.elastic.plan_resume` everywhere, then per data-parallel group a
   broadcast of parameters + optimizer state from an up-to-date holder to the ranks that need it;
5. *recompute*: the interrupted iteration's micro-batches that no surviving replica finished are
   given out among the replicas and computed on top of the kept gradients; then the normal
   all-reduce over the new group, scaling by ``1/tokens of the global batch`` and the update.

The first completed iteration of the epoch sends a ``TransitionReport`` (source, bytes moved, time
per phase, micro-batches reused / recomputed, iterations rolled back).

Gradients are per-token sums (``calculate_per_token_loss``) scaled by ``1/tokens of the global batch``
after the all-reduce, so Megatron's ``1/num_microbatches`` loss scaling and DDP's ``1/dp`` gradient
scaling are both off: the update does not depend on how the fixed global batch is split, which is
what makes kept + redistributed micro-batches exact. When the resumed iteration adds redistributed
micro-batches to kept ones, the new ones are summed on their own and the kept sum added last (what a
two-replica all-reduce does), so DP2 -> DP1 is bitwise the failure-free step.

Costs and limits: elastic mode copies the local gradient sums before every all-reduce (gloo reduces
in place; a peer dying mid-ring leaves partial sums): one gradient-sized memcpy per iteration. With
PP > 1 partial results are never kept (a micro-batch's backward spans stages): the interrupted
iteration is recomputed whole. A failure inside the optimizer step after the all-reduce (possible
with TP/PP > 1, whose clipping communicates) loses that iteration's micro-batches. Megatron's CUDA RNG
tracker is re-seeded when the model is rebuilt (no effect without dropout).

Hung peers. gloo has no failure detector of its own: a peer that died resets its sockets and the
survivors' collective raises within ~20 ms, but a peer that is *alive and stuck* keeps them blocked
until the collective timeout. The agent's statistical monitor is what unblocks them: it tells apart
the rank that never finished its micro-batches (the culprit: no ``sync`` event in the iteration) from
ranks that finished and wait in the gradient all-reduce (victims), captures the culprit's stack and
SIGKILLs it; the victims' collective then fails fast with a connection reset and they wait for the
transition order with their state intact. Cost: the hang threshold, max(3 x median iteration time,
floor) (4.5 s by default), plus the stack capture (≤ 0.3 s) plus ~20 ms for gloo to fail; a victim
that is still stuck after a second threshold (no culprit found: e.g. every rank is inside the
collective) is killed too, so the bound is two thresholds, not the collective timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.training.cpu_bind import bind_task
from agents.training.elastic import (
    STORED_KINDS,
    RankState,
    TransitionSpec,
    broadcast_state,
    plan_resume,
    split_micro_batches,
    state_digest,
)
from agents.training.hook import reap_children
from controlplane.core.protocol import StateSource, WorkerLaunch

ENV_WORKER = "UNICRON_WORKER"
ENV_TIMING_FILE = "UNICRON_TIMING_FILE"
ENV_ELASTIC_WAIT = "UNICRON_ELASTIC_WAIT_S"
ENV_STATE_DUMP = "UNICRON_STATE_DUMP"
ENV_STATE_DUMP_FIRST = "UNICRON_STATE_DUMP_FIRST"
ENV_TEARDOWN_GC = "UNICRON_TEARDOWN_GC"

NETWORK_MARKERS = (
    "Connection reset",
    "Connection closed",
    "Connection refused",
    "Broken pipe",
    "Timed out",
    "timed out",
    "gloo",
    "NCCL",
    "connectFullMesh",
)
"""Words of the errors a collective raises when a peer dies or a link drops."""


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


class _OrderReceived(Exception):
    """A transition order arrived at an iteration boundary."""

    def __init__(self, order: dict[str, Any]) -> None:
        super().__init__("transition order")
        self.order = order


def train(assign: WorkerAssignment, sock: socket.socket | None = None, buffered: bytes = b"") -> None:
    """Run one rank. ``sock``: an already connected hook socket (a warm spare's, see
    :mod:`agents.training.spare`) with ``buffered`` bytes already read from it; None: connect."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    on_gpu = torch.cuda.is_available()
    from agents.training.hook import TrainingHook

    hook = TrainingHook.from_env(sock, buffered)  # hook
    hook.epoch = assign.epoch  # hook
    with hook.guard():  # hook
        if on_gpu:
            torch.cuda.set_device(assign.device)
            mode: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        else:
            from agents.training.cpu_compat import cpu_mode

            mode = cpu_mode()
        with mode:
            Trainer(assign, hook, on_gpu).run()
        hook.finished()  # hook


class Trainer:
    """Model, optimizer and data position of one rank; process groups of its current epoch."""

    def __init__(self, assign: WorkerAssignment, hook: Any, on_gpu: bool) -> None:
        import torch

        from agents.training.faults import WorkerFaults

        self.assign = assign
        self.hook = hook
        self.on_gpu = on_gpu
        self.device = torch.device("cuda", assign.device) if on_gpu else torch.device("cpu")
        self.elastic_wait_s = float(os.environ.get(ENV_ELASTIC_WAIT, "0") or 0)
        self.faults = WorkerFaults(hook)  # hook (fault injection for drills)
        timing_path = os.environ.get(ENV_TIMING_FILE)
        self.timing = open(timing_path, "a") if timing_path else None  # noqa: SIM115
        dump = os.environ.get(ENV_STATE_DUMP)
        self.dump_dir = Path(dump) if dump else None
        self.dump_first = int(os.environ.get(ENV_STATE_DUMP_FIRST, "0") or 0)
        self.model: Any = None
        self.ddp: Any = None
        self.optimizer: Any = None
        self.layout: tuple[int, int] | None = None
        self.config: Any = None
        self.next_it = 0
        self.partial_it: int | None = None
        self.done: list[int] = []
        self.groups_ok = False
        # the current epoch
        self.epoch_start = 0
        self.resume_extra: tuple[int, ...] | None = None
        self.pending_report: dict[str, Any] | None = None
        self.recompute_s = 0.0
        self.snap: Any = None  # agents.training.snapshot.SnapshotWriter of the current epoch
        self.kept: dict[str, Any] | None = None
        """The live state between teardown and the next epoch (tensors only, no groups)."""

    # ------------------------------------------------------------------ epochs
    def run(self) -> None:
        self._enter_epoch(self.assign, survivor=False)
        while True:
            try:
                self._train_epoch()
                break
            except _OrderReceived as got:
                order = got.order
            except Exception as exc:
                order = self._after_failure(exc)
            self._follow(order)
        if self.timing is not None:
            self.timing.close()
        if self.snap is not None:
            self.snap.close()

    def _follow(self, order: dict[str, Any]) -> None:
        """Enter the epoch an order names; a failure on the way waits for the next order."""
        while True:
            try:
                new = WorkerAssignment.model_validate(order["assignment"])
                self._enter_epoch(new, survivor=True)
                return
            except Exception as exc:
                order = self._after_failure(exc)

    def _after_failure(self, exc: BaseException) -> dict[str, Any]:
        """Elastic mode: report a collective error, keep the state, wait for the agent's order."""
        if self.elastic_wait_s <= 0 or not self._recoverable(exc):
            raise exc
        self.hook.report_exception(exc, waiting=True)  # hook
        traceback.print_exception(exc, file=sys.stderr)
        sys.stderr.flush()
        traceback.clear_frames(exc.__traceback__)  # the frames hold the failed collective's groups
        self.hook.in_collective = False
        # Close this rank's communicators now: peers blocked in a collective with it (it is alive,
        # so its sockets would stay open) fail within milliseconds instead of at the timeout.
        with contextlib.suppress(Exception):
            self._teardown()
        order = self.hook.wait_order(self.elastic_wait_s)  # hook
        if order is None:
            raise exc
        return order

    def _recoverable(self, exc: BaseException) -> bool:
        from agents.training.faults import InjectedFault

        if isinstance(exc, InjectedFault) or not isinstance(exc, RuntimeError | TimeoutError):
            return False
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return (
            self.hook.in_collective
            or "distributed_c10d.py" in tb
            or any(m in str(exc) for m in NETWORK_MARKERS)
        )

    def _teardown(self) -> None:
        """Keep the live state as plain tensors and drop every object that holds the epoch's groups.

        gloo closes a group's sockets only when the last reference to it goes away (an ``abort()``
        or ``destroy_process_group`` alone leaves them open: a live peer blocked in a collective
        with us would wait for the timeout). Megatron's DDP (its buckets), the optimizer and the
        model's modules (TP/PP groups) all hold groups, so they are dropped here and rebuilt in the
        next epoch around the same parameter tensors (no copy).
        """
        import gc

        import torch.distributed as dist
        from megatron.core import parallel_state

        from agents.training.elastic import torch_optimizers

        dropped = self.model is not None
        if self.model is not None:
            self.kept = {
                "layout": self.layout,
                "params": {n: p.data for n, p in self.model.named_parameters()},
                "grads": {
                    n: p.main_grad for n, p in self.model.named_parameters() if hasattr(p, "main_grad")
                },
                "optimizer": [o.state_dict() for o in torch_optimizers(self.optimizer)]
                if self.optimizer is not None
                else None,
                "partial_it": self.partial_it,
                "done": list(self.done),
            }
        if self.ddp is not None:
            # Its backward hooks stay registered on the parameters' grad accumulators: make them
            # no-ops and cut everything else they could keep alive.
            self.ddp.__dict__.clear()
            self.ddp.__dict__["param_to_bucket_group"] = {}
        self.model = self.ddp = self.optimizer = self.config = None
        parallel_state.destroy_model_parallel()
        _forget_groups(parallel_state)
        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        if dropped and os.environ.get(ENV_TEARDOWN_GC) == "1":
            # Reference counting frees the groups (measured: peers fail within ~0.1 s at DP2 and
            # TP2 without it); a full collection costs ~0.3 s here, so it is opt-in.
            gc.collect()
        self.groups_ok = False

    def _init_groups(self, assign: WorkerAssignment) -> None:
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
            "nccl" if self.on_gpu else "gloo",
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
        self.groups_ok = True

    def _build_model(self, assign: WorkerAssignment) -> None:
        import torch
        from megatron.core import parallel_state
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.tensor_parallel import get_cuda_rng_tracker, model_parallel_cuda_manual_seed
        from megatron.core.transformer import TransformerConfig

        launch = assign.launch
        spec, par = launch.model, launch.parallel
        get_cuda_rng_tracker().reset()
        model_parallel_cuda_manual_seed(launch.seed)
        torch.manual_seed(launch.seed)  # megatron DDP does not broadcast initial weights
        self.config = TransformerConfig(
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
            # Gradients are sums over tokens; the worker divides by the global batch's tokens after
            # the all-reduce, so the split of the batch among replicas does not change the update.
            calculate_per_token_loss=True,
        )
        self.model = GPTModel(
            config=self.config,
            transformer_layer_spec=get_gpt_layer_local_spec(),
            vocab_size=spec.vocab,
            max_sequence_length=spec.seq_len,
            pre_process=parallel_state.is_pipeline_first_stage(),
            post_process=parallel_state.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=False,
        )
        if self.on_gpu:
            self.model.cuda()
        self.ddp = None
        self.optimizer = None
        self.layout = (par.tp, par.pp)

    def _wrap(self) -> None:
        """Build DDP and the optimizer around the model for the current process groups."""
        import torch
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        self.ddp = DistributedDataParallel(
            config=self.config,
            ddp_config=DistributedDataParallelConfig(
                overlap_grad_reduce=False, use_distributed_optimizer=False
            ),
            module=self.model,
        )
        self.optimizer = get_megatron_optimizer(
            OptimizerConfig(optimizer="adam", lr=1e-3, clip_grad=1.0, params_dtype=torch.float32), [self.ddp]
        )

    def _adopt_kept(self) -> bool:
        """Put the state kept at teardown into the freshly built model, DDP and optimizer.

        Only for the same layout (same shards): parameters are re-attached (their tensors, no
        copy), the gradient buffer gets the kept sums, the optimizer its state. Returns whether it did.
        """
        import torch

        from agents.training.elastic import torch_optimizers

        kept, self.kept = self.kept, None
        if kept is None or kept["layout"] != self.layout:
            self.partial_it, self.done = None, []
            return False
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                p.data = kept["params"][n]
            for n, p in self.model.named_parameters():
                if n in kept["grads"] and hasattr(p, "main_grad"):
                    p.main_grad.copy_(kept["grads"][n])
        if kept["optimizer"] is not None:
            for opt, sd in zip(torch_optimizers(self.optimizer), kept["optimizer"], strict=True):
                opt.load_state_dict(sd)
        self.partial_it, self.done = kept["partial_it"], kept["done"]
        return True

    def _sharded_state(self) -> dict[str, Any]:
        model_sd = self.model.sharded_state_dict()
        return {"model": model_sd, "optimizer": self.optimizer.sharded_state_dict(model_sd)}

    def _load_checkpoint(self, path: Path) -> int:
        from megatron.core import dist_checkpointing

        with self.hook.slow_phase("checkpoint"):  # hook
            state = dist_checkpointing.load(self._sharded_state(), str(path))
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        return self._state_bytes()

    def _my_source(self, assign: WorkerAssignment) -> StateSource | None:
        for s in assign.launch.state_sources:
            if s.rank == assign.rank:
                return s
        return None

    def _enter_epoch(self, assign: WorkerAssignment, survivor: bool) -> None:
        """Move this rank into ``assign``'s epoch (also the first epoch of a fresh process)."""
        from megatron.core import parallel_state

        t0 = time.perf_counter()
        old = self.assign
        if survivor:
            self._teardown()
        t1 = time.perf_counter()
        self.assign = assign
        self.hook.epoch = assign.epoch  # hook
        if not self.on_gpu:
            bind_task(assign.task_id)  # UNICRON_CPU_BIND (emulated nodes on one host); before gloo threads
        self._init_groups(assign)
        t2 = time.perf_counter()
        par = assign.launch.parallel
        live_iteration = self.next_it if survivor else None
        self._build_model(assign)
        self._wrap()
        kept_layout = self._adopt_kept()
        self._open_snapshots(assign)
        tspec = assign.transition
        spec = assign.launch.model
        num_mbs = spec.global_batch // spec.micro_batch
        self.epoch_start = self.next_it
        self.resume_extra = None
        self.pending_report = None
        if tspec is None and not survivor:
            self.next_it = self._load_stored(assign, "checkpoint")[0]
            self.epoch_start = self.next_it
            return
        dp_rank = parallel_state.get_data_parallel_rank()
        dp = parallel_state.get_data_parallel_world_size()
        shard = (
            parallel_state.get_tensor_model_parallel_rank(),
            parallel_state.get_pipeline_model_parallel_rank(),
        )
        mine = self._my_source(assign)
        me = RankState(
            rank=assign.rank,
            node=assign.node,
            dp_rank=dp_rank,
            shard=shard,
            has_state=kept_layout,
            next_iteration=self.next_it,
            done=tuple(self.done) if kept_layout and self.partial_it == self.next_it else (),
            live_iteration=live_iteration,
            old_rank=old.rank if survivor else None,
            wants=mine.kind if mine is not None else None,
            source_old_rank=mine.source_rank if mine is not None else None,
        )
        import torch.distributed as dist

        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, me)
        states: list[RankState] = list(gathered)
        plan = plan_resume(states, num_micro_batches=num_mbs, dp=dp, pp=par.pp)
        print(
            f"[transition] epoch {assign.epoch} rank {assign.rank}: {me} -> {plan}",
            file=sys.stderr,
            flush=True,
        )
        moved, source, source_node, source_rank, rolled_back = 0, "local_device", None, None, 0
        if plan.mode == "live":
            src = plan.sources[shard]
            receive = assign.rank in plan.receivers
            group_needs = any(s.rank in plan.receivers for s in states if s.shard == shard)
            if group_needs:
                moved = broadcast_state(
                    self.model, self.optimizer, src, parallel_state.get_data_parallel_group(), receive
                )
            src_state = next(s for s in states if s.rank == src)
            if receive:
                source = "same_node" if src_state.node == assign.node else "peer_replica"
                source_node, source_rank = src_state.node, src_state.old_rank
                self._zero_grads()
            self.next_it = plan.resume_iteration
            kept = plan.kept.get(dp_rank, ())
            if self.partial_it != self.next_it or receive or tuple(self.done) != kept:
                self._zero_grads()
            if kept:
                self.partial_it, self.done = self.next_it, list(kept)
            self.resume_extra = plan.extra.get(dp_rank, ())
        else:
            wanted = plan.stored_kind or (mine.kind if mine is not None else "checkpoint")
            self.next_it, moved, source = self._load_stored(assign, wanted)
            self._zero_grads()
            # how far the task had got: a survivor's next iteration, else what the coordinator said
            reached = plan.live_iteration
            if reached is None and tspec is not None:
                reached = tspec.resume_iteration
            rolled_back = max((reached if reached is not None else self.next_it) - self.next_it, 0)
        t3 = time.perf_counter()
        if self.dump_dir is not None:
            import torch

            torch.save(
                state_digest(self.model, self.optimizer),
                self.dump_dir / f"e{assign.epoch}-migrated-r{assign.rank}.pt",
            )
        self.epoch_start = self.next_it
        old_own: tuple[int, ...] = ()
        if survivor:
            prev = tspec.previous_parallel if tspec is not None else None
            prev = prev or old.launch.parallel
            old_dp_rank = (old.rank // prev.tp) % prev.dp  # Megatron's rank order: tp fastest, then dp
            old_own = split_micro_batches(num_mbs, prev.dp)[old_dp_rank]
        interrupted = plan.mode == "live" and any(plan.kept.values())
        extra = plan.extra.get(dp_rank, ()) if interrupted else ()
        self.pending_report = {
            "from_epoch": tspec.from_epoch if (tspec is not None and survivor) else None,
            "in_place": survivor,
            "source": source,
            "source_node": source_node,
            "source_rank": source_rank,
            "bytes_moved": moved,
            "phases_s": {"teardown": t1 - t0, "rendezvous": t2 - t1, "migrate": t3 - t2},
            "reused_micro_batches": len(plan.kept.get(dp_rank, ())) if plan.mode == "live" else 0,
            "recomputed_micro_batches": sum(1 for k in extra if k not in old_own),
            "rolled_back_iterations": rolled_back,
            "plan": plan.mode,
        }

    def _load_stored(self, assign: WorkerAssignment, kind: str) -> tuple[int, int, str]:
        """Load a stored copy; returns (next iteration, bytes loaded, source kind used)."""
        launch = assign.launch
        mine = self._my_source(assign)
        if kind == "memory_snapshot":
            loaded = self._load_snapshot(assign, mine)
            if loaded is not None:
                return loaded
            kind = "checkpoint"
        if kind in STORED_KINDS or kind == "checkpoint":
            path: Path | None = None
            it_done: int | None = None
            if mine is not None and mine.kind == "checkpoint" and mine.path:
                # The source names the task's checkpoint root and the iteration wanted: load that
                # iteration's directory when it exists, else the newest complete one.
                root = Path(mine.path)
                wanted = root / f"iter_{mine.iteration:07d}" if mine.iteration is not None else None
                if wanted is not None and wanted.is_dir():
                    path, it_done = wanted, mine.iteration
                elif (found := _latest_checkpoint(root)) is not None:
                    it_done, path = found
                elif (root / "metadata.json").exists():  # a checkpoint directory itself
                    path, it_done = root, mine.iteration
            elif launch.checkpoint_dir and (found := _latest_checkpoint(Path(launch.checkpoint_dir))):
                it_done, path = found
            if path is not None and it_done is not None:
                self._load_checkpoint(path)
                return it_done + 1, self._state_bytes(), "checkpoint"
        return 0, 0, "none"

    def _load_snapshot(
        self, assign: WorkerAssignment, mine: StateSource | None
    ) -> tuple[int, int, str] | None:
        """In-memory snapshot source (:mod:`agents.training.snapshot`); None: none usable here.

        The agent has fetched a peer's replica into its snapshot root when the copy is remote; the
        loader reshards when the layout changed."""
        from agents.training.snapshot import ENV_SNAPSHOT_DIR, SnapshotError, find_snapshot, restore

        root = os.environ.get(ENV_SNAPSHOT_DIR)
        if not root or mine is None or mine.iteration is None:
            return None
        try:
            paths = find_snapshot(root, assign.task_id, mine.iteration)
        except SnapshotError:
            return None
        with self.hook.slow_phase("checkpoint"):  # hook
            it_done = restore(paths, self.model, self.optimizer)
        return it_done + 1, self._state_bytes(), "memory_snapshot"

    def _state_bytes(self) -> int:
        from agents.training.elastic import torch_optimizers

        n = sum(p.numel() * p.element_size() for p in self.model.parameters())
        for opt in torch_optimizers(self.optimizer):
            for st in opt.state.values():
                n += sum(t.numel() * t.element_size() for t in st.values() if hasattr(t, "numel"))
        return int(n)

    def _open_snapshots(self, assign: WorkerAssignment) -> None:
        """One snapshot writer per epoch (it counts complete shards in the epoch's TCPStore)."""
        from agents.training.snapshot import SnapshotWriter

        if self.snap is not None:
            self.snap.close()
        self.snap = SnapshotWriter.from_env(assign.task_id, assign.epoch, assign.rank, assign.launch)

    def _stash_grads(self) -> dict[Any, Any]:
        return {p: p.main_grad.clone() for p in self.model.parameters() if hasattr(p, "main_grad")}

    def _restore_grads(self, stash: dict[Any, Any] | None) -> None:
        import torch

        if stash is None:
            self.partial_it, self.done = None, []
            return
        with torch.no_grad():
            for p, g in stash.items():
                p.main_grad.copy_(g)

    def _zero_grads(self) -> None:
        self.ddp.zero_grad_buffer()
        self.optimizer.zero_grad()
        self.partial_it, self.done = None, []

    # ------------------------------------------------------------------ the training loop
    def _train_epoch(self) -> None:
        import torch
        import torch.distributed as dist
        from megatron.core import dist_checkpointing, parallel_state
        from megatron.core.distributed import finalize_model_grads
        from megatron.core.pipeline_parallel import get_forward_backward_func

        from agents.training.data import SyntheticSampler

        assign, hook, faults = self.assign, self.hook, self.faults
        launch = assign.launch
        spec, par = launch.model, launch.parallel
        dp_rank = parallel_state.get_data_parallel_rank()
        dp = parallel_state.get_data_parallel_world_size()
        sampler = SyntheticSampler(launch.seed, spec.vocab, spec.seq_len, spec.micro_batch, spec.global_batch)
        own = split_micro_batches(sampler.num_micro_batches, dp)[dp_rank]
        tokens_global = spec.global_batch * spec.seq_len
        flops_share = (
            model_flops_per_iteration(spec.layers, spec.hidden, spec.seq_len, spec.vocab, spec.global_batch)
            / launch.world_size
        )
        tokens_share = tokens_global // launch.world_size
        ckpt_root = Path(launch.checkpoint_dir) if launch.checkpoint_dir else None
        forward_backward = get_forward_backward_func()
        device = self.device

        prev_t: float | None = None
        it = self.next_it
        while it < launch.iterations:
            order = hook.poll_orders()  # hook (transition orders at an iteration boundary)
            if order is not None:
                raise _OrderReceived(order)
            first = it == self.epoch_start
            now = time.perf_counter()
            if self.timing is not None and prev_t is not None:
                # Wall time from one iteration start to the next: includes the hook's own cost.
                self.timing.write(
                    json.dumps({"it": it - 1, "dur": now - prev_t, "first": it - 1 == self.epoch_start})
                    + "\n"
                )
            prev_t = now
            resumed = first and self.resume_extra is not None
            work = self.resume_extra if resumed and self.resume_extra is not None else own
            with hook.iteration(it, phase="first" if first else "train"):  # hook
                t_start = time.perf_counter()
                faults.on_iteration_start(it)  # hook (fault injection)
                if self.partial_it != it:
                    self._zero_grads()
                    self.partial_it = it
                kept_grads = None
                if resumed and self.done:
                    # Sum the redistributed micro-batches on their own and add the kept sum last:
                    # kept + lost is how a two-replica all-reduce adds them (DP2 -> DP1 is bitwise).
                    kept_grads = self._stash_grads()
                    self.ddp.zero_grad_buffer()
                losses: list[float] = []

                def forward_step(
                    data_iterator: Any, mdl: Any, it: int = it, losses: list[float] = losses
                ) -> Any:
                    mb = next(data_iterator)
                    tstart = time.perf_counter()
                    out = mdl(
                        mb.tokens.to(device), mb.position_ids.to(device), None, labels=mb.labels.to(device)
                    )

                    def finish(output: Any, index: int = mb.id.index, tstart: float = tstart) -> Any:
                        total = output.float().sum()
                        n = torch.tensor(output.numel(), dtype=torch.int)
                        losses.append(float(total.detach()) / output.numel())
                        faults.stretch(time.perf_counter() - tstart)  # hook (straggler drill)
                        hook.micro_batch_done(it, index)  # hook
                        return total, n, {"lm loss": total.detach()}

                    return out, finish

                batches = [sampler.micro_batch(it, k) for k in work]
                if par.pp == 1:
                    # One call per micro-batch: after each, its gradients are in the buffer, so the
                    # done list is exact when a collective fails later (partial-result reuse).
                    for mb in batches:
                        forward_backward(
                            forward_step_func=forward_step,
                            data_iterator=iter([mb]),
                            model=[self.ddp],
                            num_microbatches=1,
                            seq_length=spec.seq_len,
                            micro_batch_size=spec.micro_batch,
                            forward_only=False,
                        )
                        self.done.append(mb.id.index)
                else:
                    forward_backward(
                        forward_step_func=forward_step,
                        data_iterator=iter(batches),
                        model=[self.ddp],
                        num_microbatches=len(batches),
                        seq_length=spec.seq_len,
                        micro_batch_size=spec.micro_batch,
                        forward_only=False,
                    )
                if kept_grads is not None:
                    with torch.no_grad():
                        for p, g in kept_grads.items():
                            p.main_grad.add_(g)
                if resumed:
                    self.recompute_s = time.perf_counter() - t_start
                hook.compute_done()  # hook
                # gloo reduces in place: a peer dying mid-all-reduce can leave partial sums in the
                # buffer. Elastic mode keeps a copy of the local sums to put back (docs/ARCHITECTURE.md §7.6
                # reuse).
                stash = self._stash_grads() if self.elastic_wait_s > 0 and par.pp == 1 else None
                try:
                    finalize_model_grads([self.ddp])
                except Exception:
                    self._restore_grads(stash)
                    raise
                # Reduced: from here on a failure loses this iteration's partial results.
                self.partial_it, self.done = None, []
                faults.after_all_reduce(it)  # hook (fault injection)
                self.ddp.scale_gradients(1.0 / tokens_global)
                self.optimizer.step()
                self.next_it = it + 1
                if self.snap is not None:
                    self.snap.maybe_snapshot(it, self._sharded_state)
                loss = sum(losses) / len(losses) if losses else None
                hook.set_progress(tokens=tokens_share, model_flops=flops_share, loss=loss)  # hook
                t_end = time.perf_counter()
            if self.dump_dir is not None and (not self.dump_first or it < self.epoch_start + self.dump_first):
                torch.save(
                    state_digest(self.model, self.optimizer),
                    self.dump_dir / f"e{assign.epoch}-it{it:05d}-r{assign.rank}.pt",
                )
            if first and self.pending_report is not None:
                self._send_report(it, t_end - t_start)
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
                    dist_checkpointing.save(self._sharded_state(), str(path))
                    dist.barrier()
                    if assign.rank == 0:
                        tmp = ckpt_root / "latest.tmp"
                        tmp.write_text(str(it))
                        tmp.replace(ckpt_root / "latest")
            it = self.next_it

    def _send_report(self, it: int, first_s: float) -> None:
        rep = dict(self.pending_report or {})
        rep.pop("plan", None)
        phases = dict(rep.get("phases_s", {}))
        phases["recompute"] = self.recompute_s
        phases["first_iteration"] = max(first_s - self.recompute_s, 0.0)
        rep["phases_s"] = phases
        rep["iteration"] = it
        self.hook.transition(rep)  # hook
        self.pending_report = None
        self.recompute_s = 0.0


def main() -> None:
    run_assignment(os.environ.get(ENV_WORKER, ""))


def run_assignment(raw: str, sock: socket.socket | None = None, buffered: bytes = b"") -> None:
    """The worker process from its assignment JSON to its exit (fresh process or warm spare)."""
    if not raw:
        print(f"{ENV_WORKER} is not set: the worker is started by the agent", file=sys.stderr)
        os._exit(2)
    assign = WorkerAssignment.model_validate_json(raw)
    train(assign, sock, buffered)
    sys.stdout.flush()
    sys.stderr.flush()
    reap_children()
    # Leave without running gloo/megatron destructors (they may abort after a peer's failure).
    os._exit(0)


if __name__ == "__main__":
    main()

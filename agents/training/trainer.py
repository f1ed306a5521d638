"""The elastic loop of one rank: epochs, transition orders, failures and the iteration loop.

Transitions without restart (docs/ARCHITECTURE.md §7.6, :mod:`agents.training.elastic`)
-----------------------------------------------------------------------------------------
The process outlives its epoch. An order arrives on the hook socket (at an iteration boundary, or
while the worker waits after a failed collective); the worker then

1. *teardown*: keeps references to its gradient buffer and optimizer state, destroys Megatron's
   parallel state and the process groups (:meth:`~agents.training.rank_model.RankModel.teardown`);
2. *rendezvous*: a fresh ``TCPStore`` at the epoch's own port (never a previous attempt's address)
   and bounded timeouts for the world group and Megatron's groups
   (:func:`~agents.training.rank_model.init_groups`);
3. rebuilds DDP and the optimizer around the **same** model (same layout) and puts the gradients and
   optimizer state back; a layout (TP/PP) change builds a new model instead and the state comes from a
   stored copy, which ``dist_checkpointing`` reshards;
4. *migrate* (:mod:`agents.training.migration`): one ``all_gather_object`` of every rank's
   :class:`~agents.training.elastic.RankState`, the same :func:`~agents.training.elastic.plan_resume`
   everywhere, then per data-parallel group a broadcast of parameters + optimizer state from an
   up-to-date holder to the ranks that need it;
5. *recompute* (:mod:`agents.training.step`): the interrupted iteration's micro-batches that no
   surviving replica finished are given out among the replicas and computed on top of the kept
   gradients; then the normal all-reduce over the new group, scaling by ``1/tokens of the global
   batch`` and the update.

The first completed iteration of the epoch sends a ``TransitionReport`` (source, bytes moved, time
per phase, micro-batches reused / recomputed, iterations rolled back).

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
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.training.assignment import ENV_ELASTIC_WAIT, WorkerAssignment
from agents.training.bench_knobs import BenchKnobs
from agents.training.checkpoint import save_checkpoint
from agents.training.cpu_bind import bind_task
from agents.training.faults import InjectedFault, WorkerFaults
from agents.training.hook import TrainingHook
from agents.training.hook_protocol import TransitionOrder
from agents.training.migration import TransitionDraft, load_stored, migrate
from agents.training.rank_model import RankModel, init_groups
from agents.training.step import TrainingStep, make_sampler, sampler_key
from controlplane.core.env import env_float

if TYPE_CHECKING:
    from agents.training.data import SyntheticSampler
    from agents.training.dataset import RecipeSampler

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
    "EADDRINUSE",
)
"""Words of the errors a collective raises when a peer dies or a link drops, and of a rendezvous whose port
another process holds (the control plane retries at a fresh port: the rank waits for that order)."""


class _OrderReceived(Exception):
    """A transition order arrived at an iteration boundary."""

    def __init__(self, order: TransitionOrder) -> None:
        super().__init__("transition order")
        self.order = order


class Trainer:
    """One rank across its epochs: the model state, the current epoch's position and its report."""

    def __init__(
        self, assign: WorkerAssignment, hook: TrainingHook, on_gpu: bool, assigned_at: float | None = None
    ) -> None:
        """``assigned_at``: when this process got its assignment (wall clock), for the ``start`` phase
        of a fresh rank's transition report; None: not reported."""
        import torch

        self.assign = assign
        self.hook = hook
        self.on_gpu = on_gpu
        self.device = torch.device("cuda", assign.device) if on_gpu else torch.device("cpu")
        self.elastic_wait_s = env_float(ENV_ELASTIC_WAIT, 0.0, minimum=0.0)
        self.faults = WorkerFaults(hook)  # hook (fault injection for drills)
        self.knobs = BenchKnobs.from_env()
        self.state = RankModel(on_gpu=on_gpu)
        self.next_it = 0
        # the current epoch
        self.epoch_start = 0
        self.resume_extra: tuple[int, ...] | None = None
        self.pending_report: TransitionDraft | None = None
        self.recompute_s = 0.0
        self.snap: Any = None  # agents.training.snapshot.SnapshotWriter of the current epoch
        self.assigned_at = assigned_at
        self.data: tuple[str, SyntheticSampler | RecipeSampler] | None = None
        """The task's open data source and its :func:`~agents.training.step.sampler_key`, kept across
        epochs while the key holds."""

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
        self.knobs.close()
        if self.snap is not None:
            self.snap.close()

    def _follow(self, order: TransitionOrder) -> None:
        """Enter the epoch an order names; a failure on the way waits for the next order."""
        while True:
            try:
                self._enter_epoch(order.assignment, survivor=True)
                return
            except Exception as exc:
                order = self._after_failure(exc)

    def _after_failure(self, exc: BaseException) -> TransitionOrder:
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
            self.state.teardown(collect=self.knobs.teardown_gc)
        order = self.hook.wait_order(self.elastic_wait_s)  # hook
        if order is None:
            raise exc
        return order

    def _recoverable(self, exc: BaseException) -> bool:
        if isinstance(exc, InjectedFault) or not isinstance(exc, RuntimeError | TimeoutError):
            return False
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return (
            self.hook.in_collective
            or "distributed_c10d.py" in tb
            or any(m in str(exc) for m in NETWORK_MARKERS)
        )

    def _enter_epoch(self, assign: WorkerAssignment, survivor: bool) -> None:
        """Move this rank into ``assign``'s epoch (also the first epoch of a fresh process)."""
        from agents.training.snapshot import SnapshotWriter

        t0 = time.perf_counter()
        started: dict[str, float] = {}
        if not survivor and self.assigned_at is not None:
            started["start"] = max(time.time() - self.assigned_at, 0.0)
        old = self.assign
        if survivor:
            self.state.teardown(collect=self.knobs.teardown_gc)
        t1 = time.perf_counter()
        # The data is opened while this process has no process group: opening it is then no collective
        # (megatron-core's dataset builder synchronises the ranks when one exists, and a survivor that
        # keeps its open data would not take part), and each node builds its own index cache.
        self._open_data(assign)
        t_data = time.perf_counter()
        self.assign = assign
        self.hook.epoch = assign.epoch  # hook
        if not self.on_gpu:
            bind_task(assign.task_id)  # UNICRON_CPU_BIND (emulated nodes on one host); before gloo threads
        init_groups(assign, self.on_gpu)
        t2 = time.perf_counter()
        self.state.build(assign)
        launch = assign.launch
        self.state.wrap(launch.optimizer, launch.schedule, launch.iterations)
        kept_layout = self.state.adopt_kept()
        # One snapshot writer per epoch (it counts complete shards in the epoch's TCPStore).
        if self.snap is not None:
            self.snap.close()
        self.snap = SnapshotWriter.from_env(assign.task_id, assign.epoch, assign.rank, assign.launch)
        self.resume_extra = None
        self.pending_report = None
        t3 = time.perf_counter()
        if assign.transition is None and not survivor:
            self.next_it = load_stored(self.state, assign, "checkpoint", self.hook)[0]
            self.epoch_start = self.next_it
            return
        start = migrate(
            self.state,
            assign,
            old,
            survivor,
            self.next_it,
            kept_layout,
            self.hook,
            {
                **started,
                "teardown": t1 - t0,
                "data": t_data - t1,
                "rendezvous": t2 - t_data,
                "build": t3 - t2,
            },
        )
        self.knobs.dump_migrated(self.state.model, self.state.optimizer, assign.epoch, assign.rank)
        self.next_it = self.epoch_start = start.next_iteration
        self.resume_extra = start.resume_extra
        self.pending_report = start.report

    # ------------------------------------------------------------------ the iteration loop
    def _train_epoch(self) -> None:
        assign, hook, state = self.assign, self.hook, self.state
        launch = assign.launch
        assert self.data is not None  # opened on entering the epoch
        step = TrainingStep(
            assign,
            state,
            hook,
            self.faults,
            self.device,
            keep_partial_sums=self.elastic_wait_s > 0,
            sampler=self.data[1],
            loss_sink=self.knobs.loss_sink(
                assign.epoch,
                (launch.parallel.tp, launch.parallel.pp, launch.parallel.dp, launch.model.micro_batch),
            ),
        )
        ckpt_root = Path(launch.checkpoint_dir) if launch.checkpoint_dir else None

        prev_t: float | None = None
        it = self.next_it
        while it < launch.iterations:
            order = hook.poll_orders()  # hook (transition orders at an iteration boundary)
            if order is not None:
                raise _OrderReceived(order)
            first = it == self.epoch_start
            now = time.perf_counter()
            if prev_t is not None:
                self.knobs.record_iteration(it - 1, now - prev_t, first=it - 1 == self.epoch_start)
            prev_t = now
            resumed = first and self.resume_extra is not None
            work = self.resume_extra if resumed and self.resume_extra is not None else step.own
            with hook.iteration(it, phase="first" if first else "train"):  # hook
                t_start = time.perf_counter()
                result = step.run(it, work, resumed)
                if resumed:
                    self.recompute_s = result.compute_s
                self.next_it = it + 1
                if self.snap is not None:
                    self.snap.maybe_snapshot(it, state.sharded_state)
                hook.set_progress(
                    tokens=step.tokens_share,
                    model_flops=step.flops_share,
                    loss=result.loss,
                    learning_rate=result.learning_rate,
                    grad_norm=result.grad_norm,
                )  # hook
                t_end = time.perf_counter()
            self.knobs.dump_iteration(
                state.model, state.optimizer, assign.epoch, it, assign.rank, epoch_start=self.epoch_start
            )
            if first and self.pending_report is not None:
                self._send_report(it, t_end - t_start)
            if step.evaluates_after(it):
                with hook.slow_phase("evaluation"):  # hook: the monitors leave it out
                    validation_loss = step.evaluate(it)
                if validation_loss is not None:
                    hook.evaluated(it, validation_loss)  # hook
                    self.knobs.record_validation(assign.epoch, it, validation_loss)
            if (
                ckpt_root is not None
                and launch.checkpoint_interval
                and (it + 1) % launch.checkpoint_interval == 0
            ):
                save_checkpoint(state, ckpt_root, it, assign.rank, hook, keep=launch.checkpoint_keep)
            it = self.next_it

    def _open_data(self, assign: WorkerAssignment) -> None:
        """Open the epoch's data source, unless this rank has it open already (same samples)."""
        key = sampler_key(assign)
        if self.data is None or self.data[0] != key:
            self.data = None  # the old one's memory maps go before the new ones open
            self.data = (key, make_sampler(assign))

    def _send_report(self, it: int, first_s: float) -> None:
        if self.pending_report is not None:
            report = self.pending_report.report(it, self.recompute_s, max(first_s - self.recompute_s, 0.0))
            self.hook.transition(report)  # hook
        self.pending_report = None
        self.recompute_s = 0.0

"""The training step of one rank: forward/backward over its micro-batches, all-reduce, update.

Gradients are per-token sums (``calculate_per_token_loss``) scaled by ``1/tokens of the global batch``
after the all-reduce, so Megatron's ``1/num_microbatches`` loss scaling and DDP's ``1/dp`` gradient
scaling are both off: the update does not depend on how the fixed global batch is split, which is
what makes kept + redistributed micro-batches exact (docs/ARCHITECTURE.md §7.6). When the resumed
iteration adds redistributed micro-batches to kept ones, the new ones are summed on their own and
the kept sum added last (what a two-replica all-reduce does), so DP2 -> DP1 is bitwise the
failure-free step.

A micro-batch's input tensors come from one place, :meth:`TrainingStep.micro_batch` (iteration,
global micro-batch index) -> tensors: the data source plugs in there.

Evaluation (:meth:`TrainingStep.evaluate`, the recipe's ``eval`` section): after every ``interval``-th
iteration, ``iterations`` global batches of held-out data (the validation split of the recipe's data;
for synthetic data, sequences drawn from seeds no train micro-batch uses), forward only, in eval mode
without gradients, each rank over its data-parallel share; the per-token loss sums and token counts
are summed over the data-parallel group, so the last stage's ranks all get the global batch's mean.
Evaluation ``e`` (0, 1, ...) reads validation iterations ``e·iterations`` to ``(e+1)·iterations - 1``,
so every evaluation of a run reads new samples and a repeated one (after a transition) the same.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.training.assignment import WorkerAssignment, gpt_spec
from agents.training.elastic import split_micro_batches
from agents.training.faults import WorkerFaults
from agents.training.hook import TrainingHook
from agents.training.rank_model import RankModel

if TYPE_CHECKING:
    import torch

    from agents.training.data import MicroBatch, SyntheticSampler
    from agents.training.dataset import RecipeSampler


@dataclass(frozen=True)
class StepResult:
    loss: float | None
    """Mean loss per token over this rank's micro-batches (None on a stage without the loss)."""
    compute_s: float
    """Time from the step's start to the end of its forward/backward passes."""
    learning_rate: float | None = None
    grad_norm: float | None = None
    """The gradients' global norm before clipping (None when the optimizer did not say)."""


def sampler_key(assign: WorkerAssignment) -> str:
    """What a rank's data source depends on: equal keys, the same samples by the same global indices,
    whatever the layout (a survivor keeps its open data across epochs)."""
    launch = assign.launch
    spec = launch.model
    data = launch.data.model_dump_json() if launch.data is not None else None
    evaluation = launch.eval.model_dump_json() if launch.eval is not None else None
    return repr(
        (
            assign.task_id,
            data,
            evaluation,
            launch.seed,
            launch.iterations,
            spec.vocab,
            spec.seq_len,
            spec.micro_batch,
            spec.global_batch,
        )
    )


def make_sampler(assign: WorkerAssignment) -> SyntheticSampler | RecipeSampler:
    """The task's data source: the recipe's datasets by global sample index, else synthetic tokens."""
    from agents.training.data import SyntheticSampler
    from agents.training.dataset import RecipeSampler

    launch = assign.launch
    spec = launch.model
    if launch.data is None:
        return SyntheticSampler(launch.seed, spec.vocab, spec.seq_len, spec.micro_batch, spec.global_batch)
    evaluations = launch.iterations // launch.eval.interval + 1 if launch.eval is not None else 0
    # the recipe's data, by global sample index (agents/training/dataset.py)
    return RecipeSampler(
        launch.data,
        seq_length=spec.seq_len,
        seed=launch.seed,
        micro_batch=spec.micro_batch,
        global_batch=spec.global_batch,
        iterations=launch.iterations,
        vocab_size=spec.vocab,
        cache_dir=Path(tempfile.gettempdir()) / "unicron-data" / f"task-{assign.task_id}",
        validation_iterations=evaluations * launch.eval.iterations if launch.eval is not None else 0,
    )


class TrainingStep:
    """One epoch's step function: fixed data-parallel share, shapes and per-rank progress figures."""

    def __init__(
        self,
        assign: WorkerAssignment,
        state: RankModel,
        hook: TrainingHook,
        faults: WorkerFaults,
        device: torch.device,
        keep_partial_sums: bool,
        sampler: SyntheticSampler | RecipeSampler,
        loss_sink: Callable[[int, int, float], None] | None = None,
    ) -> None:
        """``keep_partial_sums``: copy the local gradient sums before the all-reduce and put them
        back when it fails (elastic mode: gloo reduces in place, a peer dying mid-ring leaves partial
        sums in the buffer) — one gradient-sized copy per iteration. ``loss_sink``: called with
        (iteration, global micro-batch index, mean loss per token) as each micro-batch's loss is
        computed (a benchmark knob; None in production). ``sampler``: the task's data, opened by
        :func:`make_sampler` before the epoch's process groups existed (opening it with a group is a
        collective in megatron-core, and a rank that kept its data open would not take part)."""
        from megatron.core import parallel_state
        from megatron.core.pipeline_parallel import get_forward_backward_func

        launch = assign.launch
        spec = launch.model
        self.assign, self.state, self.hook, self.faults, self.device = assign, state, hook, faults, device
        self.keep_partial_sums = keep_partial_sums and launch.parallel.pp == 1
        self.loss_sink = loss_sink
        self.sampler = sampler
        dp_rank = parallel_state.get_data_parallel_rank()
        dp = parallel_state.get_data_parallel_world_size()
        self.own: tuple[int, ...] = split_micro_batches(self.sampler.num_micro_batches, dp)[dp_rank]
        """The global micro-batch indices of this rank's data-parallel share."""
        self.tokens_global = spec.global_batch * spec.seq_len
        self.flops_share = gpt_spec(spec, launch.architecture).flops_per_iteration() / launch.world_size
        self.tokens_share = self.tokens_global // launch.world_size
        self.forward_backward = get_forward_backward_func()

    def micro_batch(self, iteration: int, index: int) -> MicroBatch:
        """The input tensors of global micro-batch ``index`` of ``iteration``."""
        return self.sampler.micro_batch(iteration, index)

    def evaluates_after(self, it: int) -> bool:
        """Whether the recipe's evaluation runs after iteration ``it``."""
        ev = self.assign.launch.eval
        return ev is not None and (it + 1) % ev.interval == 0

    def evaluate(self, it: int) -> float | None:
        """The validation loss (mean per token over the evaluation's global batches) after iteration
        ``it``; None on a pipeline stage without the loss. Every rank of the task takes part."""
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state

        ev = self.assign.launch.eval
        assert ev is not None
        spec, par = self.assign.launch.model, self.assign.launch.parallel
        state, device = self.state, self.device
        first = ((it + 1) // ev.interval - 1) * ev.iterations
        sums = torch.zeros(2, dtype=torch.float64)

        def forward_step(data_iterator: Any, mdl: Any) -> Any:
            mb = next(data_iterator)
            out = mdl(mb.tokens.to(device), mb.position_ids.to(device), None, labels=mb.labels.to(device))

            def finish(output: Any) -> Any:
                total = output.float().sum()
                sums[0] += float(total)
                sums[1] += output.numel()
                return total, torch.tensor(output.numel(), dtype=torch.int), {"lm loss": total}

            return out, finish

        state.ddp.eval()
        try:
            with torch.no_grad():
                for v in range(first, first + ev.iterations):
                    batches = [self.sampler.validation_micro_batch(v, k) for k in self.own]
                    self.forward_backward(
                        forward_step_func=forward_step,
                        data_iterator=iter(batches),
                        model=[state.ddp],
                        num_microbatches=len(batches),
                        seq_length=spec.seq_len,
                        micro_batch_size=spec.micro_batch,
                        forward_only=True,
                    )
        finally:
            state.ddp.train()
        if par.pp > 1 and not parallel_state.is_pipeline_last_stage():
            return None
        dist.all_reduce(sums, group=parallel_state.get_data_parallel_group())
        return float(sums[0] / sums[1])

    def run(self, it: int, work: Sequence[int], resumed: bool) -> StepResult:
        """Compute micro-batches ``work`` of iteration ``it`` on top of the buffer's partial sums,
        all-reduce and update. ``resumed``: the first iteration after a live migration, whose
        kept micro-batches (``state.done``) are already in the buffer."""
        import torch
        from megatron.core.distributed import finalize_model_grads

        state, hook, faults, device = self.state, self.hook, self.faults, self.device
        spec, par = self.assign.launch.model, self.assign.launch.parallel
        t_start = time.perf_counter()
        faults.on_iteration_start(it)  # hook (fault injection)
        if state.partial_it != it:
            state.zero_grads()
            state.partial_it = it
        kept_grads = None
        if resumed and state.done:
            # Sum the redistributed micro-batches on their own and add the kept sum last:
            # kept + lost is how a two-replica all-reduce adds them (DP2 -> DP1 is bitwise).
            kept_grads = state.stash_grads()
            state.ddp.zero_grad_buffer()
        losses: list[float] = []
        sink = self.loss_sink

        def forward_step(data_iterator: Any, mdl: Any) -> Any:
            mb = next(data_iterator)
            tstart = time.perf_counter()
            out = mdl(mb.tokens.to(device), mb.position_ids.to(device), None, labels=mb.labels.to(device))

            def finish(output: Any, index: int = mb.id.index, tstart: float = tstart) -> Any:
                total = output.float().sum()
                n = torch.tensor(output.numel(), dtype=torch.int)
                losses.append(float(total.detach()) / output.numel())
                if sink is not None:
                    sink(it, index, losses[-1])
                faults.stretch(time.perf_counter() - tstart)  # hook (straggler drill)
                hook.micro_batch_done(it, index)  # hook
                return total, n, {"lm loss": total.detach()}

            return out, finish

        batches = [self.micro_batch(it, k) for k in work]
        if par.pp == 1:
            # One call per micro-batch: after each, its gradients are in the buffer, so the
            # done list is exact when a collective fails later (partial-result reuse).
            for mb in batches:
                self.forward_backward(
                    forward_step_func=forward_step,
                    data_iterator=iter([mb]),
                    model=[state.ddp],
                    num_microbatches=1,
                    seq_length=spec.seq_len,
                    micro_batch_size=spec.micro_batch,
                    forward_only=False,
                )
                state.done.append(mb.id.index)
        else:
            self.forward_backward(
                forward_step_func=forward_step,
                data_iterator=iter(batches),
                model=[state.ddp],
                num_microbatches=len(batches),
                seq_length=spec.seq_len,
                micro_batch_size=spec.micro_batch,
                forward_only=False,
            )
        if kept_grads is not None:
            state.add_grads(kept_grads)
        compute_s = time.perf_counter() - t_start
        hook.compute_done()  # hook
        stash = state.stash_grads() if self.keep_partial_sums else None
        try:
            finalize_model_grads([state.ddp])
        except Exception:
            state.restore_grads(stash)
            raise
        # Reduced: from here on a failure loses this iteration's partial results.
        state.partial_it, state.done = None, []
        faults.after_all_reduce(it)  # hook (fault injection)
        state.ddp.scale_gradients(1.0 / self.tokens_global)
        lr = state.set_iteration(it)
        stepped = state.optimizer.step()
        norm = stepped[1] if isinstance(stepped, tuple) and len(stepped) > 1 else None
        return StepResult(
            loss=sum(losses) / len(losses) if losses else None,
            compute_s=compute_s,
            learning_rate=lr,
            grad_norm=float(norm) if norm is not None else None,
        )

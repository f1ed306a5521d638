"""A real Megatron-Core GPT training worker (one process per device, one compute thread).

Launched by the agent as ``python -m agents.training.worker`` — or handed to a warm spare process
that has already imported torch and Megatron-Core (:mod:`agents.training.spare`, which then calls
:func:`run_assignment` on its hook connection) — with the environment:

- ``UNICRON_WORKER``: JSON of :class:`~agents.training.assignment.WorkerAssignment` (task, epoch,
  rank, device, WorkerLaunch, and for a rank started by a transition the
  :class:`~agents.training.elastic.TransitionSpec`);
- ``UNICRON_HOOK_SOCKET`` / ``UNICRON_STACK_FILE`` / ``UNICRON_RANK``: see :mod:`agents.training.hook`;
- ``UNICRON_ELASTIC_WAIT_S`` (optional, default 0 = off): elastic mode. After a collective error the
  worker reports it and waits up to this long for a transition order instead of exiting;
- ``UNICRON_CPU_BIND`` (optional, CPU only): ``task`` binds the worker to one core by its task
  (see :mod:`agents.training.cpu_bind`);
- test and benchmark knobs: :mod:`agents.training.bench_knobs`.

TP/PP/DP come from the assignment. On a machine without CUDA the worker loads the CPU compatibility
layer and uses gloo; with CUDA it uses NCCL and loads nothing extra. The training loop is an ordinary
Megatron loop; the hook's lines are the only additions (marked ``# hook``). The worker is built from:

- :mod:`agents.training.trainer`: the elastic loop (epochs, transition orders, failures, iterations);
- :mod:`agents.training.migration`: a transition's state migration (live replicas, snapshots,
  checkpoints);
- :mod:`agents.training.step`: the training step (forward/backward over micro-batches, all-reduce,
  update) and the one place a micro-batch's tensors are produced;
- :mod:`agents.training.rank_model`: the model, DDP, optimizer, gradients and process groups;
- :mod:`agents.training.checkpoint`: stored checkpoints.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys

from agents.training.assignment import ENV_WORKER, WorkerAssignment
from agents.training.hook import reap_children
from controlplane.core.env import env_str

__all__ = ["ENV_WORKER", "WorkerAssignment", "main", "run_assignment", "train"]


def train(
    assign: WorkerAssignment,
    sock: socket.socket | None = None,
    buffered: bytes = b"",
    assigned_at: float | None = None,
) -> None:
    """Run one rank. ``sock``: an already connected hook socket (a warm spare's, see
    :mod:`agents.training.spare`) with ``buffered`` bytes already read from it; None: connect.
    ``assigned_at``: when this process got its assignment (wall clock; None: when it started)."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    on_gpu = torch.cuda.is_available()
    from agents.training.hook import TrainingHook
    from agents.training.trainer import Trainer

    freeze_imports()
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
            Trainer(assign, hook, on_gpu, assigned_at=assigned_at or _process_start()).run()
        hook.finished()  # hook


def main() -> None:
    run_assignment(env_str(ENV_WORKER, "") or "")


def freeze_imports() -> None:
    """Move every object alive now (what the imports made) out of the cyclic collector's generations.

    torch and Megatron-Core leave ~420,000 objects that live as long as the process, and Python's
    collector walks them all in every full collection: 0.24 s on the CPU box. The first one came
    during a fresh rank's model build, on a transition's critical path (its peers waited for it in a
    collective: 0.3 s of a 1 s restart), and later ones stall an iteration. Frozen, a collection
    walks only what the worker allocates itself (``gc.freeze``). Idempotent: cheap once done."""
    import gc

    gc.collect()  # the imports' own garbage goes now rather than frozen with the rest
    gc.freeze()


def _process_start() -> float | None:
    """When this process started (wall clock), None if the system does not say."""
    import psutil

    try:
        return float(psutil.Process().create_time())
    except psutil.Error:
        return None


def run_assignment(
    raw: str, sock: socket.socket | None = None, buffered: bytes = b"", assigned_at: float | None = None
) -> None:
    """The worker process from its assignment JSON to its exit (fresh process or warm spare)."""
    if not raw:
        print(f"{ENV_WORKER} is not set: the worker is started by the agent", file=sys.stderr)
        os._exit(2)
    assign = WorkerAssignment.model_validate_json(raw)
    train(assign, sock, buffered, assigned_at)
    sys.stdout.flush()
    sys.stderr.flush()
    reap_children()
    # Leave without running gloo/megatron destructors (they may abort after a peer's failure).
    os._exit(0)


if __name__ == "__main__":
    main()

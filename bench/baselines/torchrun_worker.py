"""The torchrun-style baseline's worker: the same Megatron training loop as ours, launched by torchrun.

    python -m torch.distributed.run --nproc-per-node N --max-restarts K bench/baselines/torchrun_worker.py

torchrun sets ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` / ``TORCHELASTIC_RESTART_COUNT``; this wrapper
turns them into the :class:`~agents.training.worker.WorkerAssignment` our agent would give, from the
template in ``UNICRON_BASELINE_LAUNCH`` (a :class:`~controlplane.core.protocol.WorkerLaunch` as JSON,
``world_size`` and ``ranks`` replaced), and runs :func:`agents.training.worker.train` unchanged:

- no elastic mode (``UNICRON_ELASTIC_WAIT_S`` unset): a failed collective raises and the process exits
  (code 17), which is all torchrun's supervision sees;
- every restart attempt gets its own rendezvous port (``base + restart count``): stack-facts measured
  that reusing a previous attempt's addresses makes gloo restarts fail;
- state comes from the last ``dist_checkpointing`` checkpoint in ``checkpoint_dir`` (saved every
  ``checkpoint_interval`` iterations by the same loop); iterations since are recomputed;
- the hook socket (``UNICRON_HOOK_SOCKET``), when set, goes to the benchmark's event sink, which only
  records iteration times and delivers fault drills; it detects nothing and orders nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

ENV_LAUNCH = "UNICRON_BASELINE_LAUNCH"
ENV_TASK = "UNICRON_BASELINE_TASK"


def main() -> None:
    from agents.training.hook import ENV_RANK, reap_children
    from agents.training.worker import WorkerAssignment, train
    from controlplane.core.protocol import RankAssignment, WorkerLaunch

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    template = WorkerLaunch.model_validate_json(os.environ[ENV_LAUNCH])
    rdzv = template.rendezvous.model_copy(update={"master_port": template.rendezvous.master_port + attempt})
    launch = template.model_copy(
        update={
            "world_size": world,
            "ranks": [RankAssignment(rank=rank, device=local)],
            "rendezvous": rdzv,
            "parallel": template.parallel.model_copy(
                update={"dp": world // (template.parallel.tp * template.parallel.pp)}
            ),
        }
    )
    os.environ[ENV_RANK] = str(rank)
    assign = WorkerAssignment(
        task_id=os.environ.get(ENV_TASK, "baseline"),
        epoch=attempt + 1,
        rank=rank,
        device=local,
        launch=launch,
    )
    train(assign)
    sys.stdout.flush()
    sys.stderr.flush()
    reap_children()
    os._exit(0)


if __name__ == "__main__":
    main()

"""Start a task's workers on this machine without an agent (benchmarks, smoke runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from agents.training.assignment import ENV_WORKER, WorkerAssignment
from controlplane.core.protocol import WorkerLaunch


def worker_env(assign: WorkerAssignment, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            ENV_WORKER: assign.model_dump_json(),
            "UNICRON_RANK": str(assign.rank),
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra or {})
    return env


def spawn_local(
    task_id: str, epoch: int, launch: WorkerLaunch, extra_env: Mapping[str, str] | None = None
) -> list[subprocess.Popen[bytes]]:
    procs = []
    for ra in launch.ranks:
        assign = WorkerAssignment(task_id=task_id, epoch=epoch, rank=ra.rank, device=ra.device, launch=launch)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "agents.training.worker"],
                env=worker_env(assign, extra_env),
                start_new_session=True,
            )
        )
    return procs

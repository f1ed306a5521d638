"""Checkpoints out: real Megatron-Core workers save a persistent checkpoint every
``UNICRON_CHECKPOINT_INTERVAL`` iterations; the rank that marks it the latest reports it through its agent,
and the task's checkpoints (iteration, path, size) are listed by the API, the directory there on disk.
Simulated ranks report modelled saves the same way (no files): the control plane plans restores from the
reports alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from rest_framework.test import APIClient

from controlplane.apps.accounts.roles import Role
from controlplane.apps.training.models import Checkpoint
from tests.controlplane.conftest import make_user
from tests.e2e.loop import SIM_SPEC, TINY_GPT, Loop

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize("worker", ["megatron", "sim"])
def test_checkpoints_the_workers_save_are_reported_and_listed(loop: Loop, worker: str) -> None:
    loop.restart_worker(UNICRON_CHECKPOINT_INTERVAL="10", UNICRON_RESUME_DEADLINE_S="150")
    loop.add_node(2, worker=worker)
    loop.wait_nodes_healthy(1)
    spec = TINY_GPT if worker == "megatron" else SIM_SPEC
    task = loop.submit("ckpt", spec, min_workers=2, max_workers=2, total_iterations=100000)
    loop.wait_running(task, timeout=150)

    def two_saved() -> list[Checkpoint] | None:
        rows = list(Checkpoint.objects.filter(task=task).order_by("iteration")[:2])
        return rows if len(rows) == 2 else None

    saved = loop.wait("two checkpoints reported", two_saved, timeout=120)
    assert [c.iteration for c in saved] == [9, 19]  # after iterations 10 and 20 (0-based)
    for c in saved if worker == "megatron" else []:
        on_disk = Path(c.path)
        assert on_disk.is_dir(), c.path
        assert c.size_bytes == sum(f.stat().st_size for f in on_disk.rglob("*") if f.is_file())
        assert c.size_bytes > 0
    client = APIClient()
    client.force_authenticate(make_user(Role.VIEWER))
    listed = client.get(f"/api/v1/tasks/{task.pk}/checkpoints/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert {9, 19} <= {r["iteration"] for r in rows}, rows

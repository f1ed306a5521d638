"""A recipe whose ``model.provider`` names a model other than the built-in GPT (a QK-layernorm GPT,
``tests.agents.providers:qk_norm_gpt``) is submitted, planned and launched with the provider's path
(two agents of one device each, real Megatron-Core workers, two ranks); it trains through a worker
crash (restart on the same devices), the loss of a node (below its two workers the task is suspended)
and that node's return (the task grows back to two workers from its latest checkpoint), and every
process that built the model built it with the provider. The training loss falls."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.apps.fleet.models import AgentCommand
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.models import MetricSample
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import TaskSubmission, do_submit_task
from controlplane.core.recipe import recipe_from_mapping
from tests.e2e.loop import TINY_GPT, Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROVIDER = "tests.agents.providers:qk_norm_gpt"


def workers(task: TrainingTask) -> int:
    return Allocation.objects.filter(task=task, active=True).count()


def progress(loop: Loop, task: TrainingTask, what: str, iterations: int = 5, timeout: float = 150) -> int:
    task.refresh_from_db()
    before = task.iteration
    loop.wait(what, lambda: (task.refresh_from_db(), task.iteration >= before + iterations)[1], timeout)
    return task.iteration


def test_a_provider_task_trains_through_a_crash_a_node_loss_and_a_grow(
    loop: Loop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = tmp_path / "built.log"
    monkeypatch.setenv("UNICRON_TEST_PROVIDER_LOG", str(built))  # the agents' workers inherit it
    # checkpoints (the state the task resumes from after its suspension): on two shared cores a save
    # slows rank 0 for a few iterations, which a straggler ratio of 2 would flag
    loop.restart_worker(
        UNICRON_RESUME_DEADLINE_S="150",
        UNICRON_STEP_DEADLINE_S="60",
        UNICRON_CHECKPOINT_INTERVAL="20",
        UNICRON_STRAGGLER_RATIO="20",
    )
    loop.add_node(1, worker="megatron")
    loop.add_node(1, worker="megatron")
    loop.wait_nodes_healthy(2)
    shape = {k: v for k, v in TINY_GPT.items() if k not in ("global_batch_size", "micro_batch_size")}
    recipe = recipe_from_mapping(
        {
            "version": 1,
            "model": {**shape, "provider": PROVIDER},
            "schedule": {"lr": 1e-3, "min_lr": 1e-3, "decay_style": "constant"},
            "train_iterations": 100000,
            "global_batch_size": TINY_GPT["global_batch_size"],
            "micro_batch_size": TINY_GPT["micro_batch_size"],
        }
    )
    task = do_submit_task(None, TaskSubmission.from_recipe("byom", recipe, min_workers=2, max_workers=2))
    loop.wait_running(task, timeout=150)
    assert workers(task) == 2
    starts = AgentCommand.objects.filter(task=task, type="start_workers")
    assert starts.exists()
    assert all(c.payload["launch"]["architecture"]["provider"] == PROVIDER for c in starts), [
        c.payload for c in starts
    ]
    progress(loop, task, "iterations at the launch", iterations=10)

    # a worker crash: restart on the same devices
    task.refresh_from_db()
    epoch = task.epoch
    loop.inject(task, "crash", rank=1)
    restart = loop.wait_running(task, epoch_above=epoch, timeout=180)
    assert restart.kind == "restart"
    progress(loop, task, "iterations after the restart")

    # the node of rank 1 dies (agent and worker at once): below its minimum the task is suspended
    victim = Allocation.objects.select_related("device__node").get(task=task, active=True, rank=1).device.node
    progress(loop, task, "a checkpoint's worth of iterations", iterations=20)
    loop.kill_agent(victim.name)
    loop.wait(
        "the task suspended", lambda: TrainingTask.objects.get(pk=task.pk).state == "suspended", timeout=90
    )
    assert workers(task) == 0

    # the node returns: the task grows back to two workers on both nodes
    task.refresh_from_db()
    epoch = task.epoch
    loop.start_agent(victim.name, devices=1)
    loop.wait_running(task, epoch_above=epoch, timeout=240)
    assert workers(task) == 2
    assert Allocation.objects.filter(task=task, active=True, device__node=victim).exists()
    progress(loop, task, "iterations after the return")

    task.refresh_from_db()
    assert task.state == "running"
    assert not FailureEvent.objects.filter(task=task, kind="recipe_unusable").exists()
    launches = AgentCommand.objects.filter(task=task, type__in=("start_workers", "reconfigure"))
    assert launches.count() > starts.count()  # the restart and the return launched it again
    assert all(c.payload["launch"]["architecture"]["provider"] == PROVIDER for c in launches)
    # the launch's two ranks, the restarted rank(s), the grown rank: each built the provider's model
    lines = built.read_text().splitlines()
    assert len(lines) >= 4, lines
    assert len({line.split()[0] for line in lines}) >= 3, lines
    losses = [
        s.value
        for s in MetricSample.objects.filter(task=task, kind=MetricKind.TRAINING_LOSS).order_by("iteration")
    ]
    assert losses, "no training loss stored"
    assert losses[-1] < losses[0] - 0.5, losses
    assert_allocations_consistent()

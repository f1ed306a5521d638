"""The path of one worker crash through the control plane, as the list of project modules it passes through:
``python tools/architecture.py --trace`` runs this file (pytest collects it only when named) and reads what
it writes to ``$UNICRON_TRACE_OUT``.

One process plays every part in order: a fake agent (the real agent link, in process) reports a crashed rank
of a running task; failure handling runs (the Celery task's function, called directly); the commands it queued
reach the agent, which acknowledges them; the ranks report their first iteration in the new epoch; the
transition completes. A profile hook in every thread records each call into a ``controlplane`` or ``agents``
module, and consecutive calls within one module are collapsed into one step.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from channels.db import database_sync_to_async

from controlplane.apps.fleet.models import Device
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.models import Transition
from controlplane.apps.training.models import Allocation, TrainingTask
from tests.controlplane.factories import TaskFactory
from tests.e2e.conftest import AgentSocket, Connect, Registered

pytestmark = pytest.mark.django_db(transaction=True)
PACKAGES = ("controlplane.", "agents.")


class ModuleTrace:
    """Project modules entered, in order, from every thread (consecutive repeats collapsed), and every call
    from one project module into another. The caller is the nearest project frame up the callee's stack: a
    call through a library (a Django signal, an on-commit hook) counts as made by the module that made it."""

    def __init__(self) -> None:
        self.steps: list[str] = []
        self.calls: Counter[tuple[str, str]] = Counter()
        self.lock = threading.Lock()
        self.on = False

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "call" or not self.on:
            return
        name = frame.f_globals.get("__name__", "")
        if not name.startswith(PACKAGES):
            return
        caller = frame.f_back
        while caller is not None and not caller.f_globals.get("__name__", "").startswith(PACKAGES):
            caller = caller.f_back
        with self.lock:
            if not self.steps or self.steps[-1] != name:
                self.steps.append(name)
            if caller is not None and caller.f_globals["__name__"] != name:
                self.calls[(caller.f_globals["__name__"], name)] += 1

    def __enter__(self) -> ModuleTrace:
        sys.setprofile(self.hook)
        threading.setprofile(self.hook)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def path_figures(steps: list[str]) -> dict[str, Any]:
    """The path collapsed (consecutive repeats as one step): its steps, distinct modules, and how often it
    came back to a module it had left."""
    path = [m for i, m in enumerate(steps) if i == 0 or steps[i - 1] != m]
    left: set[str] = set()
    returns = 0
    for i, m in enumerate(path):
        if m in left:
            returns += 1
        if i > 0:
            left.add(path[i - 1])
    first_seen = list(dict.fromkeys(path))
    return {"steps": len(path), "distinct_modules": len(first_seen), "returns": returns, "order": first_seen}


@database_sync_to_async
def running_task(registered: Registered) -> TrainingTask:
    task: TrainingTask = TaskFactory(state="running", epoch=1, min_workers=2, max_workers=2)
    for rank in (0, 1):
        device = Device.objects.get(node=registered.node, index=rank)
        Allocation.objects.create(task=task, device=device, rank=rank, epoch=1, active=True)
    return task


@database_sync_to_async
def handle(task: TrainingTask) -> None:
    from controlplane.apps.planning.tasks import handle_failure_task

    event = FailureEvent.objects.get(task=task)
    handle_failure_task.run(event.pk)


@database_sync_to_async
def transition_of(task: TrainingTask) -> Transition | None:
    return Transition.objects.filter(task=task, epoch__gt=1).order_by("-epoch").first()


async def acknowledge_commands(agent: AgentSocket, timeout: float = 5.0) -> list[dict[str, Any]]:
    """Every command frame the agent gets within ``timeout`` (until a quiet second), acknowledged done."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await agent.comm.receive_nothing(timeout=1.0):  # a timed-out receive would stop the app
            break
        frame = await agent.receive()
        message = frame["message"]
        if "command_id" in message:
            got.append(message)
            await agent.send({"type": "ack", "command_id": message["command_id"], "outcome": "accepted"})
            await agent.send({"type": "ack", "command_id": message["command_id"], "outcome": "done"})
    return got


def crash_report(task: TrainingTask, rank: int) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task.pk),
        "epoch": 1,
        "rank": rank,
        "device": rank,
        "detector": "process_supervision",
        "occurred_at": now,
        "detected_at": now,
        "event": {
            "kind": "exited",
            "exit_code": None,
            "signal": 9,
            "signal_name": "SIGKILL",
            "expected": False,
        },
    }


def transition_report(task: TrainingTask, epoch: int, rank: int) -> dict[str, Any]:
    now = datetime.now(UTC).isoformat()
    return {
        "type": "worker_report",
        "report_id": str(uuid.uuid4()),
        "task_id": str(task.pk),
        "epoch": epoch,
        "rank": rank,
        "device": rank,
        "detector": "process_supervision",
        "occurred_at": now,
        "detected_at": now,
        "event": {
            "kind": "transition",
            "from_epoch": 1,
            "iteration": 13,
            "in_place": False,
            "source": "peer_replica",
        },
    }


async def test_the_path_of_a_worker_crash(registered: Registered, connect: Connect) -> None:
    # installed before the agent link starts the threads its database calls run in (a thread takes the
    # profile hook when it starts), recording only from the crash on
    with ModuleTrace() as trace:
        agent = await connect(registered.token, registered.name)
        await agent.hello(devices=2)
        await agent.settle()
        task = await running_task(registered)
        trace.on = True
        await agent.send(crash_report(task, rank=0))
        await agent.settle()
        await handle(task)
        commands = await acknowledge_commands(agent)
        transition = await transition_of(task)
        assert transition is not None, "handling started no transition"
        for rank in (0, 1):
            await agent.send(transition_report(task, transition.epoch, rank))
        await agent.settle()
        trace.on = False
    transition = await transition_of(task)
    assert transition is not None
    out = {
        "modules": trace.steps,
        "calls": [[caller, callee, n] for (caller, callee), n in sorted(trace.calls.items())],
        "commands": [c.get("type") for c in commands],
        "transition": {"kind": transition.kind, "state": transition.state},
        # every project module, then the orchestration modules alone (apps and live: what the loop's
        # readers follow; the pure core's calls are leaves of it)
        "all": path_figures(trace.steps),
        "orchestration": path_figures([m for m in trace.steps if not m.startswith("controlplane.core.")]),
    }
    Path(os.environ.get("UNICRON_TRACE_OUT", "crash_path.json")).write_text(json.dumps(out, indent=1) + "\n")

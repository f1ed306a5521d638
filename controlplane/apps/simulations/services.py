"""What-if simulations of the live cluster (docs/EVALUATION.md): snapshot the current nodes and tasks, replay
a
failure trace against them under every policy with the pure simulator, store the report.

``do_request_simulation`` validates and stores the request and enqueues the job after commit;
``do_run_simulation`` claims a queued run (compare-and-swap), runs it and stores the outcome. The Celery
task is a thin wrapper around the latter.
"""

from __future__ import annotations

import logging
import math
import time
import traceback
from collections import Counter
from typing import Any

from celery import current_app
from django.db import transaction
from django.utils import timezone

from controlplane.apps.accounts.services import Actor, acting_user, do_record_audit
from controlplane.apps.common.broadcast import send_event_on_commit
from controlplane.apps.common.cas import swap_state
from controlplane.apps.common.errors import InvalidInput
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Device
from controlplane.apps.simulations.models import RUN_MACHINE, RunState, SimulationRun
from controlplane.apps.training.choices import TERMINAL_TASK_STATES
from controlplane.apps.training.models import TrainingTask
from controlplane.core.planning import DEVICE_KINDS
from controlplane.core.sim.api import SimulationRequest, simulate
from controlplane.core.sim.model import ClusterSpec, GPTModel, SimTask
from controlplane.core.sim.trace import NAMED_TRACES

RUN_SIMULATION = "simulations.run_simulation"
"""The Celery task that runs a requested simulation (:mod:`controlplane.apps.simulations.tasks`)."""

log = logging.getLogger(__name__)

MAX_DAYS = 60.0
USABLE_NODE_STATES = (NodeState.HEALTHY, NodeState.SUSPECT, NodeState.JOINING)


def _device_kind_name(kinds: Counter[str]) -> str:
    name = kinds.most_common(1)[0][0]
    if name in DEVICE_KINDS:
        return name
    if name.startswith("cpu"):
        return "cpu-slot"
    raise InvalidInput(
        {"cluster": [f"device kind {name!r} has no throughput model; known: {sorted(DEVICE_KINDS)}"]}
    )


def snapshot_cluster() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The live cluster and its unfinished tasks, as JSON for the run row (and for the simulator)."""
    devices = Device.objects.filter(node__state__in=USABLE_NODE_STATES, node__quarantined=False)
    per_node = Counter(devices.values_list("node_id", flat=True))
    if not per_node:
        raise InvalidInput({"cluster": ["no usable nodes: register agents before simulating the cluster"]})
    gpn = max(per_node.values())
    cluster: dict[str, Any] = {
        "nodes": len(per_node),
        "gpus_per_node": gpn,
        "device_kind": _device_kind_name(Counter(devices.values_list("kind", flat=True))),
    }
    tasks = []
    for task in TrainingTask.objects.exclude(state__in=TERMINAL_TASK_STATES).order_by("pk"):
        tasks.append(
            {
                "name": task.name,
                "layers": task.num_layers,
                "hidden": task.hidden_size,
                "heads": task.num_attention_heads,
                "seq_len": task.seq_length,
                "vocab": task.vocab_size,
                "global_batch": task.global_batch_size,
                "micro_batch": task.micro_batch_size,
                "weight": task.weight,
                "nodes": min(max(1, math.ceil(task.min_workers / gpn)), len(per_node)),
                "max_nodes": min(max(1, math.ceil(task.max_workers / gpn)), len(per_node)),
            }
        )
    if not tasks:
        raise InvalidInput({"tasks": ["no unfinished training tasks to simulate"]})
    return cluster, tasks


def build_request(run: SimulationRun) -> SimulationRequest:
    tasks = tuple(
        SimTask(
            t["name"],
            GPTModel(
                t["name"],
                layers=t["layers"],
                hidden=t["hidden"],
                heads=t["heads"],
                seq_len=t["seq_len"],
                vocab=t["vocab"],
                global_batch=t["global_batch"],
                micro_batch=t["micro_batch"],
            ),
            weight=t["weight"],
            nodes=t["nodes"],
            max_nodes=t["max_nodes"],
        )
        for t in run.tasks
    )
    return SimulationRequest(
        cluster=ClusterSpec(**run.cluster),
        tasks=tasks,
        trace=run.trace,
        seed=run.seed,
        duration_s=run.days * 86_400.0,
    )


def check_request_simulation(trace: str, days: float) -> None:
    errors: dict[str, list[str]] = {}
    if trace not in NAMED_TRACES:
        errors["trace"] = [f"unknown trace {trace!r}; known: {', '.join(sorted(NAMED_TRACES))}"]
    if not 0 < days <= MAX_DAYS:
        errors["days"] = [f"must be in (0, {MAX_DAYS:g}]"]
    if errors:
        raise InvalidInput(errors)


def run_payload(run: SimulationRun) -> dict[str, Any]:
    return {"id": run.pk, "trace": run.trace, "state": run.state, "progress": run.progress}


def do_request_simulation(actor: Actor, trace: str, days: float, seed: int | None = None) -> SimulationRun:
    check_request_simulation(trace, days)
    cluster, tasks = snapshot_cluster()
    with transaction.atomic():
        run = SimulationRun.objects.create(
            requested_by=acting_user(actor), trace=trace, days=days, seed=seed, cluster=cluster, tasks=tasks
        )
        do_record_audit(actor, "request_simulation", run, after={"trace": trace, "days": days, "seed": seed})
        send_event_on_commit("simulation", run_payload(run))
        run_id = run.pk
        transaction.on_commit(lambda: current_app.send_task(RUN_SIMULATION, args=[run_id]))
    return run


def do_run_simulation(run_id: int) -> SimulationRun:
    """Claim a queued run and execute it; a run already claimed by another worker is left alone."""
    swap_state(
        SimulationRun, run_id, RUN_MACHINE, RunState.QUEUED, RunState.RUNNING, started_at=timezone.now()
    )
    run = SimulationRun.objects.get(pk=run_id)

    policies = build_request(run).policies
    last_write = [0.0]

    def progress(policy: str, fraction: float) -> None:
        # overall fraction across policies, written at most twice a second (the hot loop calls this often)
        now = time.monotonic()
        if now - last_write[0] < 0.5:
            return
        last_write[0] = now
        done = policies.index(policy) if policy in policies else 0
        overall = (done + fraction) / max(len(policies), 1)
        SimulationRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(progress=round(overall, 3))

    try:
        report = simulate(build_request(run), progress=progress)
        result: dict[str, Any] = {"state": RunState.SUCCEEDED, "report": report.to_dict(), "progress": 1.0}
    except Exception as exc:  # the run row records every failure: a job never dies silently
        log.exception("simulation %s failed", run_id)
        result = {"state": RunState.FAILED, "error": "".join(traceback.format_exception_only(exc)).strip()}
    with transaction.atomic():
        swap_state(
            SimulationRun,
            run_id,
            RUN_MACHINE,
            RunState.RUNNING,
            result.pop("state"),
            finished_at=timezone.now(),
            **result,
        )
        run.refresh_from_db()
        send_event_on_commit("simulation", run_payload(run))
    return run

"""Realistic demo data for the dashboard (screenshots, browser tests, local demos).

Everything is written through the domain services (the same write path the self-healing loop uses),
then history is moved into the past with plain updates so the charts and timelines have an hour of
data. Backdating is the only thing here that bypasses a service: services stamp ``now``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from controlplane.apps.accounts.roles import Role
from controlplane.apps.accounts.services import do_set_user_role
from controlplane.apps.fleet.choices import NodeState
from controlplane.apps.fleet.models import Device, Node
from controlplane.apps.fleet.services import (
    DeviceSpec,
    do_quarantine_node,
    do_register_node,
    do_set_node_state,
)
from controlplane.apps.incidents.choices import Action, Detector, Severity
from controlplane.apps.incidents.models import Alert, FailureEvent
from controlplane.apps.incidents.services import (
    FailureReport,
    do_acknowledge_alert,
    do_raise_alert,
    do_record_failure_event,
    do_resolve_alert,
)
from controlplane.apps.metrics.choices import MetricKind
from controlplane.apps.metrics.selectors import get_goodput
from controlplane.apps.metrics.services import Sample, do_record_samples
from controlplane.apps.planning.choices import PlanTrigger, StepState, TransitionState
from controlplane.apps.planning.models import Plan, Transition, TransitionStep
from controlplane.apps.planning.services import (
    PlanRecord,
    do_create_transition,
    do_record_plan,
    do_set_step_state,
    do_set_transition_state,
)
from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.services import (
    Placement,
    TaskSubmission,
    do_allocate_devices,
    do_release_devices,
    do_set_task_state,
    do_submit_task,
)

GB = 1024**3
DEMO_PASSWORD = "unicron-demo"
STEP_NAMES = ["stop_workers", "migrate_state", "start_workers", "first_iteration"]
STACK = """Thread 0x7f3a2b7fe640 (most recent call first):
  File "torch/distributed/distributed_c10d.py", line 2501 in all_reduce
  File "megatron/core/distributed/param_and_grad_buffer.py", line 412 in finish_grad_sync
  File "megatron/core/distributed/distributed_data_parallel.py", line 301 in finish_grad_sync
  File "megatron/core/pipeline_parallel/schedules.py", line 471 in forward_backward_no_pipelining
  File "agents/training/worker.py", line 188 in train_step
  File "agents/training/worker.py", line 241 in main"""

# Text in the format of controlplane.core.planning.planner.Plan.explain() (the Plan model has no field
# for it yet, so it rides in input_snapshot["explanation"]).
EXPLAIN_SUBMIT = "\n".join(
    [
        "dp: 30/32 workers used, expected WAF 6.12 PFLOP/s over D_running=3600s, "
        "transition cost 0.00 weighted TFLOP, moved 0 workers",
        "  gpt-7b-pretrain: 0 -> 16 workers [tp=8 pp=1 dp=2 mb=1], WAF 3.95 PFLOP/s",
        "  gpt-1.3b-code: 0 -> 10 workers [tp=1 pp=1 dp=10 mb=4], WAF 1.57 PFLOP/s",
        "  gpt-350m-sft: 0 -> 4 workers [tp=1 pp=1 dp=4 mb=4], WAF 0.31 PFLOP/s",
    ]
)
EXPLAIN_FAILURE = "\n".join(
    [
        "dp: 24/24 workers used, expected WAF 5.02 PFLOP/s over D_running=2870s, "
        "transition cost 41.3 weighted TFLOP, moved 6 workers",
        "  gpt-7b-pretrain: 16 -> 16 workers [tp=8 pp=1 dp=2 mb=1], WAF 3.95 PFLOP/s; "
        "marginal WAF per unit: +1 unit n/a, -1 unit 1.98 TFLOP/s",
        "  gpt-1.3b-code: 10 -> 6 workers [tp=1 pp=1 dp=6 mb=4], WAF 0.94 PFLOP/s; "
        "marginal WAF per unit: +1 unit 0.157, -1 unit 0.157 TFLOP/s",
        "  gpt-350m-sft: 4 -> 2 workers [tp=1 pp=1 dp=2 mb=4], WAF 0.16 PFLOP/s; "
        "marginal WAF per unit: +1 unit 0.039, -1 unit 0.078 TFLOP/s",
        "node-c (8 devices) isolated: the two smaller tasks shrink; "
        "the 7B task (weight 2.0) keeps its 16 workers.",
    ]
)


@dataclass
class DemoCluster:
    users: dict[str, AbstractBaseUser] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    tasks: list[TrainingTask] = field(default_factory=list)


def ensure_user(username: str, role: Role) -> AbstractBaseUser:
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=username)
    if created or not user.has_usable_password():
        user.set_password(DEMO_PASSWORD)
        user.save()
    do_set_user_role(None, user, role)
    return user


def seed_users() -> dict[str, AbstractBaseUser]:
    return {
        name: ensure_user(name, role)
        for name, role in [("admin", Role.ADMIN), ("operator", Role.OPERATOR), ("viewer", Role.VIEWER)]
    }


def seed_nodes(count: int = 4, devices_per_node: int = 8, kind: str = "a100-80g") -> list[Node]:
    nodes = []
    for i in range(count):
        specs = [DeviceSpec(j, kind, 80 * GB) for j in range(devices_per_node)]
        node, _token = do_register_node(None, f"node-{chr(ord('a') + i)}", f"10.0.0.{11 + i}", specs)
        node = do_set_node_state(node, NodeState.HEALTHY, "demo: agent joined")
        Node.objects.filter(pk=node.pk).update(last_heartbeat_at=timezone.now(), agent_version="0.1.0")
        nodes.append(node)
    return nodes


def submit(
    actor: AbstractBaseUser, name: str, layers: int, hidden: int, heads: int, **kw: Any
) -> TrainingTask:
    s = TaskSubmission(
        name=name,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        seq_length=kw.pop("seq_length", 2048),
        vocab_size=50257,
        global_batch_size=kw.pop("global_batch_size", 512),
        micro_batch_size=kw.pop("micro_batch_size", 4),
        **kw,
    )
    return do_submit_task(actor, s)


def start_task(task: TrainingTask, devices: list[Device]) -> TrainingTask:
    do_allocate_devices(task, [Placement(device_id=d.pk, rank=r, dp_rank=r) for r, d in enumerate(devices)])
    return do_set_task_state(task, TaskState.RUNNING)


def _devices(nodes: list[Node]) -> list[Device]:
    return list(Device.objects.filter(node__in=nodes).order_by("node__name", "index"))


def _backdate_failure(event: FailureEvent, at: datetime, latency_s: float) -> None:
    FailureEvent.objects.filter(pk=event.pk).update(
        occurred_at=at - timedelta(seconds=latency_s), detected_at=at
    )


def _record_transition(
    plan: Plan,
    task: TrainingTask,
    old: int,
    new: int,
    at: datetime,
    phases: list[float],
    sources: dict[str, str],
    lost_mb: int,
) -> Transition:
    t = do_create_transition(plan, task, STEP_NAMES, old, new)
    t = do_set_transition_state(t, TransitionState.RUNNING)
    for step in t.steps.order_by("order"):
        step = do_set_step_state(step, StepState.RUNNING)
        do_set_step_state(step, StepState.DONE)
    t = do_set_transition_state(
        t,
        TransitionState.COMPLETED,
        migration_sources=sources,
        lost_microbatches=lost_mb,
        lost_work_s=lost_mb * 0.31,
    )
    cursor = at
    for step, dur in zip(t.steps.order_by("order"), phases, strict=True):
        TransitionStep.objects.filter(pk=step.pk).update(
            started_at=cursor, finished_at=cursor + timedelta(seconds=dur)
        )
        cursor += timedelta(seconds=dur)
    Transition.objects.filter(pk=t.pk).update(created_at=at, started_at=at, finished_at=cursor)
    TrainingTask.objects.filter(pk=task.pk).update(epoch=t.epoch)
    return t


@transaction.atomic
def seed_demo(now: datetime | None = None, with_history: bool = True) -> DemoCluster:
    """Users, 4 nodes x 8 GPUs, three running tasks, an hour of metrics, failures, alerts and plans."""
    now = now or timezone.now()
    demo = DemoCluster(users=seed_users())
    operator = demo.users["operator"]
    demo.nodes = seed_nodes()
    devs = _devices(demo.nodes)
    big = submit(
        operator,
        "gpt-7b-pretrain",
        32,
        4096,
        32,
        weight=2.0,
        min_workers=8,
        max_workers=16,
        allocation_unit=8,
        micro_batch_size=1,
        global_batch_size=1024,
    )
    mid = submit(
        operator, "gpt-1.3b-code", 24, 2048, 16, weight=1.0, min_workers=2, max_workers=12, allocation_unit=2
    )
    small = submit(operator, "gpt-350m-sft", 24, 1024, 16, weight=0.5, min_workers=1, max_workers=8)
    start_task(big, devs[0:16])
    start_task(mid, devs[16:26])
    start_task(small, devs[26:30])
    demo.tasks = [big, mid, small]
    if with_history:
        _seed_history(demo, now)
    return demo


def _seed_history(demo: DemoCluster, now: datetime) -> None:
    big, mid, small = demo.tasks
    node_c = demo.nodes[2]
    # -- failures: a transient one, a process crash, a lost node that triggered a re-plan ---------
    f1, _ = do_record_failure_event(
        FailureReport(
            Detector.EXCEPTION_PROPAGATION,
            "connection_reset",
            Severity.SEV3,
            now,
            Action.RETRY_IN_PLACE,
            "gloo: Connection reset by peer during all_reduce; retried in place.",
            {"exception": "RuntimeError", "message": "Connection reset by peer", "rank": 5},
            node=demo.nodes[0],
            task=big,
        )
    )
    _backdate_failure(f1, now - timedelta(minutes=52), 0.42)
    f2, _ = do_record_failure_event(
        FailureReport(
            Detector.PROCESS_SUPERVISION,
            "worker_exited",
            Severity.SEV2,
            now,
            Action.RESTART_PROCESSES,
            "Rank 3 exited with signal 9 (OOM killer).",
            {"exit_code": -9, "signal": "SIGKILL", "rank": 3, "rss_bytes": 71_203_000_000},
            node=demo.nodes[3],
            device=Device.objects.get(node=demo.nodes[3], index=1),
            task=mid,
        )
    )
    _backdate_failure(f2, now - timedelta(minutes=38), 0.61)
    f3, _ = do_record_failure_event(
        FailureReport(
            Detector.STATISTICAL_MONITORING,
            "hang",
            Severity.SEV1,
            now,
            Action.ISOLATE_AND_REPLAN,
            "Iteration 4312 exceeded 3x median (1.9 s) on node-c; NCCL all_reduce stuck; Xid 79 in dmesg.",
            {
                "iteration": 4312,
                "elapsed_s": 7.4,
                "threshold_s": 5.7,
                "median_s": 1.9,
                "xid": 79,
                "stack": STACK,
            },
            node=node_c,
            device=Device.objects.get(node=node_c, index=2),
            task=mid,
        )
    )
    _backdate_failure(f3, now - timedelta(minutes=21), 5.9)
    # -- alerts ----------------------------------------------------------------------------------
    a1 = do_raise_alert(Severity.SEV3, "Transient network error on node-a (retried in place)", f1)
    do_acknowledge_alert(demo.users["operator"], a1, "Known switch firmware issue, tracked.")
    do_resolve_alert(demo.users["operator"], Alert.objects.get(pk=a1.pk), "No recurrence after 30 min.")
    a2 = do_raise_alert(Severity.SEV2, "Worker OOM-killed on node-d GPU 1 (task gpt-1.3b-code restarted)", f2)
    do_acknowledge_alert(demo.users["operator"], a2, "Looking at the micro-batch size.")
    do_raise_alert(Severity.SEV1, "node-c isolated after a hang with Xid 79; tasks re-planned", f3)
    do_quarantine_node(None, node_c, "Xid 79 (GPU fell off the bus)")
    for a, at in [(a1, 52), (a2, 38)]:
        Alert.objects.filter(pk=a.pk).update(created_at=now - timedelta(minutes=at))
    Alert.objects.filter(source_event=f3).update(created_at=now - timedelta(minutes=21))
    Alert.objects.filter(pk=a1.pk).update(
        acknowledged_at=now - timedelta(minutes=50), resolved_at=now - timedelta(minutes=20)
    )
    Alert.objects.filter(pk=a2.pk).update(acknowledged_at=now - timedelta(minutes=35))
    # -- plans and transitions ---------------------------------------------------------------------
    p0 = do_record_plan(
        PlanRecord(
            PlanTrigger.TASK_SUBMITTED,
            {"explanation": EXPLAIN_SUBMIT},
            [
                {
                    "task": big.pk,
                    "old_workers": 0,
                    "new_workers": 16,
                    "old_config": None,
                    "new_config": {"tp": 8, "pp": 1, "dp": 2, "micro_batch": 1},
                },
                {
                    "task": mid.pk,
                    "old_workers": 0,
                    "new_workers": 10,
                    "old_config": None,
                    "new_config": {"tp": 1, "pp": 1, "dp": 10, "micro_batch": 4},
                },
                {
                    "task": small.pk,
                    "old_workers": 0,
                    "new_workers": 4,
                    "old_config": None,
                    "new_config": {"tp": 1, "pp": 1, "dp": 4, "micro_batch": 4},
                },
            ],
            6.12e15,
            0.0,
            3600.0,
            3.8,
        )
    )
    p1 = do_record_plan(
        PlanRecord(
            PlanTrigger.FAILURE,
            {"explanation": EXPLAIN_FAILURE},
            [
                {
                    "task": big.pk,
                    "old_workers": 16,
                    "new_workers": 16,
                    "old_config": {"tp": 8, "pp": 1, "dp": 2, "micro_batch": 1},
                    "new_config": {"tp": 8, "pp": 1, "dp": 2, "micro_batch": 1},
                },
                {
                    "task": mid.pk,
                    "old_workers": 10,
                    "new_workers": 6,
                    "old_config": {"tp": 1, "pp": 1, "dp": 10, "micro_batch": 4},
                    "new_config": {"tp": 1, "pp": 1, "dp": 6, "micro_batch": 4},
                },
                {
                    "task": small.pk,
                    "old_workers": 4,
                    "new_workers": 2,
                    "old_config": {"tp": 1, "pp": 1, "dp": 4, "micro_batch": 4},
                    "new_config": {"tp": 1, "pp": 1, "dp": 2, "micro_batch": 4},
                },
            ],
            5.02e15,
            4.13e13,
            2870.0,
            0.41,
            failure_event=f3,
        )
    )
    t_mid = now - timedelta(minutes=21) + timedelta(seconds=6)
    _record_transition(
        p1,
        mid,
        10,
        6,
        t_mid,
        [1.2, 3.4, 4.1, 2.2],
        {str(r): "dp_peer" if r < 4 else "local_snapshot" for r in range(6)},
        3,
    )
    _record_transition(
        p1,
        small,
        4,
        2,
        t_mid + timedelta(seconds=1),
        [0.8, 1.1, 2.9, 0.7],
        {"0": "own_device", "1": "dp_peer"},
        1,
    )
    Plan.objects.filter(pk=p0.pk).update(created_at=now - timedelta(minutes=60))
    Plan.objects.filter(pk=p1.pk).update(created_at=now - timedelta(minutes=21) + timedelta(seconds=6))
    # reflect the plan in the allocations: node-c's devices are freed; mid and small shrink
    node_d = [d for d in _devices(demo.nodes) if d.node_id == demo.nodes[3].pk]
    do_release_devices(small)
    do_allocate_devices(
        mid, [Placement(device_id=d.pk, rank=r, dp_rank=r) for r, d in enumerate(node_d[0:6])]
    )
    do_allocate_devices(
        small, [Placement(device_id=d.pk, rank=r, dp_rank=r) for r, d in enumerate(node_d[6:8])]
    )
    _seed_metrics(demo, now)


def _seed_metrics(demo: DemoCluster, now: datetime) -> None:
    """An hour of samples that obey the definitions the live sampler uses (metrics.tasks): each task's
    achieved FLOP/s, cluster WAF = Σ w·FLOP/s, the healthy-cluster optimum (drops when node-c is
    quarantined), iteration counters that stall while a task is detected and reconfigured, and the
    rolling goodput computed from them by the same SQL."""
    big, mid, small = demo.tasks
    samples: list[Sample] = []
    start = now - timedelta(minutes=60)
    fail_at = now - timedelta(minutes=21)
    crash_at = now - timedelta(minutes=38)
    step_s = 15
    # (task, iteration time s, tokens/s, achieved FLOP/s before / after the re-plan) per the plans' WAF
    rates = [
        (big, 2.61, 400_000, 1.975e15, 1.975e15),
        (mid, 1.9, 550_000, 1.57e15, 0.94e15),
        (small, 0.48, 270_000, 0.62e15, 0.32e15),
    ]
    iterations = {t.pk: 0.0 for t in demo.tasks}
    for i in range(0, 3600, step_s):
        at = start + timedelta(seconds=i)
        wobble = 1 + 0.015 * math.sin(i / 97) + 0.01 * math.sin(i / 23)
        after_loss = at >= fail_at
        waf = 0.0
        for task, it, tok, flops_before, flops_after in rates:
            stalled = (task in (mid, small) and fail_at <= at < fail_at + timedelta(seconds=20)) or (
                task is mid and crash_at <= at < crash_at + timedelta(seconds=15)
            )
            t_iter = it * (1 + 0.04 * math.sin(i / 41 + task.pk))
            if task is mid and fail_at - timedelta(seconds=8) <= at < fail_at:
                t_iter = 7.4  # the hang the statistical monitor caught
            flops = 0.0 if stalled else (flops_after if after_loss else flops_before) * 0.93 * wobble
            waf += task.weight * flops
            if not stalled:
                iterations[task.pk] += step_s / t_iter
            done = int(iterations[task.pk])
            scale = flops / (flops_before * 0.93) if flops_before else 0.0
            samples.append(Sample(MetricKind.ITERATION_TIME, t_iter, at, task.pk, done))
            samples.append(Sample(MetricKind.TOKENS_PER_S, tok * scale, at, task.pk, done))
            samples.append(Sample(MetricKind.ACHIEVED_FLOPS, flops, at, task.pk, done))
        samples.append(Sample(MetricKind.CLUSTER_WAF, waf, at))
        samples.append(Sample(MetricKind.OPTIMAL_WAF, 5.02e15 if after_loss else 6.12e15, at))
    do_record_samples(samples)
    goodput = []
    for i in range(60, 3600, step_s):
        at = start + timedelta(seconds=i)
        ratio = get_goodput(at - timedelta(seconds=60), at).ratio
        if ratio is not None:
            goodput.append(Sample(MetricKind.GOODPUT, min(ratio, 1.0), at))
    do_record_samples(goodput)
    for task in demo.tasks:
        TrainingTask.objects.filter(pk=task.pk).update(iteration=int(iterations[task.pk]))

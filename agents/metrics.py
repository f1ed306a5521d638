"""The agent's own Prometheus metrics, on ``UNICRON_AGENT_METRICS_ADDR``:``UNICRON_AGENT_METRICS_PORT``.

Off by default (port unset or 0). When on, ``prometheus_client.start_http_server`` serves this agent's
registry (no process-wide default registry) from a thread of the agent process. Figures:

- ``unicron_agent_warm_spares_ready``, ``unicron_agent_warm_spares``: spare worker processes ready to
  take a rank, and all kept (starting or ready);
- ``unicron_agent_workers_running``: worker processes (or simulated ranks) that have not exited;
- ``unicron_agent_worker_info``: 1 for each of them, labelled with its task, epoch, rank, device and
  state (what the node runs, to hold against what the control plane allocated to it);
- ``unicron_agent_snapshot_bytes``, ``unicron_agent_snapshots``: in-memory snapshots the node holds;
- ``unicron_agent_outbox_messages``: reports and acks not yet confirmed by the coordinator;
- ``unicron_agent_link_connected``: 1 while the WebSocket link to the coordinator is up;
- ``unicron_agent_hook_report_delay_seconds`` (histogram): from the moment a worker stamped a hook
  event (``t``) to the supervisor handling it (the worker → agent Unix-socket report delay);
- ``unicron_agent_heartbeat_send_lag_seconds`` (histogram): how late each heartbeat left against its
  1 s schedule (the agent's event loop was busy);
- ``unicron_agent_heartbeat_round_trip_seconds`` (histogram): heartbeat sent → the coordinator's pong.

Gauges are sampled in the agent's event loop every second (the HTTP thread never touches the
supervisor's dictionaries); histograms are observed where the values are produced. Every series has
a ``node`` label.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge, Histogram, start_http_server

from agents.settings import ENV_METRICS_ADDR, ENV_METRICS_PORT, MetricsEndpoint

SAMPLE_PERIOD_S = 1.0

HOOK_DELAY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
HEARTBEAT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True)
class AgentFigures:
    """One reading of the agent's state, taken in its event loop."""

    spares_ready: int
    spares: int
    workers_running: int
    snapshots: int
    snapshot_bytes: int
    outbox_messages: int
    link_connected: bool
    workers: frozenset[tuple[str, str, str, str, str]] = frozenset()
    """The running workers as (task, epoch, rank, device, state)."""


class AgentMetrics:
    """The agent's metric families in their own registry."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.registry = CollectorRegistry()
        r, labels = self.registry, ("node",)
        self._spares_ready = Gauge(
            "unicron_agent_warm_spares_ready",
            "Warm spare worker processes ready to take a rank.",
            labels,
            registry=r,
        ).labels(node)
        self._spares = Gauge(
            "unicron_agent_warm_spares",
            "Warm spare worker processes kept (starting or ready, not yet handed out).",
            labels,
            registry=r,
        ).labels(node)
        self._workers = Gauge(
            "unicron_agent_workers_running",
            "Worker processes (or simulated ranks) of this node that have not exited.",
            labels,
            registry=r,
        ).labels(node)
        self._worker_info = Gauge(
            "unicron_agent_worker_info",
            "1 for each worker of this node that has not exited, by task, epoch, rank, device and state.",
            ("node", "task", "epoch", "rank", "device", "state"),
            registry=r,
        )
        self._worker_labels: frozenset[tuple[str, str, str, str, str]] = frozenset()
        self._snapshots = Gauge(
            "unicron_agent_snapshots", "In-memory snapshots this node holds.", labels, registry=r
        ).labels(node)
        self._snapshot_bytes = Gauge(
            "unicron_agent_snapshot_bytes",
            "Bytes of the in-memory snapshots this node holds (its own and peers' replicas).",
            labels,
            registry=r,
        ).labels(node)
        self._outbox = Gauge(
            "unicron_agent_outbox_messages",
            "Reports and acks not yet confirmed by the coordinator.",
            labels,
            registry=r,
        ).labels(node)
        self._connected = Gauge(
            "unicron_agent_link_connected",
            "1 while the agent's WebSocket link to the coordinator is up.",
            labels,
            registry=r,
        ).labels(node)
        self._hook_delay = Histogram(
            "unicron_agent_hook_report_delay_seconds",
            "Delay from a worker stamping a hook event to the agent's supervisor handling it.",
            labels,
            buckets=HOOK_DELAY_BUCKETS,
            registry=r,
        ).labels(node)
        self._heartbeat_lag = Histogram(
            "unicron_agent_heartbeat_send_lag_seconds",
            "How late each heartbeat was sent against its schedule.",
            labels,
            buckets=HEARTBEAT_BUCKETS,
            registry=r,
        ).labels(node)
        self._heartbeat_rtt = Histogram(
            "unicron_agent_heartbeat_round_trip_seconds",
            "Heartbeat sent to the coordinator's pong received.",
            labels,
            buckets=HEARTBEAT_BUCKETS,
            registry=r,
        ).labels(node)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # --- where values are produced --------------------------------------------------------------
    def observe_hook_delay(self, seconds: float) -> None:
        self._hook_delay.observe(max(seconds, 0.0))

    def observe_heartbeat(self, lag_s: float, round_trip_s: float) -> None:
        self._heartbeat_lag.observe(max(lag_s, 0.0))
        self._heartbeat_rtt.observe(max(round_trip_s, 0.0))

    def update(self, f: AgentFigures) -> None:
        self._spares_ready.set(f.spares_ready)
        self._spares.set(f.spares)
        self._workers.set(f.workers_running)
        for gone in self._worker_labels - f.workers:  # series removed one by one: a scrape sees no gap
            self._worker_info.remove(self.node, *gone)
        for labels in f.workers - self._worker_labels:
            self._worker_info.labels(self.node, *labels).set(1)
        self._worker_labels = f.workers
        self._snapshots.set(f.snapshots)
        self._snapshot_bytes.set(f.snapshot_bytes)
        self._outbox.set(f.outbox_messages)
        self._connected.set(1 if f.link_connected else 0)

    async def sample_every(self, read: Callable[[], AgentFigures], period_s: float = SAMPLE_PERIOD_S) -> None:
        """Refresh the gauges from ``read`` (called in the event loop) until cancelled."""
        while True:
            self.update(read())
            await asyncio.sleep(period_s)

    # --- the endpoint ---------------------------------------------------------------------------
    def serve(self, endpoint: MetricsEndpoint) -> None:
        try:
            self._server, self._thread = start_http_server(
                endpoint.port, addr=endpoint.host, registry=self.registry
            )
        except OSError as exc:
            raise RuntimeError(
                f"{ENV_METRICS_PORT}={endpoint.port} / {ENV_METRICS_ADDR}={endpoint.host}: "
                f"cannot listen: {exc}"
            ) from exc

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

"""``python -m agents --coordinator URL --token TOKEN --devices N [--worker megatron|sim]``.

In-memory snapshots (:mod:`agents.snapshots`): the agent serves its snapshot store to peers on
``--snapshot-host``:``--snapshot-port`` (default 127.0.0.1 and any free port; bind 0.0.0.0 and set
``--snapshot-advertise`` on a real cluster) and keeps it under ``--snapshot-dir`` (default
``/dev/shm/unicron-snapshots-<node>``, with a hash of ``--run-dir`` appended when one is given, so
that two deployments with the same node name never share snapshots). The store runs in the agent's
event loop and its directory is handed to the workers through their environment.

Snapshot transfers between agents are authenticated per task (:mod:`agents.snapshots`); the agent
creates everything with umask 077 (snapshot files 0600, directories 0700), and refuses a received
snapshot larger than ``UNICRON_SNAPSHOT_MAX_BYTES`` (unset: the free space of the snapshot filesystem)
or than twice the largest it holds of that task.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from pathlib import Path

from agents.agent import Agent, AgentConfig
from agents.monitor import MonitorConfig
from agents.settings import ENV_AGENT_TOKEN, ENV_STRAGGLER_RATIO, AgentSettings
from agents.snapshots import SnapshotStore, SnapshotStoreConfig, default_root
from controlplane.core.env import env_str


def _straggler_ratio(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"straggler ratio {raw!r} is not a number") from None
    if not value > 1.0:
        raise argparse.ArgumentTypeError(f"straggler ratio must be > 1 (slower than peers by), got {raw}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agents", description="Unicron node agent")
    p.add_argument("--coordinator", required=True, help="WebSocket URL, e.g. ws://host:8000/ws/agent/")
    p.add_argument(
        "--token",
        help=f"node token (default: ${ENV_AGENT_TOKEN} or ${ENV_AGENT_TOKEN}_FILE; or --token-file)",
    )
    p.add_argument("--token-file", type=Path, help="read the node token from this file")
    p.add_argument("--devices", type=int, required=True, help="devices (GPUs or CPU slots) to offer")
    p.add_argument("--worker", choices=["megatron", "sim"], default="megatron")
    p.add_argument("--node", default=socket.gethostname(), help="node name (default: hostname)")
    p.add_argument("--run-dir", type=Path, help="sockets, worker logs, stack dumps (default: a temp dir)")
    p.add_argument("--hang-floor", type=float, default=MonitorConfig.hang_floor_s, help="seconds")
    p.add_argument(
        "--straggler-ratio",
        type=_straggler_ratio,
        default=env_str(ENV_STRAGGLER_RATIO, str(MonitorConfig.straggler_ratio)),
        help="a rank whose median compute time exceeds its local peers' by this factor for "
        f"{MonitorConfig.straggler_persistence} iterations is a straggler "
        "(default: $UNICRON_STRAGGLER_RATIO or %(default)s)",
    )
    p.add_argument("--log-level", default="INFO")
    snap = p.add_argument_group("in-memory snapshots")
    snap.add_argument(
        "--snapshot-dir", type=Path, help="tmpfs directory (default: /dev/shm/unicron-snapshots-NODE)"
    )
    snap.add_argument("--snapshot-host", default="127.0.0.1", help="bind address of the peer snapshot server")
    snap.add_argument(
        "--snapshot-port", type=int, default=0, help="port of the peer snapshot server (0: any)"
    )
    snap.add_argument("--snapshot-advertise", help="host peers dial (default: --snapshot-host)")
    snap.add_argument("--snapshot-timeout", type=float, default=30.0, help="seconds per network step")
    snap.add_argument("--no-snapshots", action="store_true", help="no snapshot store and server")
    return p


def snapshot_config(args: argparse.Namespace, max_bytes: int | None) -> SnapshotStoreConfig:
    root = args.snapshot_dir
    if root is None and args.run_dir is not None:
        root = default_root(args.node, instance=str(args.run_dir.resolve()))
    return SnapshotStoreConfig(
        root=root,
        host=args.snapshot_host,
        port=args.snapshot_port,
        advertise_host=args.snapshot_advertise,
        timeout_s=args.snapshot_timeout,
        enabled=not args.no_snapshots,
        max_bytes=max_bytes,
    )


async def run_agent(cfg: AgentConfig, snapshots: SnapshotStoreConfig) -> None:
    """The agent and its snapshot store in one loop: workers get the store's directory, the agent
    lists its snapshots in Hello/Heartbeat and fetches peers' copies before transitions.

    SIGTERM or SIGINT stops it whole: the workers and everything they started, the spares and the
    zygote, and the snapshot store with the snapshots it held (a peer could no longer fetch them)."""
    log = logging.getLogger("agents.cli")
    store = SnapshotStore(cfg.node, snapshots) if snapshots.enabled else None
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    stopping: list[signal.Signals] = []

    def stop(sig: signal.Signals) -> None:
        if not stopping:
            log.info("%s: stopping the workers, the spares and the snapshot store", sig.name)
            stopping.append(sig)
            main.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig)
    try:
        if store is not None:
            await store.start()
            cfg.worker_env.update(store.worker_env())
            log.info("snapshot store %s serving on %s", store.root, store.endpoint)
        await Agent(cfg, snapshots=store).run()
    except asyncio.CancelledError:
        if not stopping:
            raise
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if store is not None:
            await store.close()


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:  # every UNICRON_* variable the agent and its workers read: a bad one is named, nothing starts
        settings = AgentSettings.from_env()
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    token = args.token or settings.token
    if args.token_file is not None:
        token = args.token_file.read_text().strip()
    if not token:
        raise SystemExit(f"no token: pass --token, --token-file or set {ENV_AGENT_TOKEN}")
    os.umask(0o077)  # snapshots hold a task's full model state: readable by this user only
    snapshots = snapshot_config(args, settings.snapshot_max_bytes)
    if args.run_dir is not None:
        args.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = AgentConfig(
        coordinator=args.coordinator,
        token=token,
        devices=args.devices,
        worker_kind=args.worker,
        node=args.node,
        monitor=MonitorConfig(hang_floor_s=args.hang_floor, straggler_ratio=args.straggler_ratio),
        run_dir=args.run_dir,
        spares=settings.spares,
        spare_zygote=settings.spare_zygote,
        metrics=settings.metrics,
    )
    asyncio.run(run_agent(cfg, snapshots))

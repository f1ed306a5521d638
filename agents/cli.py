"""``python -m agents --coordinator URL --token TOKEN --devices N [--worker megatron|sim]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
from pathlib import Path

from agents.agent import Agent, AgentConfig
from agents.monitor import MonitorConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m agents", description="Unicron node agent")
    p.add_argument("--coordinator", required=True, help="WebSocket URL, e.g. ws://host:8000/ws/agent/")
    p.add_argument(
        "--token",
        default=os.environ.get("UNICRON_AGENT_TOKEN"),
        help="node token (default: $UNICRON_AGENT_TOKEN; or --token-file)",
    )
    p.add_argument("--token-file", type=Path, help="read the node token from this file")
    p.add_argument("--devices", type=int, required=True, help="devices (GPUs or CPU slots) to offer")
    p.add_argument("--worker", choices=["megatron", "sim"], default="megatron")
    p.add_argument("--node", default=socket.gethostname(), help="node name (default: hostname)")
    p.add_argument("--run-dir", type=Path, help="sockets, worker logs, stack dumps (default: a temp dir)")
    p.add_argument("--hang-floor", type=float, default=MonitorConfig.hang_floor_s, help="seconds")
    p.add_argument("--log-level", default="INFO")
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    token = args.token
    if args.token_file is not None:
        token = args.token_file.read_text().strip()
    if not token:
        raise SystemExit("no token: pass --token, --token-file or set UNICRON_AGENT_TOKEN")
    if args.run_dir is not None:
        args.run_dir.mkdir(parents=True, exist_ok=True)
    cfg = AgentConfig(
        coordinator=args.coordinator,
        token=token,
        devices=args.devices,
        worker_kind=args.worker,
        node=args.node,
        monitor=MonitorConfig(hang_floor_s=args.hang_floor),
        run_dir=args.run_dir,
    )
    asyncio.run(Agent(cfg).run())

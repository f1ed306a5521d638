"""Local drill CLI: inject a fault into a running agent without going through the coordinator.

``python -m agents.drill (--run-dir DIR | --socket PATH) --task T --kind hang --rank 1``
``[--at-iteration N] [--slowdown F]``

Talks to the agent's hook socket (``DIR/hook.sock``) and prints the agent's answer.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import get_args

from agents.training.hook_protocol import DrillAnswer, DrillRequest, encode
from controlplane.core.protocol import FaultKind, FaultSpec


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agents.drill")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--run-dir", type=Path, help="the agent's --run-dir (uses DIR/hook.sock)")
    where.add_argument("--socket", type=Path, help="the agent's hook socket")
    p.add_argument("--task")
    p.add_argument("--kind", choices=get_args(FaultKind), required=True)
    p.add_argument("--rank", type=int)
    p.add_argument("--at-iteration", type=int)
    p.add_argument("--slowdown", type=float, default=1.0)
    p.add_argument("--message", default="injected by drill CLI")
    args = p.parse_args(argv)
    fault = FaultSpec(
        kind=args.kind,
        rank=args.rank,
        at_iteration=args.at_iteration,
        slowdown=args.slowdown,
        message=args.message,
    )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(args.socket or args.run_dir / "hook.sock"))
        s.sendall(encode(DrillRequest(task_id=args.task, fault=fault)))
        answer = DrillAnswer.model_validate_json(s.makefile().readline())
    print(answer.detail)
    return 0 if answer.ok else 1


if __name__ == "__main__":
    sys.exit(main())

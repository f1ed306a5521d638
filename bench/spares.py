"""What replacing a used warm spare costs: forked from the agent's zygote vs a fresh process.

    .venv/bin/python bench/spares.py [--repeats 3]

A rank placed on a node runs in the node's warm spare (``agents.training.spare``), and the agent
replaces the spare. A fresh spare process imports torch and Megatron-Core itself, on the same cores
the training runs on; with the zygote (``UNICRON_SPARE_ZYGOTE``, :mod:`agents.training.zygote`) the
replacement is a fork of a process that imported them once. For each mode, in the same run, one real
agent (``python -m agents``, one CPU device, one spare) is given a one-rank task ``--repeats`` times;
each time the benchmark measures

- **CPU seconds** the replacement spare burnt until it was ready (user + system of the process,
  ``psutil``): the cost the training pays on a shared host;
- **ready after** (s): the spare's own figure, from its start (fork or exec) to ready;
- **refill latency** (s): from the start command's ack to the replacement listed ready in
  ``spares.json``. A fresh spare is started only after the new worker's first iteration (or 10 s) so its
  imports do not slow the transition; a fork starts at once.

Writes ``bench/results/spares.md``. Ratios are zygote / fresh process in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.settings import ENV_SPARE_ZYGOTE, ENV_SPARES  # noqa: E402
from agents.testing import TaskDriver, TestCoordinator, spawn_agent, wait_spare  # noqa: E402
from bench.transition import free_port, make_launch  # noqa: E402

RESULTS = REPO / "bench" / "results" / "spares.md"


def cpu_s(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


async def measure(mode: str, repeats: int, root: Path) -> list[dict[str, Any]]:
    env = {ENV_SPARES: "1", ENV_SPARE_ZYGOTE: "1" if mode == "zygote" else "0"}
    rows: list[dict[str, Any]] = []
    async with TestCoordinator(heartbeat_timeout_s=10) as c:
        run_dir = root / mode
        agent = await spawn_agent(c.url, mode, 1, run_dir, extra_env=env)
        try:
            await c.wait_for(lambda: c.messages("hello", mode), 120)
            used: set[int] = set()
            spare = await wait_spare(run_dir, timeout=180)
            for i in range(repeats):
                d = TaskDriver(c, task_id=f"{mode}-{i}")
                await d.start(mode, 1, make_launch(1, [0], free_port()))
                t0 = time.time()
                used.add(spare["pid"])
                spare = await wait_spare(run_dir, exclude=used, timeout=180)
                latency = time.time() - t0
                rows.append(
                    {
                        "mode": mode,
                        "origin": spare["origin"],
                        "cpu_s": cpu_s(spare["pid"]),
                        "ready_s": spare["ready_s"],
                        "latency_s": latency,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
                await d.wait_iteration(2, timeout=180)
                await d.stop(mode, 1, grace_s=1.0)
        finally:
            agent.kill()
            await agent.wait()
    return rows


def report(rows: list[dict[str, Any]], repeats: int) -> str:
    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in rows if r["mode"] == mode)

    lines = [
        "# Warm-spare refill: zygote fork vs fresh process",
        "",
        f"`OMP_NUM_THREADS=1 .venv/bin/python bench/spares.py --repeats {repeats}` "
        f"({time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores). Medians of {repeats} refills each.",
        "",
        "| | fresh process | zygote fork | zygote / fresh |",
        "|---|---|---|---|",
    ]
    for key, label in (
        ("cpu_s", "CPU seconds until ready"),
        ("ready_s", "ready after (s)"),
        ("latency_s", "refill latency (s)"),
    ):
        e, z = med("exec", key), med("zygote", key)
        lines.append(f"| {label} | {e:.3f} | {z:.3f} | {z / e:.3f} |")
    lines += [
        "",
        "Each refill:",
        "",
        "| mode | origin | CPU s | ready after s | latency s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['mode']} | {r['origin']} | {r['cpu_s']:.3f} | {r['ready_s']:.3f} | {r['latency_s']:.2f} |"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-spares-") as tmp:
        rows = []
        for mode in ("exec", "zygote"):
            rows += await measure(mode, args.repeats, Path(tmp))
    text = report(rows, args.repeats)
    args.out.write_text(text)
    print(text)
    with contextlib.suppress(Exception):
        print(f"written {args.out.relative_to(REPO)}")


if __name__ == "__main__":
    asyncio.run(main())

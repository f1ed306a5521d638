"""Iteration time of the real Megatron-Core worker per parallel config on this machine.

    .venv/bin/python bench/iteration.py [--iterations 60] [--skip 10] [--configs dp2,tp2,pp2,tp2dp2]

Each config runs the tiny GPT (2 layers, hidden 64, 4 heads, seq 32, vocab 128, micro-batch 2,
global batch 8) for ``--iterations`` iterations with one thread per worker, without the hook, and
reports the median and p90 wall time from one iteration start to the next over ranks, after
skipping the first ``--skip`` iterations. Writes ``bench/results/iteration.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from agents.training.launch import spawn_local  # noqa: E402
from controlplane.core.protocol import (  # noqa: E402
    ModelSpec,
    ParallelConfig,
    RankAssignment,
    Rendezvous,
    WorkerLaunch,
)

TINY = ModelSpec(layers=2, hidden=64, heads=4, seq_len=32, vocab=128, micro_batch=2, global_batch=8)
CONFIGS = {
    "dp2": ParallelConfig(tp=1, pp=1, dp=2),
    "tp2": ParallelConfig(tp=2, pp=1, dp=1),
    "pp2": ParallelConfig(tp=1, pp=2, dp=1),
    "tp2dp2": ParallelConfig(tp=2, pp=1, dp=2),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_launch(par: ParallelConfig, iterations: int) -> WorkerLaunch:
    world = par.world_size
    return WorkerLaunch(
        model=TINY,
        parallel=par,
        world_size=world,
        ranks=[RankAssignment(rank=r, device=r) for r in range(world)],
        rendezvous=Rendezvous(master_addr="127.0.0.1", master_port=free_port(), timeout_s=60),
        iterations=iterations,
        collective_timeout_s=60,
    )


def run_config(par: ParallelConfig, iterations: int, skip: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.jsonl"
        start = time.time()
        procs = spawn_local(
            "bench",
            0,
            make_launch(par, iterations),
            {"UNICRON_TIMING_FILE": str(timing), "PYTHONWARNINGS": "ignore"},
        )
        codes = [p.wait() for p in procs]
        wall = time.time() - start
        if any(codes):
            raise RuntimeError(f"workers failed: {codes}")
        rows = [json.loads(line) for line in timing.read_text().splitlines()]
    durs = sorted(r["dur"] for r in rows if r["it"] >= skip)
    return {
        "median_ms": 1000 * statistics.median(durs),
        "p90_ms": 1000 * durs[int(0.9 * (len(durs) - 1))],
        "samples": len(durs),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--skip", type=int, default=10)
    ap.add_argument("--configs", default="dp2,tp2,pp2,tp2dp2")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "iteration.md")
    args = ap.parse_args()
    os.environ["OMP_NUM_THREADS"] = "1"
    results = {}
    for name in args.configs.split(","):
        par = CONFIGS[name]
        res = run_config(par, args.iterations, args.skip)
        results[name] = (par, res)
        print(
            f"{name:8s} world={par.world_size} median={res['median_ms']:.1f} ms p90={res['p90_ms']:.1f} ms "
            f"({res['samples']} samples, {res['wall_s']:.1f} s incl. start-up)",
            flush=True,
        )
    lines = [
        "# Iteration time per parallel config (real Megatron-Core workers, CPU, gloo)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
        f"({os.cpu_count()} CPUs, shared with other work), torch {_torch_version()}, one thread per worker.",
        "Model: GPT 2 layers, hidden 64, 4 heads, seq 32, vocab 128; micro-batch 2, global batch 8;",
        "Megatron DDP + Adam, fp32, local layer spec. Without the hook. The global batch is fixed, so a",
        "replica runs 8 / (2 x DP) micro-batches: 4 at DP1 (tp2, pp2), 2 at DP2. Time = wall time from one",
        f"iteration start to the next, over all ranks, iterations >= {args.skip} of {args.iterations}.",
        "",
        f"Command: `.venv/bin/python bench/iteration.py --iterations {args.iterations} --skip {args.skip}`",
        "",
        "| config | workers | median (ms) | p90 (ms) | samples | wall incl. start-up (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, (par, res) in results.items():
        lines.append(
            f"| {name} (TP{par.tp}·PP{par.pp}·DP{par.dp}) | {par.world_size} | {res['median_ms']:.1f} | "
            f"{res['p90_ms']:.1f} | {res['samples']} | {res['wall_s']:.1f} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


if __name__ == "__main__":
    main()

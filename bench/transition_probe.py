"""Transition time with real Megatron workers under a real agent (docs/ARCHITECTURE.md §7.6;
docs/EVALUATION.md):
failure detection -> first completed iteration in the new configuration.

Scenarios (tiny GPT, gloo on CPU, one agent with 2 devices; the probe plays the coordinator and
sends its command as soon as the detection report arrives, so the coordinator's own decision time
is not included):

- ``shrink``: DP2, replica 1 SIGKILLed at an iteration start; Reconfigure to DP1 with the survivor
  kept in place (its partial gradients reused);
- ``restart_one``: the same failure; Reconfigure to DP2 with the survivor in place and a fresh
  process for rank 1 that takes its state from the survivor (``same_node``);
- ``grow``: a healthy DP1 task grows to DP2 at an iteration boundary (new rank from the live
  replica); measured from the command, there is no failure;
- ``baseline``: the same failure as ``shrink`` handled by stop everything / relaunch every process /
  load the newest dist_checkpointing checkpoint (no live state used; the rolled-back iterations are
  redone on top, shown as ``+redo``).

Warm spares (:mod:`agents.training.spare`): two agents run side by side in the same run, one with a
warm spare (``UNICRON_SPARES=1``, the default) and one without (``UNICRON_SPARES=0``).
``restart_one`` and ``grow`` run on both; the rows without a spare are named ``*_no_spares``.
``shrink`` starts no process (spare agent); ``baseline`` is torchrun-style, so it runs without spares.
On the spare agent each scenario waits until the agent's spare is ready before the failure (or the
grow) is triggered, so the crash fires at the first iteration start after that, not exactly at
iteration ``CRASH_AT``. ``--no-spares`` runs only the agent without a spare (the previous probe).

Start: ``detected_at`` of the first failure report the coordinator receives (the dead worker's exit
from process supervision, or the survivor's exception: whichever is first). End: the
TransitionReport's ``occurred_at`` of the last rank (sent when its first iteration completed).
Writes ``bench/results/transition_probe.json``.

    .venv/bin/python -m bench.transition_probe [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agents.settings import ENV_SPARES
from agents.testing import TaskDriver, TestCoordinator, spawn_agent, wait_spare
from agents.testing import spares as read_spares
from controlplane.core.protocol import (
    FaultSpec,
    ParallelConfig,
    StateSource,
    TransitionReport,
    WorkerLaunch,
    WorkerReport,
)
from tests.agents.helpers import launch

NODE = "probe"
"""The agent with a warm spare."""
COLD = "probe-cold"
"""The agent without spares."""
CRASH_AT = 30
RESULTS = Path(__file__).resolve().parent / "results" / "transition_probe.json"


def _first_failure(d: TaskDriver) -> float:
    reps = [r for _, r in d.events("exited", 1) if not getattr(r.event, "expected", True)]
    reps += [r for _, r in d.events("exception", 1)]
    return min(r.detected_at.timestamp() for r in reps)


def _done(reports: list[WorkerReport]) -> tuple[float, list[TransitionReport]]:
    events = [r.event for r in reports]
    assert all(isinstance(e, TransitionReport) for e in events)
    return max(r.occurred_at.timestamp() for r in reports), events  # type: ignore[return-value]


async def _failure_then(
    d: TaskDriver, node: str, spares: Path | None, ckpt: Path | None, handle: str
) -> tuple[float, list[TransitionReport], float]:
    first = launch(dp=2, iterations=10**6, timeout_s=30)
    if ckpt is not None:
        first = first.model_copy(update={"checkpoint_dir": str(ckpt), "checkpoint_interval": 20})
    await d.start(node, 1, first)
    if spares is not None:
        await wait_spare(spares)  # the start used the spare; its replacement must be ready
    await d.inject(node, 1, FaultSpec(kind="crash", rank=1, at_iteration=CRASH_AT))
    await d.c.wait_for(lambda: d.events("exception", 1), 120)
    t0 = _first_failure(d)
    prev = {"previous_epoch": 1, "previous_parallel": ParallelConfig(dp=2)}
    new: WorkerLaunch
    if handle == "shrink":
        new = launch(dp=1, iterations=10**6, timeout_s=30)
        await d.reconfigure(node, 2, new, survivors={0: 0}, **prev)  # type: ignore[arg-type]
        n = 1
    elif handle == "restart_one":
        new = launch(dp=2, iterations=10**6, timeout_s=30).model_copy(
            update={"state_sources": [StateSource(rank=1, kind="same_node", source_node=node, source_rank=0)]}
        )
        await d.reconfigure(node, 2, new, survivors={0: 0}, **prev)  # type: ignore[arg-type]
        n = 2
    else:  # baseline: everything stops, every process relaunches, state from the checkpoint
        assert ckpt is not None
        it = int((ckpt / "latest").read_text())
        new = launch(dp=2, iterations=10**6, timeout_s=30).model_copy(
            update={
                "checkpoint_dir": str(ckpt),
                "state_sources": [
                    StateSource(rank=r, kind="checkpoint", path=str(ckpt / f"iter_{it:07d}"), iteration=it)
                    for r in (0, 1)
                ],
            }
        )
        await d.reconfigure(node, 2, new, survivors={}, resume_iteration=CRASH_AT, **prev)  # type: ignore[arg-type]
        n = 2
    t1, reps = _done(await d.wait_events("transition", n, epoch=2, timeout=120))
    median = _median_iteration(d)
    await d.stop(node, 2, grace_s=1.0)
    return t1 - t0, reps, median


def _median_iteration(d: TaskDriver) -> float:
    meds = [float(getattr(r.event, "median_s", 0.0)) for _, r in d.events("iteration_stats", 1)]
    return statistics.median(meds) if meds else 0.0


async def _grow(d: TaskDriver, node: str, spares: Path | None) -> tuple[float, list[TransitionReport], float]:
    await d.start(node, 1, launch(dp=1, iterations=10**6, timeout_s=30))
    await d.wait_iteration(CRASH_AT)
    if spares is not None:
        await wait_spare(spares)
    new = launch(dp=2, iterations=10**6, timeout_s=30).model_copy(
        update={"state_sources": [StateSource(rank=1, kind="same_node", source_node=node, source_rank=0)]}
    )
    t0 = time.time()
    await d.reconfigure(
        node, 2, new, survivors={0: 0}, previous_epoch=1, previous_parallel=ParallelConfig(dp=1)
    )
    t1, reps = _done(await d.wait_events("transition", 2, epoch=2, timeout=120))
    median = _median_iteration(d)
    await d.stop(node, 2, grace_s=1.0)
    return t1 - t0, reps, median


def _summary(reps: list[TransitionReport]) -> dict[str, Any]:
    phases: dict[str, float] = {}
    for rep in reps:
        for k, v in rep.phases_s.items():
            phases[k] = max(phases.get(k, 0.0), v)
    return {
        "sources": sorted({r.source for r in reps}),
        "in_place": sorted({r.in_place for r in reps}),
        "bytes_moved": sum(r.bytes_moved for r in reps),
        "reused_micro_batches": sum(r.reused_micro_batches for r in reps),
        "recomputed_micro_batches": sum(r.recomputed_micro_batches for r in reps),
        "rolled_back_iterations": max(r.rolled_back_iterations for r in reps),
        "max_phase_s": {k: round(v, 4) for k, v in phases.items()},
    }


SCENARIOS = (
    # (row name, handling, runs on the agent with a spare)
    ("shrink", "shrink", True),
    ("restart_one", "restart_one", True),
    ("restart_one_no_spares", "restart_one", False),
    ("grow", "grow", True),
    ("grow_no_spares", "grow", False),
    ("baseline", "baseline", False),
)
"""With ``--no-spares`` every row runs on the agent without a spare (the ``*_no_spares`` rows are
then the plain ones)."""


async def main(repeats: int, spares: bool = True) -> dict[str, Any]:
    results: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="transition-probe-") as tmp:
        async with TestCoordinator() as c:
            dirs = {NODE: Path(tmp) / "agent", COLD: Path(tmp) / "agent-cold"}
            agents = {
                node: await spawn_agent(
                    c.url,
                    node,
                    2,
                    dirs[node],
                    hang_floor=5.0,
                    extra_env={ENV_SPARES: "1" if node == NODE else "0"},
                )
                for node in ((NODE, COLD) if spares else (COLD,))
            }
            try:
                for node in agents:
                    await c.wait_for(lambda node=node: c.messages("hello", node), 60)  # type: ignore[misc]
                for i in range(repeats):
                    for name, handle, warm in SCENARIOS:
                        if not spares:
                            if name.endswith("_no_spares"):
                                continue  # the plain rows run without a spare instead
                            warm = False
                        node = NODE if warm else COLD
                        spare_dir = dirs[node] if warm else None
                        d = TaskDriver(c, task_id=f"{name}-{i}")
                        if spare_dir is not None:
                            await wait_spare(spare_dir)
                        if handle == "grow":
                            seconds, reps, med = await _grow(d, node, spare_dir)
                        else:
                            ckpt = Path(tmp) / f"ckpt-{i}" if handle == "baseline" else None
                            seconds, reps, med = await _failure_then(d, node, spare_dir, ckpt, handle)
                        row = {
                            "seconds": round(seconds, 4),
                            "median_iteration_s": round(med, 5),
                            "warm_spare": warm,
                            **_summary(reps),
                        }
                        results.setdefault(name, []).append(row)
                        print(f"{name:22s} run {i}: {seconds:7.3f} s  {row}", flush=True)
                idle = [sp for sp in read_spares(dirs[NODE]) if sp["ready"]] if spares else []
            finally:
                for proc in agents.values():
                    proc.kill()
                    await proc.wait()
    table: dict[str, Any] = {}
    for name, rows in results.items():
        secs = [r["seconds"] for r in rows]
        med_it = statistics.median(r["median_iteration_s"] for r in rows)
        redo = statistics.median(r["rolled_back_iterations"] for r in rows) * med_it
        table[name] = {
            "median_s": statistics.median(secs),
            "runs_s": secs,
            "redo_s": round(redo, 4),
            "runs": rows,
        }
    base = table["baseline"]["median_s"] + table["baseline"]["redo_s"]
    for name, row in table.items():
        if name != "baseline":
            row["ratio_to_baseline"] = round(row["median_s"] / base, 4)
    return {
        "scenarios": table,
        "idle_spare": {
            "rss_mib": [round(sp["rss_kb"] / 1024, 1) for sp in idle],
            "import_s": [sp["ready_s"] for sp in idle],
        },
    }


def _print(out: dict[str, Any]) -> None:
    print(
        "\nscenario               median s   (runs)                      ratio to baseline (incl. its redo)"
    )
    for name, row in out["scenarios"].items():
        extra = f"+redo {row['redo_s']:.3f} s" if row["redo_s"] else ""
        ratio = row.get("ratio_to_baseline", "")
        print(f"{name:22s} {row['median_s']:8.3f}   {row['runs_s']!s:28s} {extra} {ratio}")
    print(f"idle spare: {out['idle_spare']}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--no-spares",
        action="store_true",
        help="only the agent without a warm spare (default: both agents, rows *_no_spares without)",
    )
    args = ap.parse_args()
    out = asyncio.run(main(args.repeats, spares=not args.no_spares))
    _print(out)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"python": sys.version.split()[0], **out}, indent=2) + "\n")
    print(f"wrote {RESULTS}")

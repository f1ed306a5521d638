"""CLI: `python -m controlplane.core.sim {paper,sensitivity,plan-quality,large,replay,all} [--out DIR]`.

Writes `report.md` (or `<command>.md`) and PNG plots into --out (default bench/results/sim).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from controlplane.core.sim import experiments as ex
from controlplane.core.sim import report as rp
from controlplane.core.sim.api import ALL_POLICIES, MAIN_POLICIES, SimulationRequest, paper_tasks, simulate
from controlplane.core.sim.model import ClusterSpec
from controlplane.core.sim.trace import load_trace


class ProgressBar:
    """A one-line text progress bar on stderr (no dependency)."""

    def __init__(self, stream=sys.stderr, width: int = 30) -> None:  # type: ignore[no-untyped-def]
        self.stream = stream
        self.width = width
        self.last = ""

    def __call__(self, label: str, fraction: float) -> None:
        filled = int(self.width * min(max(fraction, 0.0), 1.0))
        line = f"\r{label[:40]:40s} [{'#' * filled}{'.' * (self.width - filled)}] {100 * fraction:5.1f}%"
        if line != self.last:
            self.stream.write(line)
            if fraction >= 1.0:
                self.stream.write("\n")
            self.stream.flush()
            self.last = line


def _cmd(argv: list[str]) -> str:
    return "python -m controlplane.core.sim " + " ".join(argv)


def run_paper(out: Path, bar: ProgressBar, seeds: int) -> list[str]:
    t0 = time.perf_counter()
    replays = [
        ex.trace_replay(t, ALL_POLICIES, extra_seeds=seeds, progress=bar) for t in ("trace-a", "trace-b")
    ]
    req_sizes = [
        ex.trace_replay(t, MAIN_POLICIES, extra_seeds=seeds, baseline_sizes="requested", progress=bar)
        for t in ("trace-a", "trace-b")
    ]
    wall = time.perf_counter() - t0
    rp.plot_accumulated([r.main for r in replays], out / "accumulated_waf.png")
    rp.plot_ratios(replays, out / "waf_ratio.png")
    for r in replays:
        rp.plot_downtime(r.main, out / f"downtime_{r.trace}.png")
    md = [
        "## Trace replay at 128 GPUs (paper setting)",
        "",
        "16 nodes x 8 A100-80GB; tasks: "
        + ", ".join(f"{t.name} (w={t.weight}, {t.nodes} nodes, max {t.max_nodes})" for t in paper_tasks())
        + ".",
        f"Initial plan (ours; also the static baselines' sizes): {replays[0].main.initial_sizes}.",
        f"Latencies of ours: {replays[0].main.latency_source}. Total wall time of this section: {wall:.1f} s "
        f"({len(replays[0].seeds)} seeds x 2 traces x {len(ALL_POLICIES)} policies, "
        "plus the requested-size variant).",
        "",
    ]
    for r in replays:
        md += [rp.replay_table(r), "", "Downtime by cause (task-hours):", "", rp.downtime_table(r.main), ""]
    md += [
        "### Variant: static baselines at their submitted sizes",
        "",
        "Same traces and seeds, but checkpoint-restart and the elastic baselines run each task at its "
        "submitted size instead of the DP's initial plan (ours is unchanged), so the ratio also contains "
        "the plan-quality gain.",
        "",
    ]
    for r in req_sizes:
        md += [rp.replay_table(r), ""]
    md += ["![accumulated WAF](accumulated_waf.png)", "", "![WAF ratio](waf_ratio.png)", ""]
    md += [f"![downtime {r.trace}](downtime_{r.trace}.png)" for r in replays] + [""]
    return md


def run_plan_quality(out: Path, bar: ProgressBar) -> list[str]:
    t0 = time.perf_counter()
    rows = ex.plan_quality()
    bar("plan quality", 1.0)
    return [
        "## Multi-task plan quality: DP vs heuristics",
        "",
        "WAF of the DP plan divided by each heuristic's on random GPT-3 mixes (weights 0.5-2, each task "
        f"capped at twice its fair share), fresh cluster. Wall time {time.perf_counter() - t0:.1f} s.",
        "",
        rp.plan_quality_table(rows),
        "",
    ]


def run_sensitivity(out: Path, bar: ProgressBar) -> list[str]:
    t0 = time.perf_counter()
    rate = ex.sensitivity_rate(progress=bar)
    tasks = ex.sensitivity_tasks(progress=bar)
    rp.plot_sensitivity(
        rate, "failure rate (x Ant Group 0.27 %/GPU/day)", out / "sensitivity_rate.png", log_x=True
    )
    rp.plot_sensitivity(tasks, "concurrent tasks (trace-b)", out / "sensitivity_tasks.png")
    return [
        "## Sensitivity (128 GPUs, mean over 3 seeds, 7 days)",
        "",
        f"Wall time {time.perf_counter() - t0:.1f} s.",
        "",
        "Failure rate (Ant Group mix, rate multiplied):",
        "",
        rp.sensitivity_table(rate, "rate multiplier"),
        "",
        "Task count (trace-b):",
        "",
        rp.sensitivity_table(tasks, "tasks"),
        "",
        "![sensitivity to rate](sensitivity_rate.png)",
        "",
        "![sensitivity to tasks](sensitivity_tasks.png)",
        "",
    ]


def run_large(out: Path, bar: ProgressBar, days: float) -> list[str]:
    t0 = time.perf_counter()
    rep = ex.large_run(days=days, progress=bar)
    wall = time.perf_counter() - t0
    rp.plot_accumulated([rep], out / "accumulated_waf_16k.png")
    return [
        "## 16,384 GPUs (2,048 nodes, 64 tasks, Llama-3 failure rate and mix)",
        "",
        f"{rep.trace.count} failures in {days:g} days. "
        f"Wall time {wall:.1f} s for {len(rep.outcomes)} policies.",
        "",
        rp.report_table(rep),
        "",
        "Downtime by cause (task-hours):",
        "",
        rp.downtime_table(rep),
        "",
        "![accumulated WAF 16k](accumulated_waf_16k.png)",
        "",
    ]


def run_replay_file(out: Path, bar: ProgressBar, path: str, nodes: int, duration: float | None) -> list[str]:
    trace = load_trace(path, duration_s=duration)
    rep = simulate(SimulationRequest(ClusterSpec(nodes), ex.tasks_for_count(5, nodes), trace=trace), bar)
    rp.plot_accumulated([rep], out / "replay.png")
    return [
        f"## Replay of {path}",
        "",
        rp.report_table(rep),
        "",
        rp.downtime_table(rep),
        "",
        "![replay](replay.png)",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(prog="python -m controlplane.core.sim", description=__doc__)
    ap.add_argument("command", choices=["paper", "plan-quality", "sensitivity", "large", "replay", "all"])
    ap.add_argument("--out", default="bench/results/sim")
    ap.add_argument("--seeds", type=int, default=4, help="extra seeds per named trace (paper)")
    ap.add_argument("--days", type=float, default=54.0, help="length of the 16,384-GPU run")
    ap.add_argument("--trace", help="trace file for `replay` (.jsonl or .csv)")
    ap.add_argument("--nodes", type=int, default=16, help="cluster nodes for `replay`")
    ap.add_argument("--duration", type=float, default=None, help="trace length in seconds for `replay`")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bar = ProgressBar()
    t0 = time.perf_counter()
    md = ["# Simulator report", "", f"Produced by `{_cmd(argv)}`.", ""]
    cmd = args.command
    if cmd in ("plan-quality", "all"):
        md += run_plan_quality(out, bar)
    if cmd in ("paper", "all"):
        md += run_paper(out, bar, args.seeds)
    if cmd in ("sensitivity", "all"):
        md += run_sensitivity(out, bar)
    if cmd in ("large", "all"):
        md += run_large(out, bar, args.days)
    if cmd == "replay":
        if not args.trace:
            ap.error("replay needs --trace FILE")
        md += run_replay_file(out, bar, args.trace, args.nodes, args.duration)
    md += [f"Total wall time: {time.perf_counter() - t0:.1f} s."]
    name = "report.md" if cmd == "all" else f"{cmd}.md"
    (out / name).write_text("\n".join(md) + "\n", encoding="utf-8")
    print(f"wrote {out / name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Markdown tables and PNG plots for simulator results (matplotlib is imported lazily)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from controlplane.core.sim.api import BASELINE, SimulationReport
from controlplane.core.sim.experiments import PlanQualityRow, ReplayResult, SensitivityPoint
from controlplane.core.sim.model import Cause

FAILURE_CAUSES = [c for c in Cause if c is not Cause.QUEUED]


def replay_table(rr: ReplayResult) -> str:
    rep = rr.main
    lines = [
        f"Trace `{rr.trace}`: {rep.trace.count} failures in {rep.trace.duration_s / 86400:.0f} days on "
        f"{rep.request.cluster.gpus} GPUs (named seed); {len(rr.seeds)} seeds {list(rr.seeds)} with "
        f"{rr.failures} failures.",
        "",
        "| policy | accumulated WAF (EFLOP, weighted) | ratio to checkpoint-restart (named seed) "
        "| ratio, mean over seeds [min, max] | lost work (PFLOP) | failure downtime (task-h) "
        "| sim wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, o in rep.outcomes.items():
        r = o.result
        ratios = rr.seed_ratios[name]
        down = sum(r.downtime.task_s[c] for c in FAILURE_CAUSES) / 3600
        lines.append(
            f"| {name} | {r.accumulated_waf / 1e18:,.1f} | {rep.ratio(name) or 0:.3f} | "
            f"{statistics.fmean(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] | "
            f"{r.lost_work_flops / 1e15:,.0f} | {down:,.1f} | {o.wall_s:.3f} |"
        )
    return "\n".join(lines)


def downtime_table(rep: SimulationReport) -> str:
    causes = [c for c in Cause if any(o.result.downtime.task_s[c] > 0 for o in rep.outcomes.values())]
    head = "| policy | " + " | ".join(c.value for c in causes) + " |"
    lines = [head, "|---|" + "---:|" * len(causes)]
    for name, o in rep.outcomes.items():
        cells = " | ".join(f"{o.result.downtime.task_s[c] / 3600:,.1f}" for c in causes)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def report_table(rep: SimulationReport) -> str:
    lines = [
        "| policy | accumulated WAF (EFLOP, weighted) | ratio to checkpoint-restart | lost work (PFLOP) "
        "| plans computed | plan cache hits | sim wall (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, o in rep.outcomes.items():
        r = o.result
        lines.append(
            f"| {name} | {r.accumulated_waf / 1e18:,.1f} | {rep.ratio(name) or 0:.3f} | "
            f"{r.lost_work_flops / 1e15:,.0f} | {r.plan_calls} | {r.lookups} | {o.wall_s:.2f} |"
        )
    return "\n".join(lines)


def plan_quality_table(rows: Sequence[PlanQualityRow]) -> str:
    names = list(rows[0].ratios) if rows else []
    lines = [
        "| nodes | tasks | instances | "
        + " | ".join(f"DP / {n} (mean, min)" for n in names)
        + " | DP time (ms) |",
        "|---:|---:|---:|" + "---:|" * len(names) + "---:|",
    ]
    for r in rows:
        cells = " | ".join(f"{r.ratios[n][0]:.3f}, {r.ratios[n][1]:.3f}" for n in names)
        lines.append(f"| {r.nodes} | {r.tasks} | {r.instances} | {cells} | {r.dp_ms:.1f} |")
    return "\n".join(lines)


def sensitivity_table(points: Sequence[SensitivityPoint], x_name: str) -> str:
    names = list(points[0].ratios) if points else []
    lines = [
        f"| {x_name} | failures/day | " + " | ".join(names) + " |",
        "|---:|---:|" + "---:|" * len(names),
    ]
    for p in points:
        lines.append(
            f"| {p.x:g} | {p.failures_per_day:.1f} | "
            + " | ".join(f"{p.ratios[n]:.3f}" for n in names)
            + " |"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Plots
# --------------------------------------------------------------------------------------------------


def plot_accumulated(reports: Sequence[SimulationReport], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(reports), figsize=(5.5 * len(reports), 3.6), squeeze=False)
    for ax, rep in zip(axes[0], reports, strict=True):
        for name, o in rep.outcomes.items():
            curve = o.result.accumulated_curve(200)
            ax.plot(
                [t / 86400 for t, _ in curve],
                [w / 1e18 for _, w in curve],
                label=name,
                lw=2.0 if name == "unicron" else 1.2,
            )
        ax.set_title(
            f"{rep.trace.name}: {rep.trace.count} failures, {rep.request.cluster.gpus} GPUs", fontsize=9
        )
        ax.set_xlabel("days")
        ax.set_ylabel("accumulated WAF (weighted EFLOP)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_ratios(replays: Sequence[ReplayResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(replays[0].seed_ratios)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.8 / len(replays)
    for k, rr in enumerate(replays):
        means = [statistics.fmean(rr.seed_ratios[n]) for n in names]
        lo = [m - min(rr.seed_ratios[n]) for m, n in zip(means, names, strict=True)]
        hi = [max(rr.seed_ratios[n]) - m for m, n in zip(means, names, strict=True)]
        xs = [i + (k - (len(replays) - 1) / 2) * width for i in range(len(names))]
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=2, label=rr.trace)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=25, ha="right", fontsize=7)
    ax.set_ylabel(f"accumulated WAF / {BASELINE}")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_downtime(rep: SimulationReport, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rep.outcomes)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    bottom = [0.0] * len(names)
    for cause in FAILURE_CAUSES:
        vals = [rep.outcomes[n].result.downtime.task_s[cause] / 3600 for n in names]
        if not any(vals):
            continue
        ax.bar(names, vals, bottom=bottom, label=cause.value)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("task-hours not progressing")
    ax.set_title(f"downtime by cause, {rep.trace.name}", fontsize=9)
    ax.tick_params(axis="x", labelrotation=25, labelsize=7)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_sensitivity(
    points: Sequence[SensitivityPoint], x_label: str, path: Path, log_x: bool = False
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    for name in points[0].ratios:
        ax.plot([p.x for p in points], [p.ratios[name] for p in points], marker="o", label=name)
    if log_x:
        ax.set_xscale("log")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xlabel(x_label)
    ax.set_ylabel(f"accumulated WAF / {BASELINE}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)

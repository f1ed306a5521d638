"""Evaluate the statistical detectors on synthetic (or recorded) iteration-time series (§5.1).

API:
- :class:`Series` — iteration durations with their phases; :func:`synthetic_series` makes the
  standard kinds in :data:`SERIES_KINDS` (noisy, drifting, periodic checkpoint marked / unmarked,
  periodic evaluation, heavy-tailed) from a seed.
- :func:`evaluate_hang_detector` — replays a series through :class:`IterationTimeMonitor`, counts
  false positives (a healthy iteration that outlived the threshold while running) and measures the
  detection delay and misses of hangs injected at given positions.
- :func:`evaluate_straggler_detector` — per-rank series with or without one slowed rank.

Everything is deterministic for a given seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from controlplane.core.failures.detectors import (
    IterationTimeMonitor,
    MonitorParams,
    StragglerDetector,
    StragglerParams,
)

SERIES_KINDS = (
    "steady-noisy",
    "very-noisy",
    "drifting",
    "checkpoint-marked",
    "checkpoint-unmarked",
    "eval-marked",
    "heavy-tail",
)


@dataclass(frozen=True, slots=True)
class Series:
    kind: str
    durations: tuple[float, ...]
    phases: tuple[str, ...]


def synthetic_series(kind: str, n: int = 2000, base_s: float = 2.0, seed: int = 0) -> Series:
    """One series of ``n`` iterations around ``base_s`` seconds.

    Noise is log-normal with sigma 0.05 (typical run-to-run jitter of a synchronous step; 0.3 for
    "very-noisy", e.g. shared CPU slots); the first
    iteration is 5x (graph build, allocator warm-up) and marked "first". Checkpoints every 100
    iterations take 8x; evaluations every 250 take 12x; drift doubles the step time over the series;
    heavy-tail adds 2 % of iterations at 1.5-2.5x (data-loader stalls, GC pauses).
    """
    if kind not in SERIES_KINDS:
        raise ValueError(f"unknown series kind {kind!r}")
    rng = random.Random(f"{kind}:{seed}")
    ds: list[float] = []
    ps: list[str] = []
    for i in range(n):
        d = base_s * math.exp(rng.gauss(0.0, 0.3 if kind == "very-noisy" else 0.05))
        phase = "train"
        if kind == "drifting":
            d *= 1.0 + i / n
        if kind == "heavy-tail" and rng.random() < 0.02:
            d *= rng.uniform(1.5, 2.5)
        if kind.startswith("checkpoint") and i % 100 == 99:
            d *= 8.0
            phase = "checkpoint" if kind == "checkpoint-marked" else "train"
        if kind == "eval-marked" and i % 250 == 249:
            d *= 12.0
            phase = "eval"
        if i == 0:
            d *= 5.0
            phase = "first"
        ds.append(d)
        ps.append(phase)
    return Series(kind, tuple(ds), tuple(ps))


@dataclass(frozen=True, slots=True)
class HangEvaluation:
    kind: str
    iterations: int
    false_positives: int
    hangs: int
    detected: int
    mean_delay_s: float | None
    max_delay_s: float | None
    max_delay_over_target: float | None
    """Worst detection delay / max(3 x median, 5 s) at the moment of the hang (§5.1 target)."""

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / self.iterations if self.iterations else 0.0

    @property
    def miss_rate(self) -> float:
        return 1.0 - self.detected / self.hangs if self.hangs else 0.0


def evaluate_hang_detector(
    series: Series,
    params: MonitorParams | None = None,
    hang_at: Sequence[int] = (),
    poll_s: float = 0.1,
    give_up_s: float = 600.0,
) -> HangEvaluation:
    """Replay ``series``; a hang at index i means iteration i never completes.

    The agent polls ``check`` every ``poll_s``; a healthy iteration is a false positive if its
    duration exceeds the threshold in force while it ran. For each hang we replay the prefix and
    step the elapsed time until the first verdict (or ``give_up_s``, the collective-timeout fallback:
    a miss). Delays are compared with the §5.1 target computed from the true median of the prefix.
    """
    params = params or MonitorParams()
    mon = IterationTimeMonitor(params)
    fps = 0
    for d, ph in zip(series.durations, series.phases, strict=True):
        if mon.check(d, ph) is not None:
            fps += 1
        mon.observe(d, ph)
    delays: list[float] = []
    ratios: list[float] = []
    for h in hang_at:
        m = IterationTimeMonitor(params)
        train: list[float] = []
        for d, ph in zip(series.durations[:h], series.phases[:h], strict=True):
            m.observe(d, ph)
            if ph not in params.excluded_phases:
                train.append(d)
        thr = m.hang_threshold_s()
        if thr is None:
            continue
        delay = math.ceil(thr / poll_s + 1e-9) * poll_s
        while m.check(delay, "train") is None and delay < give_up_s:
            delay += poll_s
        if delay >= give_up_s:
            continue
        delays.append(delay)
        recent = sorted(train[-params.window :])
        med = recent[len(recent) // 2]
        ratios.append(delay / max(3.0 * med, 5.0))
    return HangEvaluation(
        series.kind,
        len(series.durations),
        fps,
        len(hang_at),
        len(delays),
        sum(delays) / len(delays) if delays else None,
        max(delays) if delays else None,
        max(ratios) if ratios else None,
    )


@dataclass(frozen=True, slots=True)
class StragglerEvaluation:
    label: str
    ranks: int
    iterations: int
    slow_rank: int | None
    slowdown: float
    false_verdicts: int
    """Verdicts naming a rank that was not slowed."""
    detected_after: int | None
    """Iterations from the slowdown's start to the verdict on the slowed rank (None: not detected)."""


def evaluate_straggler_detector(
    label: str,
    ranks: int = 8,
    iterations: int = 500,
    slowdown: float = 1.0,
    slow_from: int = 200,
    base_s: float = 1.0,
    noise_sigma: float = 0.05,
    params: StragglerParams | None = None,
    seed: int = 0,
) -> StragglerEvaluation:
    """Rank 0 runs ``slowdown``x slower from iteration ``slow_from`` (1.0: nobody is slow).

    Per-rank durations are the compute time before the gradient all-reduce (after it, synchronous
    ranks all finish together, so a straggler is only visible before the collective).
    """
    rng = random.Random(f"{label}:{seed}")
    det = StragglerDetector(params or StragglerParams())
    slow_rank = 0 if slowdown > 1.0 else None
    false = 0
    found: int | None = None
    for i in range(iterations):
        for r in range(ranks):
            d = base_s * math.exp(rng.gauss(0.0, noise_sigma))
            if r == slow_rank and i >= slow_from:
                d *= slowdown
            v = det.observe(r, d)
            if v is None:
                continue
            if v.rank == slow_rank and i >= slow_from:
                if found is None:
                    found = i - slow_from
            else:
                false += 1
    return StragglerEvaluation(label, ranks, iterations, slow_rank, slowdown, false, found)

"""Online statistical monitoring in the agent: hangs and stragglers (docs/ARCHITECTURE.md §7.1).

Wraps the pure detectors of :mod:`controlplane.core.failures.detectors` (``IterationTimeMonitor``,
``StragglerDetector``) with what the live agent needs on top:

- a fixed *warm-up timeout* for iterations that run before the monitor has a threshold (the pure
  monitor returns no threshold during warm-up, so a hang in iteration 3 would otherwise go unseen);
- a default hang floor of 4.5 s instead of the design's 5 s: detection latency is threshold + poll
  period + stack capture, and §11 asks for detection within max(3 x median, 5 s);
- per-rank compute time (micro-batches done, before the gradient all-reduce) for straggler
  detection: with synchronous collectives every rank's *iteration* time is the same, only the
  compute part tells the slow rank apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.failures.detectors import (
    IterationTimeMonitor,
    MonitorParams,
    StragglerDetector,
    StragglerParams,
    StragglerVerdict,
)


@dataclass(frozen=True)
class MonitorConfig:
    hang_factor: float = 3.0
    hang_floor_s: float = 4.5
    warmup_timeout_s: float = 60.0
    """An iteration before the threshold exists is a hang past this."""
    slow_phase_timeout_s: float = 1800.0
    straggler_ratio: float = 1.5
    straggler_persistence: int = 5
    poll_s: float = 0.05


@dataclass(frozen=True)
class Hang:
    elapsed_s: float
    threshold_s: float
    median_s: float | None
    phase: str


class RankMonitor:
    """Hang detection for one worker."""

    def __init__(self, cfg: MonitorConfig) -> None:
        self.cfg = cfg
        self.iterations = IterationTimeMonitor(
            MonitorParams(
                hang_factor=cfg.hang_factor,
                hang_floor_s=cfg.hang_floor_s,
                excluded_phase_timeout_s=cfg.slow_phase_timeout_s,
            )
        )

    def observe(self, duration_s: float, phase: str) -> None:
        self.iterations.observe(duration_s, phase)

    def threshold_s(self) -> float:
        thr = self.iterations.hang_threshold_s()
        return self.cfg.warmup_timeout_s if thr is None else thr

    def check(self, elapsed_s: float, phase: str) -> Hang | None:
        verdict = self.iterations.check(elapsed_s, phase)
        if verdict is not None:
            return Hang(verdict.elapsed_s, verdict.threshold_s, verdict.median_s, verdict.phase)
        if (
            self.iterations.hang_threshold_s() is None
            and phase not in self.iterations.params.excluded_phases
            and elapsed_s > self.cfg.warmup_timeout_s
        ):
            return Hang(elapsed_s, self.cfg.warmup_timeout_s, None, phase)
        return None


class TaskStragglers:
    """Straggler detection across the local ranks of one task."""

    def __init__(self, cfg: MonitorConfig) -> None:
        self.detector = StragglerDetector(
            StragglerParams(ratio=cfg.straggler_ratio, persistence=cfg.straggler_persistence)
        )

    def observe(self, rank: int, compute_s: float, phase: str) -> StragglerVerdict | None:
        return self.detector.observe(rank, compute_s, phase)

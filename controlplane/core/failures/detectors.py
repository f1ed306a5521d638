"""In-band detectors as pure, dependency-free code (docs/ARCHITECTURE.md §7.1). The node agent runs these
live.

API:
- :func:`heartbeat_expired`, :func:`heartbeat_deadline`, :func:`expired_nodes` — node health;
  :func:`mass_silence` — whether so many nodes fell silent at once that the control plane (or its
  network), not the nodes, is the likely cause.
- :class:`IterationTimeMonitor` (:class:`MonitorParams`) — per-task online iteration-time statistics:
  ``observe(duration_s, phase)`` for each completed iteration (slow-on-purpose phases are excluded),
  ``hang_threshold_s()`` (``None`` during warm-up), ``check(elapsed_s, phase)`` → :class:`HangVerdict`
  or ``None`` for the running iteration. O(window) per observation, O(1) per check.
- :func:`waits_on_peers` — whether a hung rank's stack shows it blocked in communication (a collective,
  a pipeline send/receive): its hang is its peers' or the network's, not its own.
- :class:`StragglerDetector` (:class:`StragglerParams`) — ``observe(rank, duration_s)`` → a
  :class:`StragglerVerdict` when a rank becomes persistently slower than its peers;
  ``stragglers()`` lists the current ones. O(window + ranks·log ranks) per observation.

Statistics are robust: the median (and optionally the MAD) of a sliding window, so one slow
iteration neither triggers nor poisons the estimate, and slow drift is followed.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_HEARTBEAT_TIMEOUT_S = 3.0
"""§5.1: 1 s heartbeats, node loss detected within 3 s (three missed beats)."""

DEFAULT_MASS_SILENCE_MIN_NODES = 3
DEFAULT_MASS_SILENCE_FRACTION = 0.5

EXCLUDED_PHASES = frozenset({"first", "warmup", "checkpoint", "eval", "evaluation", "profile"})
"""Phases the worker hook marks as slow on purpose (§5.1)."""


def reading_lag(recent_delays: Sequence[float], cap_s: float, quantile: float = 0.9) -> float:
    """How far behind the control plane reads heartbeats now: the ``quantile`` of the queueing delays of
    the heartbeats it read in the last moments (``recent_delays``), at most ``cap_s``. A node's silence
    shorter than its deadline plus this lag is the control plane's backlog, not evidence against the
    node: its heartbeats are waiting to be read. A quantile, not the longest delay: one frame that waited
    behind a pause must not hold back every verdict. Nothing read lately is no lag: a link that reads
    nothing is deaf or its nodes are gone, which the mass-silence rule and the deadlines judge."""
    if not recent_delays:
        return 0.0
    ordered = sorted(recent_delays)
    return min(ordered[min(len(ordered) - 1, int(quantile * len(ordered)))], cap_s)


def readers_lag(per_reader: Iterable[Sequence[float]], cap_s: float, quantile: float = 0.9) -> float:
    """:func:`reading_lag` of the process that lags most, each judged by its own recent delays: heartbeats
    are read by several processes (one per ASGI server), and one that falls behind while the others keep
    up must not have its backlog diluted by their quick reads (its nodes then looked silent)."""
    return max((reading_lag(delays, cap_s, quantile) for delays in per_reader), default=0.0)


def heartbeat_deadline(last_seen_s: float, timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S) -> float:
    return last_seen_s + timeout_s


def heartbeat_expired(
    last_seen_s: float, now_s: float, timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
) -> bool:
    """True once more than ``timeout_s`` passed since the last heartbeat."""
    return now_s - last_seen_s > timeout_s


def expired_nodes(
    last_seen_s: Mapping[str, float], now_s: float, timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
) -> list[str]:
    """Nodes whose heartbeat expired, sorted by name."""
    return sorted(n for n, t in last_seen_s.items() if heartbeat_expired(t, now_s, timeout_s))


def mass_silence(
    watched: int,
    silent: int,
    min_nodes: int = DEFAULT_MASS_SILENCE_MIN_NODES,
    fraction: float = DEFAULT_MASS_SILENCE_FRACTION,
) -> bool:
    """True when ``silent`` of the ``watched`` nodes fell silent together: at least ``min_nodes`` of them
    and at least ``fraction`` of the watched ones (Kubernetes' node lifecycle controller calls this a
    full disruption). Nodes do not fail together; a deaf control plane or a partition silences all.

    Below ``min_nodes`` it is never a mass silence, so a single loss or a small cluster is handled as
    always. ``fraction`` is compared with ``silent / watched`` (3 of 10 meets 0.3; no rounding of a product).
    """
    if min_nodes < 1 or not 0.0 < fraction <= 1.0:
        raise ValueError("min_nodes must be >= 1 and fraction in (0, 1]")
    if not 0 <= silent <= watched:
        raise ValueError(f"silent ({silent}) must be between 0 and watched ({watched})")
    return silent >= min_nodes and silent / watched >= fraction


class _SortedWindow:
    """Sliding window with O(window) insert/evict and O(1) median."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._fifo: deque[float] = deque()
        self._sorted: list[float] = []

    def add(self, x: float) -> None:
        self._fifo.append(x)
        bisect.insort(self._sorted, x)
        if len(self._fifo) > self.size:
            old = self._fifo.popleft()
            del self._sorted[bisect.bisect_left(self._sorted, old)]

    def __len__(self) -> int:
        return len(self._sorted)

    def median(self) -> float:
        s, n = self._sorted, len(self._sorted)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    def mad(self) -> float:
        med = self.median()
        dev = sorted(abs(x - med) for x in self._sorted)
        n = len(dev)
        return dev[n // 2] if n % 2 else 0.5 * (dev[n // 2 - 1] + dev[n // 2])


@dataclass(frozen=True, slots=True)
class MonitorParams:
    warmup_iterations: int = 3
    """Included iterations discarded at the start (allocator / autotuning / data-loader warm-up)."""
    min_samples: int = 5
    """Iterations needed after warm-up before a threshold exists."""
    window: int = 50
    hang_factor: float = 3.0
    """§5.1: a hang is an iteration longer than max(3 x median, floor)."""
    hang_floor_s: float = 5.0
    mad_factor: float | None = None
    """If set, the threshold is also at least median + mad_factor·1.4826·MAD (robust sigma)."""
    excluded_phases: frozenset[str] = EXCLUDED_PHASES
    excluded_phase_timeout_s: float | None = 1800.0
    """A running excluded phase (e.g. a checkpoint save) is a hang only past this fixed timeout."""

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_samples < 1 or self.warmup_iterations < 0:
            raise ValueError("window and min_samples must be >= 1, warmup >= 0")
        if self.hang_factor <= 1 or self.hang_floor_s < 0:
            raise ValueError("hang_factor must be > 1 and hang_floor_s >= 0")


COMMUNICATION_FRAMES = (
    "torch/distributed/",
    "megatron/core/pipeline_parallel/p2p_communication.py",
    "megatron/core/distributed/param_and_grad_buffer.py",
    "megatron/core/distributed/finalize_model_grads.py",
)
"""Source files whose functions block on peers (torch.distributed's collectives and waits, Megatron's
pipeline send/receive and its gradient reduction): a rank whose innermost Python frame is in one of them
waits for its peers."""


def waits_on_peers(stack: str) -> bool:
    """Whether a ``faulthandler`` dump (the stack a hang verdict carries) shows the dumping thread — the
    training loop, which handles the signal — blocked in communication: its innermost frame, the first
    ``File`` line after ``Current thread`` (or ``Stack``, a one-thread dump), is in one of
    :data:`COMMUNICATION_FRAMES`. False when the dump has no such thread or frame (no stack captured)."""
    lines = stack.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(("Current thread", "Stack ("))), None)
    if start is None:
        return False
    innermost = next((line for line in lines[start + 1 :] if line.strip().startswith("File ")), "")
    path = innermost.strip().split('"')[1] if innermost.count('"') >= 2 else ""
    return any(part in path for part in COMMUNICATION_FRAMES)


@dataclass(frozen=True, slots=True)
class HangVerdict:
    elapsed_s: float
    threshold_s: float
    median_s: float | None
    phase: str
    reason: str


@dataclass
class IterationTimeMonitor:
    """Online hang detection for one task's iterations on one rank (or the node's slowest rank)."""

    params: MonitorParams = field(default_factory=MonitorParams)
    _seen: int = 0
    _window: _SortedWindow = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._window = _SortedWindow(self.params.window)

    def observe(self, duration_s: float, phase: str = "train") -> None:
        """Record a completed iteration; excluded phases and warm-up iterations are not counted."""
        if phase in self.params.excluded_phases or duration_s < 0:
            return
        self._seen += 1
        if self._seen > self.params.warmup_iterations:
            self._window.add(duration_s)

    @property
    def samples(self) -> int:
        return len(self._window)

    def median_s(self) -> float | None:
        return self._window.median() if len(self._window) else None

    def hang_threshold_s(self) -> float | None:
        """max(factor x median, floor[, median + k·1.4826·MAD]); None until warmed up."""
        p = self.params
        if len(self._window) < p.min_samples:
            return None
        med = self._window.median()
        thr = max(p.hang_factor * med, p.hang_floor_s)
        if p.mad_factor is not None:
            thr = max(thr, med + p.mad_factor * 1.4826 * self._window.mad())
        return thr

    def check(self, elapsed_s: float, phase: str = "train") -> HangVerdict | None:
        """Verdict for the iteration running for ``elapsed_s``, or None while it looks healthy."""
        p = self.params
        if phase in p.excluded_phases:
            t = p.excluded_phase_timeout_s
            if t is not None and elapsed_s > t:
                return HangVerdict(
                    elapsed_s, t, self.median_s(), phase, f"{phase} phase exceeded its {t:.0f}s timeout"
                )
            return None
        thr = self.hang_threshold_s()
        if thr is None or elapsed_s <= thr:
            return None
        med = self._window.median()
        return HangVerdict(
            elapsed_s,
            thr,
            med,
            phase,
            f"iteration running {elapsed_s:.2f}s > threshold {thr:.2f}s (median {med:.3f}s)",
        )


@dataclass(frozen=True, slots=True)
class StragglerParams:
    window: int = 20
    min_samples: int = 5
    """Per-rank samples (after warm-up) before a rank is judged."""
    warmup_iterations: int = 3
    ratio: float = 1.25
    """A rank is slow when its median exceeds ``ratio`` x the median of its peers' medians."""
    persistence: int = 5
    """Consecutive slow judgements of a rank before it is declared a straggler."""
    min_ranks: int = 2

    def __post_init__(self) -> None:
        if self.ratio <= 1 or self.persistence < 1 or self.window < 1 or self.min_ranks < 2:
            raise ValueError("ratio > 1, persistence >= 1, window >= 1, min_ranks >= 2 required")


@dataclass(frozen=True, slots=True)
class StragglerVerdict:
    rank: int
    rank_median_s: float
    peer_median_s: float
    ratio: float
    reason: str


@dataclass
class StragglerDetector:
    params: StragglerParams = field(default_factory=StragglerParams)
    _windows: dict[int, _SortedWindow] = field(default_factory=dict, repr=False)
    _seen: dict[int, int] = field(default_factory=dict, repr=False)
    _streak: dict[int, int] = field(default_factory=dict, repr=False)
    _current: dict[int, StragglerVerdict] = field(default_factory=dict, repr=False)

    def observe(self, rank: int, duration_s: float, phase: str = "train") -> StragglerVerdict | None:
        """Record one iteration of ``rank``; returns a verdict when the rank *becomes* a straggler."""
        p = self.params
        if phase in EXCLUDED_PHASES:
            return None
        self._seen[rank] = self._seen.get(rank, 0) + 1
        if self._seen[rank] <= p.warmup_iterations:
            return None
        w = self._windows.setdefault(rank, _SortedWindow(p.window))
        w.add(duration_s)
        if len(w) < p.min_samples:
            return None
        peers = sorted(
            ow.median() for r, ow in self._windows.items() if r != rank and len(ow) >= p.min_samples
        )
        if len(peers) + 1 < p.min_ranks:
            return None
        n = len(peers)
        peer_med = peers[n // 2] if n % 2 else 0.5 * (peers[n // 2 - 1] + peers[n // 2])
        mine = w.median()
        ratio = mine / peer_med if peer_med > 0 else float("inf")
        if ratio <= p.ratio:
            self._streak[rank] = 0
            self._current.pop(rank, None)
            return None
        self._streak[rank] = self._streak.get(rank, 0) + 1
        if self._streak[rank] < p.persistence or rank in self._current:
            return None
        v = StragglerVerdict(
            rank, mine, peer_med, ratio,
            f"rank {rank} median {mine:.3f}s is {ratio:.2f}x its peers' {peer_med:.3f}s "
            f"for {self._streak[rank]} consecutive iterations",
        )  # fmt: skip
        self._current[rank] = v
        return v

    def stragglers(self) -> list[StragglerVerdict]:
        return [self._current[r] for r in sorted(self._current)]

"""Weighted achieved FLOP/s (WAF), the gain G, D_running and D_transition (docs/ARCHITECTURE.md §7.3-7.4).

API:
- :func:`waf` — F(t, x) = w(t)·T(t, x) where x is feasible (and within the task's bounds), else 0.
- :func:`expected_running_duration_s` — D_running from MTBF, nodes in use and known change ETAs;
  :func:`mtbf_from_observations` estimates the MTBF from an observed failure count.
- :class:`TransitionModel` — D_transition(t, x -> x') from state size, migration source bandwidth
  and restart cost.
- :func:`gain` — G(t, x') = F(t, x')·D_running - [x' ≠ x or hit]·F(t, x)·D_transition(t, x → x').
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controlplane.core.planning.throughput import ThroughputTable


def waf(
    weight: float, table: ThroughputTable, workers: int, min_workers: int = 0, max_workers: int | None = None
) -> float:
    """F(t, x) (§6.1). ``x`` outside the task's ``[min_workers, max_workers]`` counts as infeasible."""
    if workers <= 0 or workers < min_workers or (max_workers is not None and workers > max_workers):
        return 0.0
    return weight * table.throughput(workers)


def mtbf_from_observations(failures: int, node_seconds: float) -> float:
    """Per-node MTBF estimate = observed node-time / failures.

    Maximum-likelihood estimate of an exponential (Poisson-process) failure model. With no failure
    observed we use the "rule of one" (assume one failure in the window) so the estimate is finite and
    conservative rather than infinite.
    """
    if node_seconds <= 0:
        raise ValueError("node_seconds must be positive")
    return node_seconds / max(failures, 1)


def expected_running_duration_s(
    mtbf_node_s: float, nodes_in_use: int, change_etas_s: Iterable[float] = (), cap_s: float | None = None
) -> float:
    """D_running: expected time until the next change of the cluster (§6.2).

    Node failures as independent Poisson processes with rate 1/MTBF each: the first of N arrives
    after MTBF/N in expectation (minimum of exponentials). Known future changes (a repaired node
    returning, a task completing) end the period earlier, so we take the minimum with their ETAs.
    Llama 3 (§13): one interruption every ~3.1 h on 16,384 GPUs = 2,048 nodes -> MTBF_node ≈ 6,350 h.
    ``cap_s`` bounds the horizon (plans are redone periodically anyway).
    """
    if mtbf_node_s <= 0 or nodes_in_use < 0:
        raise ValueError("mtbf must be positive, nodes_in_use non-negative")
    d = mtbf_node_s / max(nodes_in_use, 1)
    for eta in change_etas_s:
        if eta >= 0:
            d = min(d, eta)
    if cap_s is not None:
        d = min(d, cap_s)
    return d


@dataclass(frozen=True, slots=True)
class TransitionModel:
    """D_transition(t, x → x'): seconds during which the task makes no progress when it changes.

    ``restart_s`` covers stopping workers, re-forming process groups and rebuilding the model
    (Unicron paper §6: seconds to tens of seconds with warm processes, vs. ~14 min of cold setup in the
    restart path, §13). State movement follows the nearest principle (§7): when a live data-parallel
    replica survives, a new worker pulls its shard of model state from a peer at ``peer_bandwidth``
    (inter-node link; torchft heals 12 GB in ~3 s ≈ 4 GB/s, §13); otherwise from the checkpoint at
    ``checkpoint_bandwidth`` plus ``rollback_s`` of recomputation since the last checkpoint (~15 min
    in the restart path, §13). Workers fetch in parallel, so time = shard bytes / per-worker bandwidth.
    """

    state_bytes: float = 0.0
    """Model state of the whole task (weights + optimizer), bytes."""
    restart_s: float = 30.0
    peer_bandwidth: float = 25e9
    checkpoint_bandwidth: float = 2e9
    """Per-worker read bandwidth from remote storage (parallel file systems give ~1-5 GB/s per client)."""
    rollback_s: float = 900.0

    def duration_s(self, old_workers: int, new_workers: int, *, hit: bool, shard_ways: int = 1) -> float:
        """Seconds of lost progress for the transition ``old -> new``.

        ``shard_ways`` = tp·pp of the new config (each worker holds state/shard_ways bytes). A task
        that keeps at least one full replica (``old_workers >= shard_ways``) migrates from peers; a task
        that lost every replica (or starts from nothing) reads the checkpoint and rolls back. A task
        going to 0 workers only pays the stop (checkpoint to memory is free in our model).
        """
        if new_workers == 0:
            return 0.0
        shard = self.state_bytes / max(shard_ways, 1)
        if old_workers >= shard_ways and old_workers > 0:
            return self.restart_s + shard / self.peer_bandwidth
        if old_workers == 0 and not hit:
            # A suspended or new task: its state is in a checkpoint, but no work since it is lost.
            return self.restart_s + shard / self.checkpoint_bandwidth
        return self.restart_s + shard / self.checkpoint_bandwidth + self.rollback_s


def gain(
    *,
    weight: float,
    table: ThroughputTable,
    old_workers: int,
    new_workers: int,
    hit: bool,
    d_running_s: float,
    transition: TransitionModel,
    min_workers: int = 0,
    max_workers: int | None = None,
) -> tuple[float, float]:
    """G(t, x') and its transition penalty (§6.2). Returns ``(G, penalty)``.

    G = F(t, x')·D_running - [x' ≠ x or hit]·F(t, x)·D_transition(t, x → x'). The penalty charges the
    WAF the task produces now (F at its current count) for the time it stops, as in the paper; the
    running term credits the new rate for the whole period (the transition is short next to
    D_running, and charging it twice would double count).
    """
    f_new = waf(weight, table, new_workers, min_workers, max_workers)
    penalty = 0.0
    if new_workers != old_workers or hit:
        cfg = table.best_config(new_workers)
        ways = cfg.tp * cfg.pp if cfg is not None else 1
        d_t = transition.duration_s(old_workers, new_workers, hit=hit, shard_ways=ways)
        penalty = waf(weight, table, old_workers, min_workers, max_workers) * d_t
    return f_new * d_running_s - penalty, penalty

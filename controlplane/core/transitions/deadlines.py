"""Transition step deadlines that follow the host (docs/ARCHITECTURE.md §2: a periodic task times out stuck
steps).

A step's deadline is a configured floor, or ``iterations`` of the task's recent median iteration time
when that is longer, and never more than ``max_factor`` times the floor. The floors (``UNICRON_STEP_
DEADLINE_S`` 60 s for the acks of a command step, ``UNICRON_RESUME_DEADLINE_S`` 180 s for every rank's
first iteration) were set on a host where the demo's tiny GPT iterated in about 0.3 s (bench/results/
recovery.md) and a cold worker start took 27-37 s; on a host, or at a moment, where everything runs 3x
slower, so do process starts, rendezvous and the first iteration, and a fixed 60 s failed transitions
that would have completed ("step start timed out after 63.6 s" on a CPU-starved 2-core demo host).
The iteration time is the one measure of the host's speed the control plane already has for a task.
The cap keeps a task whose iterations are slow for their own reasons (a big model, few replicas) from
leaving a really stuck transition undetected for long.
"""

from __future__ import annotations


def step_deadline_s(
    floor_s: float, iteration_s: float | None, iterations: float, max_factor: float = 5.0
) -> float:
    """``max(floor_s, iterations x iteration_s)``, at most ``max_factor x floor_s``; ``floor_s`` when the
    task has no measured iteration time (it never ran)."""
    if floor_s <= 0 or iterations < 0 or max_factor < 1:
        raise ValueError("floor_s > 0, iterations >= 0 and max_factor >= 1 required")
    if iteration_s is None or iteration_s <= 0:
        return floor_s
    return min(max(floor_s, iterations * iteration_s), max_factor * floor_s)

"""Throughput model T(t, x) (docs/ARCHITECTURE.md §7.3): parallel configs, iteration time, tables,
calibration.

API:
- :class:`MegatronConfig` — (tp, pp, dp, micro_batch, micro_batches per replica, recompute).
- :class:`Efficiency` — the model's calibratable factors; :func:`calibrate` fits them to measured
  iteration times and reports the error (:class:`CalibrationResult`).
- :func:`enumerate_configs` — every feasible config for a task on ``x`` devices of a kind.
- :func:`iteration_time` / :func:`iteration_time_breakdown` — modelled seconds per iteration.
- :class:`ThroughputTable` — T(x), the best config at each feasible x, and x_min; built by
  :func:`build_throughput_table` or directly from measured points with
  :meth:`ThroughputTable.from_points`.

The model (all choices documented beside the formulas below): an iteration is a 1F1B pipeline of
``m + pp - 1`` micro-batch slots (Narayanan et al., SC'21, §2.2.1: bubble fraction (p-1)/m); each slot
costs the stage's compute plus its tensor-parallel all-reduces and the pipeline point-to-point sends;
then the data-parallel gradient all-reduce runs, not overlapped (conservative; overlap shows up in the
calibrated communication efficiency). Time is linear in (1/compute efficiency, 1/communication
efficiency, fixed overhead), which makes calibration a small linear least-squares problem.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from controlplane.core.planning.devices import DeviceKind
from controlplane.core.planning.spec import BYTES_PER_ACTIVATION_ELEMENT, GPTSpec

USABLE_MEMORY_FRACTION = 0.9
"""Keep 10 % of device memory free for allocator fragmentation (PyTorch caching allocator rule of
thumb; Megatron runs typically peak at 85-95 % of HBM)."""


@dataclass(frozen=True, slots=True)
class MegatronConfig:
    """A Megatron configuration for ``tp * pp * dp`` workers: the parallel layout with the micro-batching and
    recomputation the throughput model prices (the wire's ``protocol.ParallelConfig`` is the layout alone)."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    num_micro_batches: int
    """Micro-batches per data-parallel replica per iteration (global batch / (dp * micro_batch))."""
    recompute: bool

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Calibratable factors of the iteration-time model.

    Defaults: Narayanan et al. (SC'21, Table 1) reach 44-52 % of A100 peak end to end, so model
    compute at 50 % of peak; NCCL ring all-reduce reaches ~70-80 % of link bandwidth at large
    messages (nccl-tests bus bandwidth), so 70 %.
    """

    compute: float = 0.5
    communication: float = 0.7
    overhead_s: float = 0.0
    """Fixed per-iteration cost (optimizer step launch, data loading, Python)."""

    def __post_init__(self) -> None:
        if not (self.compute > 0 and self.communication > 0 and self.overhead_s >= 0):
            raise ValueError("efficiencies must be positive and overhead non-negative")


@dataclass(frozen=True, slots=True)
class IterationTimeBreakdown:
    """Iteration time split into its linear parts at unit efficiency."""

    compute_s: float
    """Pipeline compute at 100 % of peak, bubble included."""
    communication_s: float
    """TP + PP + DP communication at 100 % of nominal bandwidth."""

    def total(self, eff: Efficiency) -> float:
        return self.compute_s / eff.compute + self.communication_s / eff.communication + eff.overhead_s


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _ring_allreduce_s(nbytes: float, group: int, bandwidth: float) -> float:
    """Ring all-reduce: each device sends and receives ``2(g-1)/g`` of the buffer (Patarasuk & Yuan,
    JPDC 2009; the NCCL "bus bandwidth" definition)."""
    if group <= 1:
        return 0.0
    return 2.0 * (group - 1) / group * nbytes / bandwidth


def memory_per_device(spec: GPTSpec, cfg: MegatronConfig) -> float:
    """Peak bytes on the busiest device (the first pipeline stage).

    Model state is split evenly over tp*pp devices (embedding imbalance ignored: it is small next to
    the layers for the models we plan, V/(12·L·h) < 5 % for GPT-3-class specs). In 1F1B the first
    stage holds activations of ``min(pp, m)`` in-flight micro-batches for its L/pp layers
    (Korthikanti et al., MLSys'23, §4.2.3).
    """
    state = spec.model_state_bytes() / (cfg.tp * cfg.pp)
    layers_per_stage = spec.num_layers / cfg.pp
    in_flight = min(cfg.pp, cfg.num_micro_batches)
    act = spec.activation_bytes_per_layer(cfg.micro_batch, cfg.tp, cfg.recompute)
    return state + act * layers_per_stage * in_flight


def fits_memory(spec: GPTSpec, kind: DeviceKind, cfg: MegatronConfig) -> bool:
    budget = kind.memory_bytes * USABLE_MEMORY_FRACTION - kind.memory_overhead_bytes
    return memory_per_device(spec, cfg) <= budget


def iteration_time_breakdown(spec: GPTSpec, kind: DeviceKind, cfg: MegatronConfig) -> IterationTimeBreakdown:
    """Compute and communication seconds per iteration at unit efficiency (see module docstring)."""
    total_micro = spec.global_batch_size // cfg.micro_batch
    flops = spec.flops_per_iteration(cfg.recompute)
    # One micro-batch on one stage: its share of the iteration's FLOPs spread over tp devices.
    slot_compute = flops / total_micro / (cfg.pp * cfg.tp) / kind.peak_flops
    slots = cfg.num_micro_batches + cfg.pp - 1
    compute = slots * slot_compute

    msg = BYTES_PER_ACTIVATION_ELEMENT * cfg.micro_batch * spec.seq_length * spec.hidden_size
    # Megatron TP: 2 all-reduces forward + 2 backward per layer (Shoeybi et al. 2019, Fig. 4), plus 2
    # more in the recomputed forward. TP stays inside a node -> intra-node bandwidth.
    n_ar = 6 if cfg.recompute else 4
    tp_per_slot = (
        (spec.num_layers / cfg.pp) * n_ar * _ring_allreduce_s(msg, cfg.tp, kind.intra_node_bandwidth)
    )
    # PP: one activation send forward and one gradient send backward per micro-batch per boundary;
    # consecutive stages sit on different nodes once a stage group (tp*pp) outgrows a node.
    pp_bw = (
        kind.intra_node_bandwidth if cfg.tp * cfg.pp <= kind.devices_per_node else kind.inter_node_bandwidth
    )
    pp_per_slot = 2.0 * msg / cfg.tp / pp_bw if cfg.pp > 1 else 0.0
    # DP: all-reduce of 16-bit gradients of the local shard once per iteration; inter-node as soon as
    # the whole job spans more than a node (Megatron places TP innermost, then PP... then DP).
    dp_bw = (
        kind.intra_node_bandwidth if cfg.world_size <= kind.devices_per_node else kind.inter_node_bandwidth
    )
    grad_bytes = 2.0 * spec.parameter_count() / (cfg.tp * cfg.pp)
    dp = _ring_allreduce_s(grad_bytes, cfg.dp, dp_bw)
    return IterationTimeBreakdown(compute, slots * (tp_per_slot + pp_per_slot) + dp)


def iteration_time(
    spec: GPTSpec, kind: DeviceKind, cfg: MegatronConfig, eff: Efficiency | None = None
) -> float:
    """Modelled seconds per iteration."""
    return iteration_time_breakdown(spec, kind, cfg).total(eff or Efficiency())


def enumerate_configs(
    spec: GPTSpec, kind: DeviceKind, workers: int, *, check_memory: bool = True
) -> Iterator[MegatronConfig]:
    """All feasible configs on exactly ``workers`` devices.

    TP divides the heads and the node's device count (a TP group never straddles nodes); PP divides
    the layers; DP splits the global batch into whole micro-batches; micro-batch sizes are the
    divisors of the spec's micro-batch (smaller ones trade speed for memory); each is tried with and
    without full activation recomputation.
    """
    heads, layers = spec.num_attention_heads, spec.num_layers
    for tp in _divisors(workers):
        if kind.devices_per_node % tp or heads % tp:
            continue
        for pp in _divisors(workers // tp):
            if layers % pp:
                continue
            dp = workers // (tp * pp)
            for mb in _divisors(spec.micro_batch_size):
                if spec.global_batch_size % (dp * mb):
                    continue
                m = spec.global_batch_size // (dp * mb)
                for recompute in (False, True):
                    cfg = MegatronConfig(tp, pp, dp, mb, m, recompute)
                    if not check_memory or fits_memory(spec, kind, cfg):
                        yield cfg


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    workers: int
    flops_per_s: float
    """Achieved model FLOP/s of the whole task (useful FLOPs: recomputation not counted)."""
    config: MegatronConfig | None
    iteration_s: float | None = None


@dataclass(frozen=True)
class ThroughputTable:
    """T(x) at each feasible worker count, with the config that achieves it.

    Counts not in the table are infeasible (T = 0). Immutable and hashable (planner memo key).
    """

    points: tuple[ThroughputPoint, ...]
    _by_workers: Mapping[int, ThroughputPoint] = field(init=False, repr=False, compare=False, hash=False)
    _hash: int = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        pts = tuple(sorted(self.points, key=lambda p: p.workers))
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "_by_workers", {p.workers: p for p in pts})
        object.__setattr__(self, "_hash", hash(pts))
        if any(p.workers < 1 or p.flops_per_s < 0 for p in pts):
            raise ValueError("points need workers >= 1 and non-negative throughput")

    def __hash__(self) -> int:  # cached: tables are hashed on every precomputed-plan lookup key
        return self._hash

    def __reduce__(self) -> tuple[type[ThroughputTable], tuple[tuple[ThroughputPoint, ...]]]:
        # rebuilt by the constructor: the cached hash is of this process's string hashing, not another's
        return (type(self), (self.points,))

    @classmethod
    def from_points(cls, points: Mapping[int, float]) -> ThroughputTable:
        """A table from measured or hand-made ``{workers: FLOP/s}`` (no configs)."""
        return cls(tuple(ThroughputPoint(x, float(t), None) for x, t in points.items()))

    def throughput(self, workers: int) -> float:
        """T(x): achieved FLOP/s on ``workers`` devices, 0 where infeasible."""
        p = self._by_workers.get(workers)
        return p.flops_per_s if p is not None else 0.0

    def best_config(self, workers: int) -> MegatronConfig | None:
        p = self._by_workers.get(workers)
        return p.config if p is not None else None

    def is_feasible(self, workers: int) -> bool:
        return workers in self._by_workers

    @property
    def feasible_counts(self) -> tuple[int, ...]:
        return tuple(p.workers for p in self.points)

    @property
    def x_min(self) -> int | None:
        """Smallest feasible worker count, ``None`` when the task can never run on this kind."""
        return self.points[0].workers if self.points else None


_TIE = 1e-9
"""Relative difference below which two modelled iteration times are equal."""


def build_throughput_table(
    spec: GPTSpec,
    kind: DeviceKind,
    max_workers: int,
    eff: Efficiency | None = None,
    *,
    unit: int = 1,
) -> ThroughputTable:
    """Best config and T(x) for each feasible ``x`` in ``unit, 2·unit, ... <= max_workers``.

    T(x) = useful model FLOPs per iteration (no recomputation counted, Narayanan's "model FLOPs")
    divided by the modelled iteration time of the fastest feasible config.
    """
    eff = eff or Efficiency()
    useful = spec.flops_per_iteration(recompute=False)
    points: list[ThroughputPoint] = []
    for x in range(unit, max_workers + 1, unit):
        best: tuple[float, MegatronConfig] | None = None
        for cfg in enumerate_configs(spec, kind, x):
            t = iteration_time(spec, kind, cfg, eff)
            if (
                best is None
                or t < best[0] * (1.0 - _TIE)
                # a tie (the model charges nothing per micro-batch, e.g. at PP = 1): the larger
                # micro-batch, as the user asked; smaller ones are for memory (real devices run
                # fewer, larger micro-batches faster: measured 1.7x on the CPU workers)
                or (t <= best[0] * (1.0 + _TIE) and cfg.micro_batch > best[1].micro_batch)
            ):
                best = (t, cfg)
        if best is not None:
            points.append(ThroughputPoint(x, useful / best[0], best[1], best[0]))
    return ThroughputTable(tuple(points))


# --------------------------------------------------------------------------------------------------
# Calibration


@dataclass(frozen=True, slots=True)
class Measurement:
    """A measured iteration time of a config (from the real workers' hook)."""

    config: MegatronConfig
    iteration_s: float


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    efficiency: Efficiency
    rms_relative_error_before: float
    rms_relative_error_after: float
    max_relative_error_after: float
    fitted: tuple[str, ...]
    """Which factors were fitted (the others kept their prior value)."""


def _rel_errors(bds: Sequence[IterationTimeBreakdown], ys: Sequence[float], eff: Efficiency) -> list[float]:
    return [(bd.total(eff) - y) / y for bd, y in zip(bds, ys, strict=True)]


def _rms(xs: Sequence[float]) -> float:
    return math.sqrt(sum(e * e for e in xs) / len(xs)) if xs else 0.0


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; ``None`` when singular."""
    n = len(b)
    m = [[*row, b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            return None
        m[c], m[p] = m[p], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def calibrate(
    spec: GPTSpec, kind: DeviceKind, measurements: Iterable[Measurement], prior: Efficiency | None = None
) -> CalibrationResult:
    """Fit the efficiency factors so modelled iteration times match measured ones.

    time = c·u + k·v + o with u = 1/compute, v = 1/communication, o = overhead. We minimise the sum of
    squared *relative* errors (so small and large configs weigh alike) — a weighted linear least
    squares. Factors must stay positive: we solve every subset of {u, v, o} no larger than the number
    of measurements (the rest keep their prior), discard solutions with non-positive u, v or negative
    o, and keep the one with the smallest error (an exhaustive active-set method; 7 tiny solves).
    """
    prior = prior or Efficiency()
    ms = list(measurements)
    if not ms:
        return CalibrationResult(prior, 0.0, 0.0, 0.0, ())
    bds = [iteration_time_breakdown(spec, kind, m.config) for m in ms]
    ys = [m.iteration_s for m in ms]
    if any(y <= 0 for y in ys):
        raise ValueError("measured iteration times must be positive")
    before = _rms(_rel_errors(bds, ys, prior))
    prior_vals = {"compute": 1.0 / prior.compute, "communication": 1.0 / prior.communication}
    prior_vals["overhead_s"] = prior.overhead_s
    cols = {
        "compute": [bd.compute_s for bd in bds],
        "communication": [bd.communication_s for bd in bds],
        "overhead_s": [1.0] * len(bds),
    }
    best_eff, best_err = prior, before
    best_names: tuple[str, ...] = ()
    names_all = ("compute", "communication", "overhead_s")
    for r in range(1, min(3, len(ms)) + 1):
        for names in combinations(names_all, r):
            fixed = [n for n in names_all if n not in names]
            # residual target after the fixed parts, all rows divided by y (relative error)
            rows = [[cols[n][i] / ys[i] for n in names] for i in range(len(ms))]
            rhs = [(ys[i] - sum(cols[n][i] * prior_vals[n] for n in fixed)) / ys[i] for i in range(len(ms))]
            ata = [[sum(rw[p] * rw[q] for rw in rows) for q in range(r)] for p in range(r)]
            atb = [sum(rw[p] * rhs[i] for i, rw in enumerate(rows)) for p in range(r)]
            sol = _solve(ata, atb)
            if sol is None:
                continue
            vals = dict(prior_vals)
            vals.update(zip(names, sol, strict=True))
            if vals["compute"] <= 0 or vals["communication"] <= 0 or vals["overhead_s"] < 0:
                continue
            eff = Efficiency(1.0 / vals["compute"], 1.0 / vals["communication"], vals["overhead_s"])
            err = _rms(_rel_errors(bds, ys, eff))
            if err < best_err - 1e-15:
                best_eff, best_err, best_names = eff, err, names
    after = _rel_errors(bds, ys, best_eff)
    return CalibrationResult(best_eff, before, _rms(after), max(abs(e) for e in after), best_names)


def measured_slowdown(
    spec: GPTSpec, kind: DeviceKind, measurements: Iterable[Measurement], base: Efficiency | None = None
) -> float | None:
    """The median of measured / modelled iteration time over ``measurements`` (modelled with the ``base``
    factors, the ones an uncalibrated task is planned with); None without a usable measurement."""
    base = base or Efficiency()
    ratios = []
    for m in measurements:
        modelled = iteration_time_breakdown(spec, kind, m.config).total(base)
        if m.iteration_s > 0 and modelled > 0:
            ratios.append(m.iteration_s / modelled)
    return statistics.median(ratios) if ratios else None


def uncalibrated_prior(slowdowns: Iterable[float], base: Efficiency | None = None) -> Efficiency:
    """The factors to plan a never-calibrated task with, beside tasks calibrated on the same device kind:
    ``base`` slowed down by the median of their measured / modelled ratios (:func:`measured_slowdown`), so
    every task of one plan is valued on one basis. Never faster than ``base`` (the prior is conservative);
    ``base`` itself when no task was calibrated.

    Planning such a task at the nominal model beside measured numbers compares two bases: a small model on
    CPU slots ran ~110x slower than modelled, so the nominal figure of an uncalibrated task outbid every
    calibrated one and the plan suspended the high-weight tasks for a weight-1 one."""
    base = base or Efficiency()
    ratios = [s for s in slowdowns if s > 0 and math.isfinite(s)]
    if not ratios:
        return base
    r = max(statistics.median(ratios), 1.0)
    return Efficiency(base.compute / r, base.communication / r, base.overhead_s * r)

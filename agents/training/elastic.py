"""Fast transitions inside the training worker (docs/ARCHITECTURE.md §7.6): the decisions and the state moves.

A worker process lives across epochs. When the agent orders a transition (a ``ReconfigureCommand`` or
a ``RetryCommand`` turned into an order on the hook socket), a surviving process tears down its
process groups, meets the other ranks of the new epoch at the new rendezvous and keeps its model,
optimizer state and accumulated gradients. Fresh processes (replacements, new ranks) join the same
rendezvous. Then every rank of the new epoch tells the others what it holds (:class:`RankState`,
one ``all_gather_object``) and all of them compute the same :class:`ResumePlan` from the same list
(:func:`plan_resume`, pure): which iteration to run, which ranks need state and from whom, which
partial results each data-parallel replica keeps and which micro-batches it computes on top.

Micro-batches have global identities ``(iteration, index)`` (:mod:`agents.training.data`); each
replica's gradient buffer holds the *unscaled* sum of the per-token loss gradients of the
micro-batches it finished (``calculate_per_token_loss``: no ``1/num_microbatches`` in the schedule
and no ``1/dp`` in DDP). After the all-reduce (a sum) the worker scales by ``1/tokens of the global
batch``. So the update does not depend on how the global batch was split among replicas, or on
which replica computed which micro-batch: kept partial results plus redistributed micro-batches
give the failure-free update up to floating-point summation order.

This module holds the pure planning (no torch) and the torch helpers that move state over a
process group (:func:`broadcast_state`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from controlplane.core.protocol import ParallelConfig, RankMapping

STORED_KINDS = frozenset({"memory_snapshot", "checkpoint"})
"""State sources that roll the whole task back to a stored iteration."""


class TransitionSpec(BaseModel):
    """What a worker is told about the transition that brings it into its epoch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["reconfigure", "retry"]
    from_epoch: int | None = None
    previous_parallel: ParallelConfig | None = None
    survivors: list[RankMapping] = Field(default_factory=list)
    resume_iteration: int | None = None


@dataclass(frozen=True)
class RankState:
    """What one rank of the new epoch holds, as told to all others at the start of the epoch."""

    rank: int
    node: str
    dp_rank: int
    shard: tuple[int, int]
    """(tp_rank, pp_rank) in the new layout."""
    has_state: bool
    """Its model + optimizer hold a live state of the new layout (a survivor of the same layout)."""
    next_iteration: int
    """The iteration it would run next (the interrupted one when ``done`` is not empty)."""
    done: tuple[int, ...] = ()
    """Micro-batches of ``next_iteration`` whose gradients sit in its buffer (not yet reduced)."""
    live_iteration: int | None = None
    """A survivor's next iteration even when its layout changed (to count rolled-back iterations)."""
    old_rank: int | None = None
    wants: str | None = None
    """The state-source kind the coordinator chose for it (None: not said)."""
    source_old_rank: int | None = None
    """The old rank of the live holder the coordinator chose for it (peer/same-node sources)."""
    source_iteration: int | None = None
    """The iteration of the stored copy the coordinator chose for it (None: not a stored copy)."""
    local_snapshots: tuple[int, ...] = ()
    """Iterations of which its node holds a complete in-memory snapshot of the task."""


@dataclass(frozen=True)
class ResumePlan:
    mode: Literal["live", "stored"]
    """live: up-to-date survivors hold every shard; stored: everyone loads a stored copy."""
    resume_iteration: int
    """The iteration the new epoch runs first (for ``stored``: decided by the stored copy)."""
    sources: dict[tuple[int, int], int] = field(default_factory=dict)
    """live: per shard, the rank that broadcasts its state to its data-parallel group."""
    receivers: frozenset[int] = frozenset()
    """live: ranks that take their state from their shard's source."""
    kept: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """per new dp rank: micro-batches of ``resume_iteration`` whose gradients it keeps."""
    extra: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """per new dp rank: micro-batches of ``resume_iteration`` it computes."""
    stored_kind: str | None = None
    live_iteration: int | None = None
    """The newest iteration any survivor would have run next (rollback = this - resume)."""
    local_snapshot: int | None = None
    """stored: an iteration every rank's node holds a complete snapshot of, restored by every rank from
    its own node when no stored copy was named (the live state the plan counted on is gone: e.g. a
    retry whose every holder of a shard died) or the named ones are stale and older."""


def split_micro_batches(num: int, dp: int) -> list[tuple[int, ...]]:
    """Contiguous, balanced split of ``num`` global micro-batch indices among ``dp`` replicas.

    When ``dp`` divides ``num`` every replica gets ``num/dp``; otherwise the first ``num % dp`` get one
    more (the global batch is fixed: a shrunk data-parallel group runs more micro-batches each).
    """
    if dp < 1 or num < 1:
        raise ValueError(f"cannot split {num} micro-batches among {dp} replicas")
    base, rem = divmod(num, dp)
    out, start = [], 0
    for r in range(dp):
        n = base + (1 if r < rem else 0)
        out.append(tuple(range(start, start + n)))
        start += n
    return out


def redistribute(num: int, kept: dict[int, tuple[int, ...]], dp: int) -> dict[int, tuple[int, ...]]:
    """Give the micro-batches nobody kept to the replicas, least loaded first (ties: lowest dp rank).

    Load counts kept and newly given micro-batches, so every replica ends the iteration with about
    ``num/dp`` of them; the assignment is deterministic (every rank computes the same one).
    """
    taken = {k for ks in kept.values() for k in ks}
    load = {r: len(kept.get(r, ())) for r in range(dp)}
    extra: dict[int, list[int]] = {r: [] for r in range(dp)}
    for k in range(num):
        if k in taken:
            continue
        r = min(range(dp), key=lambda x: (load[x], x))
        extra[r].append(k)
        load[r] += 1
    return {r: tuple(v) for r, v in extra.items()}


def plan_resume(
    states: Sequence[RankState],
    *,
    num_micro_batches: int,
    dp: int,
    pp: int,
    live_ok: bool = True,
    stale_sources: bool = False,
) -> ResumePlan:
    """The same plan on every rank, from the states all ranks gathered.

    - Live mode when some rank holds live state, every shard of the new layout has an up-to-date
      holder (one at the newest ``next_iteration``) and no rank was told to take a stored copy.
      Ranks without state, and survivors that lag behind, receive it from their shard's source: the
      holder the coordinator named when it is up to date, else the lowest up-to-date rank.
    - Partial results are kept per new data-parallel replica when all its ranks are up-to-date
      survivors with the same done set (pipeline parallelism > 1 never keeps them: a micro-batch's
      backward is spread over the stages). The rest of the iteration's micro-batches are given out
      by :func:`redistribute`.
    - Stored mode otherwise: the caller loads the snapshot / checkpoint (or starts fresh) — or the
      newest snapshot every rank's node holds, from its own node, when no stored copy was named (the
      live state the coordinator counted on is gone) or the named sources are ``stale_sources`` (a
      retry in place reuses its previous launch, whose sources are an older transition's) and older.
    """
    by_rank = {s.rank: s for s in states}
    live = [s for s in states if s.has_state]
    survivors_next = [s.live_iteration for s in states if s.live_iteration is not None]
    live_iteration = max(survivors_next) if survivors_next else None
    stored = sorted({s.wants for s in states if s.wants in STORED_KINDS})
    needed = {s.shard for s in states}
    if live and live_ok and not stored:
        resume = max(s.next_iteration for s in live)
        uptodate = [s for s in live if s.next_iteration == resume]
        holders: dict[tuple[int, int], list[RankState]] = {}
        for s in uptodate:
            holders.setdefault(s.shard, []).append(s)
        if needed <= set(holders):
            sources: dict[tuple[int, int], int] = {}
            for shard, hs in holders.items():
                named = {
                    s.source_old_rank
                    for s in states
                    if s.shard == shard and s.source_old_rank is not None and not s.has_state
                }
                pick = [h for h in hs if h.old_rank is not None and h.old_rank in named]
                sources[shard] = min(pick or hs, key=lambda h: h.rank).rank
            up = {s.rank for s in uptodate}
            receivers = frozenset(r for r in by_rank if r not in up)
            kept: dict[int, tuple[int, ...]] = {}
            for d in range(dp):
                members = [s for s in states if s.dp_rank == d]
                dones = {s.done for s in members}
                if pp == 1 and members and all(s.rank in up for s in members) and len(dones) == 1:
                    kept[d] = next(iter(dones))
                else:
                    kept[d] = ()
            # Two replicas never own the same micro-batch; if they claim to (a bug), keep neither.
            seen: set[int] = set()
            for d in sorted(kept):
                if seen & set(kept[d]):
                    kept[d] = ()
                seen |= set(kept[d])
            if any(kept.values()):
                extra = redistribute(num_micro_batches, kept, dp)
            else:  # an iteration boundary: the ordinary split
                extra = dict(enumerate(split_micro_batches(num_micro_batches, dp)))
            return ResumePlan("live", resume, sources, receivers, kept, extra, live_iteration=live_iteration)
    kind = stored[0] if stored else None
    common = set.intersection(*(set(s.local_snapshots) for s in states)) if states else set()
    local = max(common) if common else None
    named_its = [
        s.source_iteration for s in states if s.wants in STORED_KINDS and s.source_iteration is not None
    ]
    if local is not None and not stale_sources and named_its:
        local = None  # the coordinator chose a stored copy for this transition: it is taken
    elif local is not None and named_its and local <= max(named_its):
        local = None
    return ResumePlan("stored", -1, stored_kind=kind, live_iteration=live_iteration, local_snapshot=local)


# --------------------------------------------------------------------------------------------------
# State moves over a process group (torch)
# --------------------------------------------------------------------------------------------------


def _skeleton(obj: Any, tensors: list[Any]) -> Any:
    import torch

    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return {"__tensor__": len(tensors) - 1, "shape": list(obj.shape), "dtype": str(obj.dtype)}
    if isinstance(obj, dict):
        return {k: _skeleton(v, tensors) for k, v in obj.items()}
    if isinstance(obj, tuple):  # kept a tuple (Adam's ``betas``): checkpoint validation compares types
        return tuple(_skeleton(v, tensors) for v in obj)
    if isinstance(obj, list):
        return [_skeleton(v, tensors) for v in obj]
    return obj


def _rebuild(obj: Any, tensors: list[Any]) -> Any:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            return tensors[obj["__tensor__"]]
        return {k: _rebuild(v, tensors) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(_rebuild(v, tensors) for v in obj)
    if isinstance(obj, list):
        return [_rebuild(v, tensors) for v in obj]
    return obj


def torch_optimizers(optimizer: Any) -> list[Any]:
    """The ``torch.optim`` optimizers inside a Megatron optimizer (chained or not)."""
    inner = getattr(optimizer, "chained_optimizers", None) or [optimizer]
    return [o.optimizer for o in inner]


def broadcast_state(model: Any, optimizer: Any, src: int, group: Any, receive: bool) -> int:
    """Broadcast parameters and optimizer state from global rank ``src`` over ``group``.

    Every member calls it. The skeleton of the optimizer state (keys, shapes, dtypes; no tensor
    data) goes first as a small object, then each tensor with ``dist.broadcast``. Returns the bytes
    received (0 on the source, and on members with ``receive=False``, which take the same bytes
    but keep their own copy: they hold the same values already).
    """
    import torch
    import torch.distributed as dist

    moved = 0
    with torch.no_grad():
        for p in model.parameters():
            buf = p.data if receive or dist.get_rank() == src else p.data.clone()
            dist.broadcast(buf, src=src, group=group)
            if receive and dist.get_rank() != src:
                moved += buf.numel() * buf.element_size()
        for opt in torch_optimizers(optimizer):
            tensors: list[Any] = []
            payload: list[Any] = [None]
            if dist.get_rank() == src:
                payload = [_skeleton(opt.state_dict(), tensors)]
            dist.broadcast_object_list(payload, src=src, group=group)
            skel = payload[0]
            if dist.get_rank() != src:
                specs: list[tuple[list[int], str]] = []
                _collect_specs(skel, specs)
                tensors = [torch.empty(shape, dtype=getattr(torch, dt.split(".")[-1])) for shape, dt in specs]
            for t in tensors:
                dist.broadcast(t, src=src, group=group)
                if receive and dist.get_rank() != src:
                    moved += t.numel() * t.element_size()
            if receive and dist.get_rank() != src:
                opt.load_state_dict(_rebuild(skel, tensors))
    return moved


def _collect_specs(obj: Any, out: list[tuple[list[int], str]]) -> None:
    if isinstance(obj, dict):
        if "__tensor__" in obj:
            while len(out) <= obj["__tensor__"]:
                out.append(([], "torch.float32"))
            out[obj["__tensor__"]] = (list(obj["shape"]), str(obj["dtype"]))
            return
        for v in obj.values():
            _collect_specs(v, out)
    elif isinstance(obj, list | tuple):
        for v in obj:
            _collect_specs(v, out)


def state_digest(model: Any, optimizer: Any) -> dict[str, Any]:
    """Parameters and optimizer state (copies), for tests and drills that compare states.

    The optimizer part is canonical: per parameter in parameter-group order, its state entries in key
    order, scalars (Adam's ``step``, an int or a tensor depending on how it was loaded) as float64.
    """
    import torch

    out: dict[str, Any] = {
        "params": {n: p.detach().clone() for n, p in model.named_parameters()},
        "optimizer": [],
    }
    for opt in torch_optimizers(optimizer):
        entries = []
        for group in opt.param_groups:
            for p in group["params"]:
                st = opt.state.get(p, {})
                for k in sorted(st):
                    v = st[k]
                    if isinstance(v, torch.Tensor) and v.dim() > 0:
                        entries.append(v.detach().clone())
                    else:
                        entries.append(torch.tensor(float(v), dtype=torch.float64))
        out["optimizer"].append(entries)
    return out

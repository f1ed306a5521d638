"""In-memory snapshots of a worker's model + optimizer state (docs/ARCHITECTURE.md §7.6, §2), worker side.

Every K iterations each rank copies its shard of the model and optimizer state into host buffers
(synchronously: a memcpy on CPU, a device-to-host copy into pinned memory on a GPU) and a background
thread writes them into the agent's shared-memory directory (``$UNICRON_SNAPSHOT_DIR``, a tmpfs owned
by the agent, so it outlives the worker). Training continues while the file is written.

Call sites in the worker (the only lines it needs)::

    snap = SnapshotWriter.from_env(assign.task_id, assign.epoch, assign.rank, launch)  # None: off
    ...after optimizer.step() of iteration ``it``:
    if snap is not None: snap.maybe_snapshot(it, sharded_state)   # sharded_state() -> dict
    ...at start, when a StateSource says ``memory_snapshot`` (after the agent fetched it, if remote):
    start = restore(find_snapshot(root, task_id, src.iteration), model, optimizer) + 1

``sharded_state`` is the worker's ``{"model": model.sharded_state_dict(), "optimizer":
optimizer.sharded_state_dict(model_sd)}``; ``snap.close()`` at the end waits for the last write.

**Format (one directory per snapshot and node):** ``<root>/<origin node>/<task>/e<epoch>-i<iteration>/``
holds, per rank, ``rank_NNNNN.pt`` (one ``torch.save`` of a flat buffer per dtype plus, for every
``ShardedTensor`` of megatron's sharded state dict, its key, global shape and global offset; the
``ShardedObject`` payloads; the non-sharded "common" values) and ``rank_NNNNN.json`` (its
:class:`RankMeta`, written after the data: the rank's shard is complete). ``COMPLETE`` is written last,
by each rank's writer, only after *every* rank of the task has written its shard (a counter in the
epoch's rendezvous ``TCPStore``): a directory without it is never loaded, listed or replicated.

Why this format and not ``dist_checkpointing.save``: a dist_checkpointing save is collective
(metadata exchange and a global plan on the training thread) and took ≈ 1.6 s here (it forks a
writer); a per-rank flat buffer costs a memcpy on the training thread and needs no collective. It is
still reshardable because it keeps megatron's sharding metadata: :func:`load_snapshot` assembles
each requested shard of the *current* layout from the overlapping pieces of the stored ones (any
TP/PP/DP change; same layout is an exact-box fast path). ``bench/snapshot.py`` measures both.

Data files are read with ``torch.load(weights_only=True)``: a replica fetched from a peer cannot run
code. ``ShardedObject`` payloads must therefore be tensors, primitives or containers of them (true
for the local layer spec: ``_extra_state`` is ``None``).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import queue
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from controlplane.core.protocol import WorkerLaunch

log = logging.getLogger("agents.training.snapshot")

ENV_SNAPSHOT_DIR = "UNICRON_SNAPSHOT_DIR"
"""The agent's snapshot root (a directory on /dev/shm)."""
ENV_SNAPSHOT_NODE = "UNICRON_SNAPSHOT_NODE"
"""This node's name: snapshots go under ``<root>/<node>/``."""

COMPLETE = "COMPLETE"
FORMAT_VERSION = 1
_NAME_RE = re.compile(r"^e(\d{6})-i(\d{9})$")
_SAFE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
_RANK_FILE_RE = re.compile(r"^rank_(\d{5})\.(pt|json)$")


class SnapshotError(RuntimeError):
    """A snapshot is missing, incomplete, or does not cover the requested state."""


# ---------------------------------------------------------------------------------------------------
# Layout on disk (torch-free: the agent's store uses these too)
# ---------------------------------------------------------------------------------------------------


def safe_name(value: str, what: str) -> str:
    """Task ids and node names become path components: refuse anything that is not a plain name."""
    if not _SAFE_RE.match(value):
        raise ValueError(f"{what} {value!r} is not usable as a file name (letters, digits, . _ -)")
    return value


def snapshot_name(epoch: int, iteration: int) -> str:
    return f"e{epoch:06d}-i{iteration:09d}"


def parse_snapshot_name(name: str) -> tuple[int, int] | None:
    """``(epoch, iteration)`` of a snapshot directory name, or None for anything else."""
    m = _NAME_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def snapshot_path(root: Path, origin: str, task_id: str, epoch: int, iteration: int) -> Path:
    return root / safe_name(origin, "node") / safe_name(task_id, "task id") / snapshot_name(epoch, iteration)


def rank_data_file(rank: int) -> str:
    return f"rank_{rank:05d}.pt"


def rank_meta_file(rank: int) -> str:
    return f"rank_{rank:05d}.json"


def is_snapshot_file(name: str) -> bool:
    return name == COMPLETE or _RANK_FILE_RE.match(name) is not None


def is_complete(path: Path) -> bool:
    return (path / COMPLETE).is_file()


class RankMeta(BaseModel):
    """What one rank's shard is (``rank_NNNNN.json``, written after its data)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: int = FORMAT_VERSION
    task_id: str
    epoch: int
    iteration: int
    rank: int
    world_size: int
    tp: int
    pp: int
    dp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    origin_node: str
    replica: str | None = None
    run: str | None = None
    """Which run of the epoch wrote it (its rendezvous ``host:port``): a directory left by an earlier
    run with the same names (an agent restart, a test) never mixes with this one."""
    nbytes: int
    written_at: float


def read_rank_metas(path: Path) -> list[RankMeta]:
    """The rank shards present in one snapshot directory (those whose metadata is written).

    With a ``COMPLETE`` marker, only the shards of the run that completed it.
    """
    run: str | None = None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        run = json.loads((path / COMPLETE).read_bytes()).get("run")
    metas = []
    for f in sorted(path.glob("rank_*.json")):
        try:
            meta = RankMeta.model_validate_json(f.read_bytes())
        except (OSError, ValueError) as e:
            raise SnapshotError(f"bad rank metadata {f}: {e}") from e
        if run is None or meta.run == run:
            metas.append(meta)
    return metas


def complete_iterations(root: Path | str, task_id: str) -> tuple[int, ...]:
    """The iterations of which ``root`` holds a complete snapshot directory of ``task_id`` (any origin,
    any epoch), ascending."""
    root = Path(root)
    found: set[int] = set()
    for origin in (p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        tdir = origin / task_id
        for d in tdir.iterdir() if tdir.is_dir() else []:
            parsed = parse_snapshot_name(d.name)
            if parsed is not None and is_complete(d):
                found.add(parsed[1])
    return tuple(sorted(found))


def find_snapshot(root: Path | str, task_id: str, iteration: int, epoch: int | None = None) -> list[Path]:
    """Every complete directory of ``task_id`` at ``iteration`` under ``root`` (all origins).

    A node may hold its own ranks' shards and a peer's replica of others; together they are the
    snapshot. With several epochs at the same iteration, the newest epoch is taken.
    """
    root = Path(root)
    found: dict[int, list[Path]] = {}
    for origin in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        tdir = origin / task_id
        if not tdir.is_dir():
            continue
        for d in tdir.iterdir():
            parsed = parse_snapshot_name(d.name)
            if parsed is None or parsed[1] != iteration or (epoch is not None and parsed[0] != epoch):
                continue
            if is_complete(d):
                found.setdefault(parsed[0], []).append(d)
    if not found:
        raise SnapshotError(f"no complete snapshot of task {task_id!r} at iteration {iteration} in {root}")
    return sorted(found[max(found)])


# ---------------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardPosition:
    tp: int
    pp: int
    dp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int


def current_shard_position() -> ShardPosition:
    """This rank's place in megatron's parallel state (initialised by the worker)."""
    from megatron.core import parallel_state as ps

    return ShardPosition(
        tp=ps.get_tensor_model_parallel_world_size(),
        pp=ps.get_pipeline_model_parallel_world_size(),
        dp=ps.get_data_parallel_world_size(),
        tp_rank=ps.get_tensor_model_parallel_rank(),
        pp_rank=ps.get_pipeline_model_parallel_rank(),
        dp_rank=ps.get_data_parallel_rank(),
    )


@dataclass
class _Job:
    iteration: int
    entries: list[dict[str, Any]]
    flat: dict[str, Any]
    objects: list[dict[str, Any]]
    common: Any
    nbytes: int
    event: Any = None  # a CUDA event to wait for before reading ``flat`` (GPU only)


@dataclass
class SnapshotStats:
    staged: int = 0
    completed: int = 0
    skipped_busy: int = 0
    incomplete: int = 0
    errors: int = 0
    last_stage_s: float = 0.0
    last_write_s: float = 0.0
    last_error: str | None = None
    stage_s: list[float] = field(default_factory=list)


class SnapshotWriter:
    """Takes a rank's snapshot every ``interval`` iterations; writes it from a background thread."""

    def __init__(
        self,
        *,
        root: Path,
        origin: str,
        task_id: str,
        epoch: int,
        rank: int,
        world_size: int,
        interval: int,
        replica: str | None = None,
        store_addr: tuple[str, int] | None = None,
        position: ShardPosition | None = None,
        complete_timeout_s: float = 60.0,
        run: str | None = None,
    ) -> None:
        if interval < 1:
            raise ValueError("snapshot interval must be >= 1")
        self.root = Path(root)
        self.origin = safe_name(origin, "node")
        self.task_id = safe_name(task_id, "task id")
        self.epoch = epoch
        self.rank = rank
        self.world_size = world_size
        self.interval = interval
        self.replica = replica
        self.store_addr = store_addr
        self.position = position
        self.complete_timeout_s = complete_timeout_s
        self.run = run or (f"{store_addr[0]}:{store_addr[1]}" if store_addr else f"pid{os.getpid()}")
        self.stats = SnapshotStats()
        self._signature: tuple[Any, ...] | None = None
        self._flat: dict[str, Any] = {}
        self._free = threading.Event()  # the staging buffers may be overwritten
        self._free.set()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"snapshot-writer-{rank}", daemon=True)
        self._thread.start()

    @classmethod
    def from_env(
        cls,
        task_id: str,
        epoch: int,
        rank: int,
        launch: WorkerLaunch,
        environ: dict[str, str] | None = None,
    ) -> SnapshotWriter | None:
        """The writer the agent asked for, or None (no ``$UNICRON_SNAPSHOT_DIR`` or K = 0)."""
        env = os.environ if environ is None else environ
        root = env.get(ENV_SNAPSHOT_DIR)
        if not root or launch.snapshot_interval <= 0:
            return None
        rdzv = launch.rendezvous
        return cls(
            root=Path(root),
            origin=env.get(ENV_SNAPSHOT_NODE) or socket.gethostname(),
            task_id=task_id,
            epoch=epoch,
            rank=rank,
            world_size=launch.world_size,
            interval=launch.snapshot_interval,
            replica=launch.snapshot_replica,
            store_addr=(rdzv.master_addr, rdzv.master_port) if launch.world_size > 1 else None,
            complete_timeout_s=max(rdzv.timeout_s, launch.collective_timeout_s),
            run=f"{rdzv.master_addr}:{rdzv.master_port}",
        )

    def due(self, iteration: int) -> bool:
        return (iteration + 1) % self.interval == 0

    def maybe_snapshot(self, iteration: int, state_fn: Callable[[], dict[str, Any]]) -> bool:
        """After iteration ``iteration``'s optimizer step: snapshot if due. True when staged."""
        if not self.due(iteration):
            return False
        if not self._free.is_set():  # the previous one is still being written: skip, never stall
            self.stats.skipped_busy += 1
            return False
        import torch

        with torch._C.DisableTorchFunction():  # see _stage: metadata and host copies only
            return self.snapshot(iteration, state_fn())

    def path(self, iteration: int) -> Path:
        return snapshot_path(self.root, self.origin, self.task_id, self.epoch, iteration)

    def snapshot(self, iteration: int, sharded_state_dict: dict[str, Any]) -> bool:
        """Copy the state into the staging buffers now; the file is written in the background.

        Returns False (and counts it) when the previous snapshot is still being written: a
        snapshot never stalls training.
        """
        if not self._free.is_set():
            self.stats.skipped_busy += 1
            return False
        t0 = time.perf_counter()
        job = self._stage(iteration, sharded_state_dict)
        self._free.clear()
        self._jobs.put(job)
        self.stats.staged += 1
        self.stats.last_stage_s = time.perf_counter() - t0
        self.stats.stage_s.append(self.stats.last_stage_s)
        return True

    def _stage(self, iteration: int, sharded_state_dict: dict[str, Any]) -> _Job:
        import torch

        if self.position is None:
            self.position = current_shard_position()
        # Plain host copies: skip any torch-function mode (the CPU compatibility layer intercepts
        # every tensor call, which made staging several times slower; it redirects nothing here).
        with torch._C.DisableTorchFunction():
            return self._stage_plain(iteration, sharded_state_dict)

    def _stage_plain(self, iteration: int, sharded_state_dict: dict[str, Any]) -> _Job:
        import torch
        from megatron.core.dist_checkpointing.dict_utils import dict_list_map_outplace, nested_values
        from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
        from megatron.core.dist_checkpointing.state_dict_utils import save_preprocess

        sharded_part, common = save_preprocess(sharded_state_dict, validate_access_integrity=False)
        tensors: list[Any] = []
        objects: list[dict[str, Any]] = []
        for v in nested_values(sharded_part):
            if isinstance(v, ShardedTensor):
                if v.flattened_range is not None:
                    raise SnapshotError(
                        f"{v.key}: flattened (distributed-optimizer) shards are not supported"
                    )
                tensors.append(v)
            elif isinstance(v, ShardedObject):
                objects.append(
                    {
                        "key": v.key,
                        "global_shape": list(v.global_shape),
                        "global_offset": list(v.global_offset),
                        "data": _cpu_copy(v.data),
                    }
                )
        signature = tuple((t.key, tuple(t.global_offset), tuple(t.data.shape), t.data.dtype) for t in tensors)
        if signature != self._signature:
            self._flat = {}
            sizes: dict[Any, int] = {}
            for t in tensors:
                sizes[t.data.dtype] = sizes.get(t.data.dtype, 0) + t.data.numel()
            pin = torch.cuda.is_available()
            for dt, n in sizes.items():
                self._flat[str(dt)] = torch.empty(n, dtype=dt, device="cpu", pin_memory=pin)
            self._signature = signature
        offsets: dict[str, int] = {k: 0 for k in self._flat}
        entries = []
        on_gpu = False
        with torch.no_grad():
            for t in tensors:
                dname = str(t.data.dtype)
                o, n = offsets[dname], t.data.numel()
                on_gpu = on_gpu or t.data.is_cuda
                self._flat[dname][o : o + n].copy_(t.data.detach().reshape(-1), non_blocking=t.data.is_cuda)
                offsets[dname] = o + n
                entries.append(
                    {
                        "key": t.key,
                        "global_shape": list(t.global_shape),
                        "global_offset": list(t.global_offset),
                        "prepend": int(t.prepend_axis_num),
                        "shape": list(t.data.shape),
                        "dtype": dname,
                        "offset": o,
                        "numel": n,
                    }
                )
        event = None
        if on_gpu:
            event = torch.cuda.Event()
            event.record()
        common_copy = dict_list_map_outplace(_cpu_copy, common)
        nbytes = sum(int(b.numel() * b.element_size()) for b in self._flat.values())
        return _Job(iteration, entries, dict(self._flat), objects, common_copy, nbytes, event)

    # -------------------------------------------------------------- background thread
    def _run(self) -> None:
        store: Any = None
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                t0 = time.perf_counter()
                path = self._write(job)
                self.stats.last_write_s = time.perf_counter() - t0
                if store is None and self.store_addr is not None:
                    store = self._connect()
                if self._await_all_ranks(store, job.iteration):
                    _write_atomic(
                        path / COMPLETE,
                        json.dumps(
                            {
                                "world_size": self.world_size,
                                "epoch": self.epoch,
                                "iteration": job.iteration,
                                "run": self.run,
                            }
                        ).encode(),
                    )
                    self.stats.completed += 1
                else:
                    self.stats.incomplete += 1
            except Exception as e:  # a failed snapshot must never take training down
                self._free.set()
                self.stats.errors += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                log.warning("snapshot of iteration %s failed: %s", job.iteration, self.stats.last_error)

    def _write(self, job: _Job) -> Path:
        import torch

        if job.event is not None:
            job.event.synchronize()
        assert self.position is not None
        path = self.path(job.iteration)
        path.mkdir(parents=True, exist_ok=True)
        # COMPLETE is written only after every rank of this run wrote, this one included: one that
        # exists now was left by an earlier run with the same names. It goes before our shard lands.
        (path / COMPLETE).unlink(missing_ok=True)
        payload = {
            "format": FORMAT_VERSION,
            "entries": job.entries,
            "flat": job.flat,
            "objects": job.objects,
            "common": job.common,
        }
        data = path / rank_data_file(self.rank)
        tmp = data.with_name(data.name + ".tmp")
        torch.save(payload, str(tmp))
        os.replace(tmp, data)
        self._free.set()  # the buffers are on file: the next snapshot may stage
        p = self.position
        meta = RankMeta(
            task_id=self.task_id,
            epoch=self.epoch,
            iteration=job.iteration,
            rank=self.rank,
            world_size=self.world_size,
            tp=p.tp,
            pp=p.pp,
            dp=p.dp,
            tp_rank=p.tp_rank,
            pp_rank=p.pp_rank,
            dp_rank=p.dp_rank,
            origin_node=self.origin,
            replica=self.replica,
            run=self.run,
            nbytes=data.stat().st_size,
            written_at=time.time(),
        )
        _write_atomic(path / rank_meta_file(self.rank), meta.model_dump_json().encode())
        return path

    def _connect(self) -> Any:
        import torch.distributed as dist

        assert self.store_addr is not None
        host, port = self.store_addr
        return dist.TCPStore(  # type: ignore[attr-defined]
            host, port, is_master=False, timeout=timedelta(seconds=self.complete_timeout_s)
        )

    def _await_all_ranks(self, store: Any, iteration: int) -> bool:
        """Count this rank's shard as written; wait until every rank's is (or a newer snapshot comes)."""
        if store is None:
            return True
        key = f"unicron/snapshot/{self.task_id}/{self.epoch}/{iteration}"
        count = store.add(key, 1)
        deadline = time.monotonic() + self.complete_timeout_s
        while count < self.world_size:
            if not self._jobs.empty() or self._closing.is_set() or time.monotonic() > deadline:
                return False  # superseded, closing, or a rank died: this one stays incomplete
            time.sleep(0.002)
            count = store.add(key, 0)
        return True

    def wait_idle(self, timeout_s: float = 30.0) -> bool:
        """Wait until every staged snapshot is written and completed (or given up)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            s = self.stats
            if s.completed + s.incomplete + s.errors >= s.staged and self._jobs.empty():
                return True
            time.sleep(0.002)
        return False

    def close(self, grace_s: float = 2.0, timeout_s: float = 30.0) -> None:
        """Finish the last snapshot (its peers have ``grace_s`` to write theirs) and stop the thread.

        Never waits for dead peers longer than the grace: a reconfiguration in place closes the old
        epoch's writer while some of its ranks may be gone.
        """
        self.wait_idle(grace_s)
        self._closing.set()
        self._jobs.put(None)
        self._thread.join(timeout_s)


def _cpu_copy(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().to("cpu", copy=True)
    return copy.deepcopy(v)


def _write_atomic(path: Path, data: bytes) -> None:
    # A temporary name of its own: every rank of a node writes the same COMPLETE marker of a shared
    # directory, and with one shared ".tmp" the first rename left the second with nothing to rename
    # (FileNotFoundError: that rank's snapshot counted as failed; seen in CI).
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------------
# Loading (same layout: exact-box copies; another layout: assembled from overlapping pieces)
# ---------------------------------------------------------------------------------------------------


@dataclass
class _Piece:
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    global_shape: tuple[int, ...]
    tensor: Any  # shaped like the box (prepended axes of length 1)


def _box(
    offset: Sequence[int], prepend: int, shape: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    lo = tuple(int(o) for o in offset)
    sizes = [1] * prepend + [int(s) for s in shape]
    if len(sizes) != len(lo):
        raise SnapshotError(f"shard rank mismatch: offset {lo}, prepend {prepend}, shape {list(shape)}")
    return lo, tuple(a + s for a, s in zip(lo, sizes, strict=True))


def _read_pieces(
    dirs: Iterable[Path],
) -> tuple[dict[str, list[_Piece]], dict[tuple[str, tuple[int, ...]], Any], Any, int]:
    import torch

    pieces: dict[str, list[_Piece]] = {}
    objects: dict[tuple[str, tuple[int, ...]], Any] = {}
    common: Any = None
    common_rank: int | None = None
    iterations: set[int] = set()
    for d in dirs:
        if not is_complete(d):
            raise SnapshotError(f"{d} is not a complete snapshot (no {COMPLETE} marker)")
        for meta in read_rank_metas(d):
            iterations.add(meta.iteration)
            payload = torch.load(str(d / rank_data_file(meta.rank)), weights_only=True, mmap=True)
            if payload.get("format") != FORMAT_VERSION:
                raise SnapshotError(f"{d}: unknown snapshot format {payload.get('format')!r}")
            flat = payload["flat"]
            for e in payload["entries"]:
                lo, hi = _box(e["global_offset"], e["prepend"], e["shape"])
                t = flat[e["dtype"]][e["offset"] : e["offset"] + e["numel"]]
                t = t.view([h - low for low, h in zip(lo, hi, strict=True)])
                pieces.setdefault(e["key"], []).append(_Piece(lo, hi, tuple(e["global_shape"]), t))
            for o in payload["objects"]:
                objects.setdefault((o["key"], tuple(o["global_offset"])), o["data"])
            if common_rank is None or meta.rank < common_rank:
                common, common_rank = payload["common"], meta.rank
    if common_rank is None:
        raise SnapshotError(f"no rank shards in {list(dirs)}")
    if len(iterations) != 1:
        raise SnapshotError(f"snapshot directories mix iterations {sorted(iterations)}")
    return pieces, objects, common, iterations.pop()


def _assemble(st: Any, pieces: dict[str, list[_Piece]]) -> Any:
    import torch

    local_shape = tuple(st.local_shape)
    lo, hi = _box(st.global_offset, st.prepend_axis_num, local_shape)
    candidates = pieces.get(st.key, [])
    for p in candidates:  # fast path: the same shard was stored (same layout)
        if p.lo == lo and p.hi == hi:
            return p.tensor.reshape(local_shape).to(dtype=st.dtype, copy=True)
    box_shape = [h - a for a, h in zip(lo, hi, strict=True)]
    out = torch.empty(box_shape, dtype=st.dtype)
    covered = torch.zeros(box_shape, dtype=torch.bool)
    for p in candidates:
        ilo = [max(a, b) for a, b in zip(lo, p.lo, strict=True)]
        ihi = [min(a, b) for a, b in zip(hi, p.hi, strict=True)]
        if any(a >= b for a, b in zip(ilo, ihi, strict=True)):
            continue
        dst = tuple(slice(a - o, b - o) for a, b, o in zip(ilo, ihi, lo, strict=True))
        src = tuple(slice(a - o, b - o) for a, b, o in zip(ilo, ihi, p.lo, strict=True))
        out[dst] = p.tensor[src]
        covered[dst] = True
    if not bool(covered.all()):
        raise SnapshotError(
            f"snapshot does not cover {st.key} at offset {tuple(st.global_offset)} shape {local_shape}"
            f" ({int(covered.sum())}/{covered.numel()} elements; {len(candidates)} stored pieces)"
        )
    return out.reshape(local_shape)


def load_snapshot(
    paths: Path | str | Sequence[Path | str], sharded_state_dict: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    """Load a snapshot into the current layout's ``sharded_state_dict``.

    Returns ``(state_dict, iteration)`` like ``dist_checkpointing.load`` returns a state dict:
    feed ``state["model"]`` / ``state["optimizer"]`` to ``load_state_dict``. ``paths`` are the
    snapshot's complete directories on this node (see :func:`find_snapshot`); they must together
    hold every piece of the requested shards (any layout).
    """
    from megatron.core.dist_checkpointing.dict_utils import dict_list_map_outplace, merge
    from megatron.core.dist_checkpointing.mapping import (
        ShardedObject,
        ShardedTensor,
        apply_factory_merges,
    )
    from megatron.core.dist_checkpointing.state_dict_utils import load_preprocess
    from megatron.core.dist_checkpointing.utils import extract_sharded_base

    dirs = [Path(paths)] if isinstance(paths, (str, Path)) else [Path(p) for p in paths]
    pieces, objects, common, iteration = _read_pieces(dirs)
    sharded, nonpersistent, factories = load_preprocess(sharded_state_dict)
    sharded, _ = extract_sharded_base(sharded)

    def resolve(v: Any) -> Any:
        if isinstance(v, ShardedTensor):
            return _assemble(v, pieces)
        if isinstance(v, ShardedObject):
            k = (v.key, tuple(v.global_offset))
            if k not in objects:
                raise SnapshotError(f"snapshot lacks object {v.key} at {tuple(v.global_offset)}")
            return copy.deepcopy(objects[k])
        return v

    state = copy.deepcopy(common)
    merge(state, nonpersistent)
    merge(state, dict_list_map_outplace(resolve, sharded))
    state = apply_factory_merges(state, factories)
    return state, iteration


def restore(paths: Path | str | Sequence[Path | str], model: Any, optimizer: Any) -> int:
    """Load a snapshot into a megatron ``model`` (unwrapped) and its optimizer; returns its iteration."""
    model_sd = model.sharded_state_dict()
    state, iteration = load_snapshot(
        paths, {"model": model_sd, "optimizer": optimizer.sharded_state_dict(model_sd, is_loading=True)}
    )
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return iteration

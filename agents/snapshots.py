"""The agent's in-memory snapshot store (docs/ARCHITECTURE.md §7.6): keep, list, replicate and serve
snapshots.

Workers write their shards under ``<root>/<this node>/<task>/e<epoch>-i<iteration>/`` (see
:mod:`agents.training.snapshot`); the root is a tmpfs directory (``/dev/shm``) owned by the agent, so
a snapshot outlives the worker that wrote it. The store:

- scans the root, lists the *complete* snapshots (``COMPLETE`` marker present) as ``SnapshotInfo``,
  one per (task, origin node, epoch, iteration); a half-written one is never listed;
- keeps only the newest complete snapshot per (task, origin) and deletes the older ones, the
  incomplete ones older than it, stale incomplete ones, and everything of a dropped task; the one
  complete snapshot just before the newest is kept for ``superseded_grace_s`` after the newest
  completed, because a transition planned from the last heartbeat may still fetch it;
- replicates each new complete snapshot of this node's ranks to the peer agent named in the
  workers' launch (``WorkerLaunch.snapshot_replica``), and receives peers' replicas;
- serves snapshots to peers and fetches a peer's into local shm (``await store.fetch(...)``);
- deletes what it holds when it closes (the agent stops): its root under ``/dev/shm`` goes with it.
  An agent that dies without closing leaves its snapshots; restarted with the same run directory it
  finds them again.

Transport: one TCP connection per request. Frames are a 4-byte big-endian length and a JSON header;
file bytes follow raw, with their sizes in the header (``put``: a replica pushed to a peer;
``get``: a snapshot fetched from a peer). Received files go to a temporary directory that is renamed
into place whole, so a partial transfer is never visible. Every step has a timeout.

Authentication: every request names one task and carries an HMAC-SHA256, made with the task's
snapshot key (``TrainingTask.snapshot_secret``, handed to the agents of the task in their
``start_workers`` / ``reconfigure`` commands and to its replica peers in a ``snapshot_grant``), over
(operation, task, epoch, iteration, origin, file names and sizes, total size, timestamp, nonce). The
server checks it before it reads or writes a byte of snapshot data and refuses: a task it has no key
for, a wrong MAC, a timestamp more than ``max_clock_skew_s`` away, a nonce seen before, a ``put`` of
this node's own snapshots or of a dropped task, and a declared size above :meth:`SnapshotStore.limit`
(the configured cap, the free space of the snapshot filesystem, and twice the largest snapshot of the
task it holds). A ``get`` reply carries a MAC over the request's nonce and the snapshot list, so the
fetcher knows the peer holds the key too; the file bytes themselves are not MACed (the threat is
another local or network client, not a man in the middle: put TLS or a private network under the
snapshot plane on a shared fabric). Refusals are logged and counted (:attr:`SnapshotStore.refused`,
:attr:`SnapshotStore.refusals`). The snapshot root is 0700, received directories 0700, files 0600.

The agent needs these lines::

    store = SnapshotStore(node, SnapshotStoreConfig(root=..., host=..., port=...))
    await store.start()                              # before starting workers
    cfg.worker_env.update(store.worker_env())        # UNICRON_SNAPSHOT_DIR / UNICRON_SNAPSHOT_NODE
    Hello(..., snapshot_endpoint=store.endpoint, snapshots=store.infos())
    Heartbeat(..., snapshots=store.infos())
    store.set_secret(task_id, secret)                 # from start_workers / reconfigure / snapshot_grant
    await store.fetch(src.endpoint, task_id, src.iteration, epoch)  # a memory_snapshot source on a peer
    store.drop_task(task_id)                          # the task ended or was cancelled
    await store.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import secrets
import shutil
import struct
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.settings import snapshot_max_bytes
from agents.training.snapshot import (
    COMPLETE,
    ENV_SNAPSHOT_DIR,
    ENV_SNAPSHOT_NODE,
    SnapshotError,
    find_snapshot,
    is_complete,
    is_snapshot_file,
    parse_snapshot_name,
    read_rank_metas,
    safe_name,
    snapshot_name,
)
from controlplane.core.protocol import SnapshotInfo

log = logging.getLogger("agents.snapshots")

_HEADER = struct.Struct(">I")
MAX_HEADER_BYTES = 1 << 20
MAX_FILE_BYTES = 1 << 40
CHUNK = 4 << 20
INCOMING = ".incoming"
DIR_MODE = 0o700
FILE_MODE = 0o600
SIZE_SLACK = 64 << 20
"""A snapshot may grow this much beyond twice the largest one of its task held here."""
_NONCE_BYTES = 16


class SnapshotTransferError(RuntimeError):
    """A peer refused a request, broke off, or sent something malformed."""


class SnapshotRefused(SnapshotTransferError):
    """A request failed authentication or a limit (counted in ``SnapshotStore.refusals``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def request_mac(key: bytes, fields: dict[str, Any]) -> str:
    """HMAC-SHA256 of a request's signed fields (canonical JSON: sorted keys, no spaces)."""
    body = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


_SIGNED = ("op", "task_id", "epoch", "iteration", "origin", "files", "size", "ts", "nonce")


@dataclass
class SnapshotStoreConfig:
    root: Path | None = None
    """Default: ``/dev/shm/unicron-snapshots-<node>`` (a temp dir where there is no /dev/shm)."""
    host: str = "127.0.0.1"
    """Bind address of the peer server (0.0.0.0 on a real cluster)."""
    port: int = 0
    """0: any free port (reported in ``endpoint``)."""
    advertise_host: str | None = None
    """The host peers dial (default: ``host``, or this machine's name when bound to 0.0.0.0)."""
    scan_interval_s: float = 0.2
    timeout_s: float = 30.0
    """Per network step (connect, header, each chunk)."""
    stale_incomplete_s: float = 300.0
    """An incomplete snapshot untouched this long lost its writer: deleted."""
    superseded_grace_s: float = 30.0
    """The complete snapshot a newer one superseded is kept this long after the newer one completed:
    the coordinator plans a transition from the snapshots a heartbeat listed, and its command may ask a
    peer for that snapshot after the next one completed (``make demo`` hit exactly this: "no complete
    snapshot of task 1 at iteration 369")."""
    replica_attempts: int = 6
    """Tries to push one snapshot to its replica peer; then the store gives up on that snapshot (the
    peer is gone, or keeps refusing): the next snapshot tries again."""
    replica_backoff_s: float = 1.0
    """The wait after a failed push is ``replica_backoff_s · 2^failures``, at most 30 s."""
    enabled: bool = True
    max_bytes: int | None = field(default_factory=snapshot_max_bytes)
    """Cap on one received snapshot (:meth:`SnapshotStore.limit`); default ``UNICRON_SNAPSHOT_MAX_BYTES``."""
    max_clock_skew_s: float = 120.0
    """A request whose timestamp is further from this clock is refused (replays; nonces are kept this
    long)."""
    authenticate: bool = True
    """Off only to measure what authentication costs (``bench/snapshot_auth.py``); an agent never
    turns it off."""


@dataclass
class _Snapshot:
    origin: str
    task_id: str
    epoch: int
    iteration: int
    path: Path
    complete: bool
    mtime: float

    @property
    def order(self) -> tuple[int, int]:
        """Newer epoch first (a rollback starts a new timeline), then the newer iteration."""
        return (self.epoch, self.iteration)


@dataclass
class _Replication:
    """Per snapshot (task, epoch, iteration): pushed or given up, failed pushes, when to try again."""

    done: set[tuple[str, int, int]] = field(default_factory=set)
    failures: dict[tuple[str, int, int], int] = field(default_factory=dict)
    next_try: dict[tuple[str, int, int], float] = field(default_factory=dict)

    def forget_except(self, current: set[tuple[str, int, int]]) -> None:
        """Drop what is known of snapshots that are gone (superseded or deleted)."""
        self.done &= current
        for table in (self.failures, self.next_try):
            for key in [k for k in table if k not in current]:
                del table[key]


def default_root(node: str, instance: str | None = None) -> Path:
    """``/dev/shm/unicron-snapshots-<node>[-<hash of instance>]``.

    ``instance`` (the agent's run directory) keeps agents that share a node name but are different
    deployments (tests, demos) apart: a restarted agent with the same run directory finds its
    snapshots again; another one never sees them.
    """
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    name = f"unicron-snapshots-{safe_name(node, 'node')}"
    if instance:
        import hashlib

        name += "-" + hashlib.sha256(instance.encode()).hexdigest()[:12]
    return base / name


class SnapshotStore:
    def __init__(self, node: str, cfg: SnapshotStoreConfig | None = None) -> None:
        self.node = safe_name(node, "node")
        self.cfg = cfg or SnapshotStoreConfig()
        self.ephemeral = False
        self._lock_fd: int | None = None
        if self.cfg.root is not None:
            self.root = Path(self.cfg.root)
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            self.root = default_root(node)
            self.root.mkdir(parents=True, exist_ok=True)
            if not self._lock(self.root):
                # Another live agent with the same node name (tests, a second agent on one host)
                # owns the default root: use a private one, deleted on close.
                self.root = Path(f"{self.root}-{os.getpid()}")
                self.root.mkdir(parents=True, exist_ok=True)
                self.ephemeral = True
                log.warning("snapshot root of %s is in use by another agent: using %s", node, self.root)
        self.endpoint: str | None = None
        self._server: asyncio.Server | None = None
        self._scanner: asyncio.Task[None] | None = None
        self._pushes: dict[str, asyncio.Task[None]] = {}
        self._replication = _Replication()
        self._dropped: set[str] = set()
        self._secrets: dict[str, bytes] = {}
        self._nonces: dict[str, float] = {}
        self.refused = 0
        """Requests refused (authentication or a limit), since start."""
        self.refusals: Counter[str] = Counter()
        """The same, by reason (``unknown_task``, ``bad_mac``, ``stale``, ``replayed``, ``too_large``...)."""
        os.chmod(self.root, DIR_MODE)

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.cfg.host, self.cfg.port)
        port = self._server.sockets[0].getsockname()[1]
        host = self.cfg.advertise_host or self.cfg.host
        if host in ("0.0.0.0", "::", ""):
            import socket

            host = socket.gethostname()
        self.endpoint = f"{host}:{port}"
        self._scanner = asyncio.ensure_future(self._scan_loop())

    async def close(self) -> None:
        tasks = [t for t in (self._scanner, *self._pushes.values()) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.remove_held()
        if self.ephemeral:
            shutil.rmtree(self.root, ignore_errors=True)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        with contextlib.suppress(OSError):  # a root that holds nothing else goes too
            (self.root / ".lock").unlink(missing_ok=True)
            self.root.rmdir()

    def remove_held(self) -> None:
        """Delete every snapshot this store holds (this node's, peers' replicas, transfers under way)
        and the directories that held only them. Called when the store closes: with its server gone no
        peer can fetch them, and its workers are stopped. Only snapshot directories are touched, so a
        root shared with other files (``--snapshot-dir``) keeps them."""
        for s in self._all():
            shutil.rmtree(s.path, ignore_errors=True)
        for origin in _subdirs(self.root):
            if origin.name.startswith("."):
                continue
            for task in _subdirs(origin):
                with contextlib.suppress(OSError):
                    task.rmdir()
            with contextlib.suppress(OSError):
                origin.rmdir()
        shutil.rmtree(self.root / INCOMING, ignore_errors=True)

    def _lock(self, root: Path) -> bool:
        """Hold ``root/.lock`` while this store lives (released by the OS if the agent dies)."""
        import fcntl

        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def worker_env(self) -> dict[str, str]:
        return {ENV_SNAPSHOT_DIR: str(self.root), ENV_SNAPSHOT_NODE: self.node}

    # ------------------------------------------------------------------ keys
    def set_secret(self, task_id: str, secret: str) -> None:
        """The task's snapshot key (hex), from the coordinator; a newer one replaces the old."""
        self._secrets[safe_name(task_id, "task id")] = bytes.fromhex(secret)

    def has_secret(self, task_id: str) -> bool:
        return task_id in self._secrets

    def _key(self, task_id: str) -> bytes:
        key = self._secrets.get(task_id)
        if key is None:
            raise SnapshotRefused("unknown_task", f"no snapshot key for task {task_id!r} on {self.node}")
        return key

    def _sign(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with a timestamp, a nonce and the MAC (the task's key)."""
        out = dict(fields, ts=time.time(), nonce=secrets.token_hex(_NONCE_BYTES))
        signed = {k: out.get(k) for k in _SIGNED}
        out["mac"] = request_mac(self._key(str(fields["task_id"])), signed) if self.cfg.authenticate else ""
        return out

    def _check_request(self, header: dict[str, Any]) -> str:
        """Authenticate a request (before any snapshot byte is read or written); returns its task."""
        task_id = header.get("task_id")
        if not isinstance(task_id, str):
            raise SnapshotRefused("malformed", "no task_id")
        try:
            safe_name(task_id, "task id")
        except ValueError as e:
            raise SnapshotRefused("malformed", str(e)) from None
        if not self.cfg.authenticate:
            return task_id
        key = self._key(task_id)
        mac, ts, nonce = header.get("mac"), header.get("ts"), header.get("nonce")
        if not isinstance(mac, str) or not isinstance(nonce, str) or not isinstance(ts, int | float):
            raise SnapshotRefused("bad_mac", "the request carries no mac, nonce or timestamp")
        want = request_mac(key, {k: header.get(k) for k in _SIGNED})
        if not hmac.compare_digest(mac, want):
            raise SnapshotRefused("bad_mac", f"the request's MAC does not match task {task_id!r}'s key")
        now = time.time()
        if not abs(now - float(ts)) <= self.cfg.max_clock_skew_s:
            raise SnapshotRefused("stale", f"timestamp {ts} is more than {self.cfg.max_clock_skew_s}s off")
        for n, until in list(self._nonces.items()):
            if until < now:
                del self._nonces[n]
        if nonce in self._nonces:
            raise SnapshotRefused("replayed", "nonce seen before")
        self._nonces[nonce] = now + 2 * self.cfg.max_clock_skew_s
        return task_id

    def _refuse(self, e: SnapshotRefused, peer: Any) -> None:
        self.refused += 1
        self.refusals[e.reason] += 1
        log.warning("snapshot request from %s refused: %s", peer, e)

    def limit(self, task_id: str) -> int:
        """Most bytes one received snapshot of ``task_id`` may declare: the configured cap, the free
        space of the snapshot filesystem, and twice the largest snapshot of the task held here (plus
        :data:`SIZE_SLACK`), whichever is least."""
        caps = [MAX_FILE_BYTES]
        if self.cfg.max_bytes:
            caps.append(self.cfg.max_bytes)
        with contextlib.suppress(OSError):
            st = os.statvfs(self.root)
            caps.append(st.f_bavail * st.f_frsize)
        known = [s.nbytes for s in self.infos() if s.task_id == task_id]
        if known:
            caps.append(2 * max(known) + SIZE_SLACK)
        return min(caps)

    # ------------------------------------------------------------------ local state
    def _all(self) -> list[_Snapshot]:
        out = []
        for origin in _subdirs(self.root):
            if origin.name.startswith("."):
                continue
            for task in _subdirs(origin):
                for d in _subdirs(task):
                    parsed = parse_snapshot_name(d.name)
                    if parsed is None:
                        continue
                    try:
                        mtime = d.stat().st_mtime
                    except FileNotFoundError:
                        continue
                    out.append(_Snapshot(origin.name, task.name, *parsed, d, is_complete(d), mtime))
        return out

    def newest(self) -> list[_Snapshot]:
        """The newest complete snapshot per (task, origin)."""
        best: dict[tuple[str, str], _Snapshot] = {}
        for s in self._all():
            if s.complete and s.task_id not in self._dropped:
                k = (s.task_id, s.origin)
                if k not in best or s.order > best[k].order:
                    best[k] = s
        return sorted(best.values(), key=lambda s: (s.task_id, s.origin))

    def infos(self) -> list[SnapshotInfo]:
        """What this agent holds, for ``Hello`` / ``Heartbeat``: complete snapshots only."""
        out = []
        for s in self.newest():
            try:
                metas = read_rank_metas(s.path)
                nbytes = sum(f.stat().st_size for f in s.path.iterdir() if f.is_file())
            except (OSError, SnapshotError) as e:  # deleted under us (GC, drop): skip it this time
                log.debug("skipping %s: %s", s.path, e)
                continue
            out.append(
                SnapshotInfo(
                    task_id=s.task_id,
                    epoch=s.epoch,
                    iteration=s.iteration,
                    ranks=sorted(m.rank for m in metas),
                    origin_node=s.origin,
                    nbytes=nbytes,
                )
            )
        return out

    def paths(self, task_id: str, iteration: int) -> list[Path]:
        """This node's complete directories of the snapshot (its own shards and peers' replicas)."""
        return find_snapshot(self.root, task_id, iteration)

    def gc(self, now: float | None = None) -> list[Path]:
        """Delete what is not the newest complete snapshot per (task, origin) (or, within the grace
        period, the one before it); returns what went."""
        now = time.time() if now is None else now
        snaps = self._all()
        newest = {(s.task_id, s.origin): s for s in self.newest()}
        previous: dict[tuple[str, str], tuple[int, int]] = {}
        for s in snaps:
            k = (s.task_id, s.origin)
            if s.complete and k in newest and previous.get(k, (-1, -1)) < s.order < newest[k].order:
                previous[k] = s.order
        gone = []
        for s in snaps:
            k = (s.task_id, s.origin)
            keep_from = newest[k].order if k in newest else None
            if s.task_id in self._dropped:
                drop = True
            elif s.complete:
                in_grace = s.order == previous.get(k) and now - newest[k].mtime < self.cfg.superseded_grace_s
                drop = keep_from is not None and s.order < keep_from and not in_grace
            else:  # being written, or its writer died
                drop = (keep_from is not None and s.order <= keep_from) or (
                    now - s.mtime > self.cfg.stale_incomplete_s
                )
            if drop:
                shutil.rmtree(s.path, ignore_errors=True)
                gone.append(s.path)
        for task_id in list(self._dropped):
            for origin in _subdirs(self.root):
                shutil.rmtree(origin / task_id, ignore_errors=True)
        incoming = self.root / INCOMING
        for d in _subdirs(incoming):  # transfers that died mid-way
            with contextlib.suppress(FileNotFoundError):
                if now - d.stat().st_mtime > self.cfg.stale_incomplete_s:
                    shutil.rmtree(d, ignore_errors=True)
        return gone

    def drop_task(self, task_id: str) -> None:
        """The task is over: delete its snapshots (own and replicas) now and refuse new ones."""
        self._dropped.add(safe_name(task_id, "task id"))
        self.gc()

    def undrop_task(self, task_id: str) -> None:
        """A task id is reused (resubmitted): accept its snapshots again."""
        self._dropped.discard(task_id)

    # ------------------------------------------------------------------ scan + replicate
    async def _scan_loop(self) -> None:
        while True:
            try:
                self.scan()
            except Exception:
                log.exception("snapshot scan failed")
            await asyncio.sleep(self.cfg.scan_interval_s)

    def scan(self) -> None:
        """GC, then push this node's newest complete snapshots to their replica peer (once each)."""
        self.gc()
        now = time.monotonic()
        newest = self.newest()
        self._replication.forget_except({(s.task_id, s.epoch, s.iteration) for s in newest})
        for s in newest:
            if s.origin != self.node:
                continue
            key = (s.task_id, s.epoch, s.iteration)
            r = self._replication
            if key in r.done or now < r.next_try.get(key, 0.0):
                continue
            running = self._pushes.get(s.task_id)
            if running is not None and not running.done():
                continue
            replica = _replica_of(s.path)
            if replica is None:
                r.done.add(key)
                continue
            self._pushes[s.task_id] = asyncio.ensure_future(self._push(replica, s, key))

    async def _push(self, endpoint: str, s: _Snapshot, key: tuple[str, int, int]) -> None:
        r = self._replication
        try:
            await self.replicate(endpoint, s.task_id, s.epoch, s.iteration)
            r.done.add(key)
            log.info("replicated %s/%s to %s", s.task_id, s.path.name, endpoint)
        except (TimeoutError, OSError, SnapshotTransferError) as e:
            n = r.failures[key] = r.failures.get(key, 0) + 1
            r.next_try[key] = time.monotonic() + min(self.cfg.replica_backoff_s * 2.0**n, 30.0)
            log.warning("replicating %s/%s to %s failed (%d): %s", s.task_id, s.path.name, endpoint, n, e)
            if n >= self.cfg.replica_attempts:
                r.done.add(key)
                log.warning(
                    "giving up replicating %s/%s to %s after %d attempts", s.task_id, s.path.name, endpoint, n
                )

    async def replicate(self, endpoint: str, task_id: str, epoch: int, iteration: int) -> None:
        """Push this node's own snapshot (task, epoch, iteration) to the peer at ``endpoint``."""
        src = self.root / self.node / safe_name(task_id, "task id") / snapshot_name(epoch, iteration)
        if not is_complete(src):
            raise SnapshotTransferError(f"{src} is not a complete snapshot")
        files = _files_of(src)
        listed: list[dict[str, Any]] = [{"name": f.name, "size": f.stat().st_size} for f in files]
        header = self._sign(
            {
                "op": "put",
                "origin": self.node,
                "task_id": task_id,
                "epoch": epoch,
                "iteration": iteration,
                "files": listed,
                "size": sum(int(f["size"]) for f in listed),
            }
        )
        reader, writer = await self._connect(endpoint)
        try:
            await self._send_header(writer, header)
            go = await self._read_header(reader)  # the peer accepts the request before any byte goes
            if not go.get("ok"):
                raise SnapshotTransferError(f"{endpoint} refused the replica: {go.get('error')}")
            for f in files:
                await self._send_file(writer, f)
            reply = await self._read_header(reader)
            if not reply.get("ok"):
                raise SnapshotTransferError(f"{endpoint} refused the replica: {reply.get('error')}")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def fetch(self, endpoint: str, task_id: str, iteration: int, epoch: int = 0) -> list[Path]:
        """Copy the peer's complete snapshot of ``task_id`` at ``iteration`` (all the origins it
        holds) into this node's shm; returns the local directories (ready for ``restore``).
        ``epoch``: the epoch the copy is fetched for (signed with the request)."""
        safe_name(task_id, "task id")
        request = self._sign(
            {
                "op": "get",
                "task_id": task_id,
                "epoch": epoch,
                "iteration": iteration,
                "origin": None,
                "files": None,
                "size": None,
            }
        )
        reader, writer = await self._connect(endpoint)
        paths = []
        try:
            await self._send_header(writer, request)
            reply = await self._read_header(reader)
            if not reply.get("ok"):
                raise SnapshotTransferError(f"{endpoint}: {reply.get('error')}")
            snapshots = reply.get("snapshots")
            if not isinstance(snapshots, list):
                raise SnapshotTransferError(f"{endpoint}: no snapshot list in the reply")
            if self.cfg.authenticate:
                want = request_mac(self._key(task_id), {"nonce": request["nonce"], "snapshots": snapshots})
                if not hmac.compare_digest(str(reply.get("mac")), want):
                    raise SnapshotTransferError(
                        f"{endpoint} does not hold task {task_id!r}'s key (bad reply MAC)"
                    )
            for snap in snapshots:
                if not isinstance(snap, dict) or snap.get("task_id") != task_id:
                    raise SnapshotTransferError(f"{endpoint} sent a snapshot of another task")
                self._check_size(task_id, snap)
                paths.append(await self._receive(reader, snap))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        if not paths:
            raise SnapshotTransferError(f"{endpoint} sent no snapshot of {task_id} at {iteration}")
        return sorted(paths)

    # ------------------------------------------------------------------ server
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            header = await self._read_header(reader)
            op = header.get("op")
            try:
                if op not in ("put", "get"):
                    raise SnapshotRefused("malformed", f"unknown op {op!r}")
                task_id = self._check_request(header)
                if op == "put":
                    self._check_put(task_id, header)
            except SnapshotRefused as e:
                self._refuse(e, peer)
                await self._send_header(writer, {"ok": False, "error": str(e)})
                return
            if op == "put":
                await self._send_header(writer, {"ok": True})
                try:
                    await self._receive(reader, header)
                    await self._send_header(writer, {"ok": True})
                except (SnapshotTransferError, ValueError) as e:
                    await self._send_header(writer, {"ok": False, "error": str(e)})
            else:
                await self._serve_get(writer, header)
        except (TimeoutError, OSError, SnapshotTransferError, asyncio.IncompleteReadError, ValueError) as e:
            log.warning("snapshot peer request failed: %s", e)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def _check_put(self, task_id: str, header: dict[str, Any]) -> None:
        """A replica may be written here: not this node's own, not a dropped task, not too large."""
        origin = header.get("origin")
        if origin == self.node:
            raise SnapshotRefused("own_snapshot", f"{self.node} writes its own snapshots itself")
        if task_id in self._dropped:
            raise SnapshotRefused("dropped", f"task {task_id} was dropped on {self.node}")
        self._check_size(task_id, header)

    def _check_size(self, task_id: str, header: dict[str, Any]) -> None:
        files = header.get("files")
        if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
            raise SnapshotRefused("malformed", "no file list")
        try:
            sizes = [int(f.get("size")) for f in files]
        except (TypeError, ValueError):
            raise SnapshotRefused("malformed", "a file size is not a number") from None
        total, limit = sum(sizes), self.limit(task_id)
        if any(n < 0 for n in sizes) or total > limit:
            raise SnapshotRefused("too_large", f"declared {total} bytes; at most {limit} for task {task_id}")
        declared = header.get("size", total)
        if declared != total:
            raise SnapshotRefused("malformed", f"declared size {declared} != the files' {total}")

    async def _serve_get(self, writer: asyncio.StreamWriter, header: dict[str, Any]) -> None:
        try:
            task_id = safe_name(str(header.get("task_id")), "task id")
            iteration = int(header["iteration"])
            dirs = find_snapshot(self.root, task_id, iteration)
        except Exception as e:
            await self._send_header(writer, {"ok": False, "error": str(e)})
            return
        headers: list[dict[str, Any]] = []
        sources: list[list[Path]] = []
        for d in dirs:
            epoch, it = parse_snapshot_name(d.name) or (0, 0)
            files = _files_of(d)
            sources.append(files)
            headers.append(
                {
                    "origin": d.parent.parent.name,
                    "task_id": task_id,
                    "epoch": epoch,
                    "iteration": it,
                    "files": [{"name": f.name, "size": f.stat().st_size} for f in files],
                }
            )
        reply: dict[str, Any] = {"ok": True, "snapshots": headers, "mac": ""}
        if self.cfg.authenticate:
            reply["mac"] = request_mac(
                self._key(task_id), {"nonce": header.get("nonce"), "snapshots": headers}
            )
        await self._send_header(writer, reply)
        for files in sources:
            for f in files:
                await self._send_file(writer, f)

    async def _receive(self, reader: asyncio.StreamReader, header: dict[str, Any]) -> Path:
        """Read the files of one snapshot into a temp dir, then rename it into place (atomic)."""
        origin = safe_name(str(header.get("origin")), "node")
        task_id = safe_name(str(header.get("task_id")), "task id")
        epoch, iteration = int(header["epoch"]), int(header["iteration"])
        files = header.get("files")
        if not isinstance(files, list) or not files:
            raise SnapshotTransferError("no files in the snapshot header")
        names = [str(f.get("name")) for f in files]
        if (
            COMPLETE not in names
            or any(not is_snapshot_file(n) for n in names)
            or len(set(names)) != len(names)
        ):
            raise SnapshotTransferError(f"bad snapshot file list {names}")
        (self.root / INCOMING).mkdir(mode=DIR_MODE, exist_ok=True)
        tmp = self.root / INCOMING / uuid.uuid4().hex
        tmp.mkdir(mode=DIR_MODE)
        try:
            for f in files:
                size = int(f["size"])
                if not 0 <= size <= MAX_FILE_BYTES:
                    raise SnapshotTransferError(f"bad file size {size}")
                await self._recv_file(reader, tmp / str(f["name"]), size)
            if task_id in self._dropped:
                raise SnapshotTransferError(f"task {task_id} was dropped on {self.node}")
            final = self.root / origin / task_id / snapshot_name(epoch, iteration)
            final.parent.parent.mkdir(mode=DIR_MODE, exist_ok=True)
            final.parent.mkdir(mode=DIR_MODE, exist_ok=True)
            if final.exists():  # a repeated push, or one left by an earlier run: the new one wins
                old = self.root / INCOMING / f"old-{uuid.uuid4().hex}"
                os.rename(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.rename(tmp, final)
            return final
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    # ------------------------------------------------------------------ framing
    async def _connect(self, endpoint: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, _, port = endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise SnapshotTransferError(f"bad endpoint {endpoint!r} (want host:port)")
        try:
            return await asyncio.wait_for(asyncio.open_connection(host, int(port)), self.cfg.timeout_s)
        except TimeoutError as e:
            raise SnapshotTransferError(f"connecting to {endpoint} timed out") from e

    async def _send_header(self, writer: asyncio.StreamWriter, header: dict[str, Any]) -> None:
        raw = json.dumps(header).encode()
        writer.write(_HEADER.pack(len(raw)) + raw)
        await asyncio.wait_for(writer.drain(), self.cfg.timeout_s)

    async def _read_header(self, reader: asyncio.StreamReader) -> dict[str, Any]:
        try:
            (n,) = _HEADER.unpack(await asyncio.wait_for(reader.readexactly(4), self.cfg.timeout_s))
            if n > MAX_HEADER_BYTES:
                raise SnapshotTransferError(f"header of {n} bytes")
            raw = await asyncio.wait_for(reader.readexactly(n), self.cfg.timeout_s)
        except asyncio.IncompleteReadError as e:
            raise SnapshotTransferError("peer closed the connection") from e
        except TimeoutError as e:
            raise SnapshotTransferError("peer sent nothing in time") from e
        header = json.loads(raw)
        if not isinstance(header, dict):
            raise SnapshotTransferError("header is not a JSON object")
        return header

    async def _send_file(self, writer: asyncio.StreamWriter, path: Path) -> None:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK):
                writer.write(chunk)
                await asyncio.wait_for(writer.drain(), self.cfg.timeout_s)

    async def _recv_file(self, reader: asyncio.StreamReader, path: Path, size: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with open(fd, "wb") as fh:
            left = size
            while left:
                try:
                    chunk = await asyncio.wait_for(reader.readexactly(min(left, CHUNK)), self.cfg.timeout_s)
                except asyncio.IncompleteReadError as e:
                    raise SnapshotTransferError(f"transfer of {path.name} broke off") from e
                except TimeoutError as e:
                    raise SnapshotTransferError(f"transfer of {path.name} stalled") from e
                fh.write(chunk)
                left -= len(chunk)


def _subdirs(path: Path) -> list[Path]:
    try:
        return sorted(p for p in path.iterdir() if p.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _files_of(d: Path) -> list[Path]:
    """The snapshot's files, ``COMPLETE`` last (a receiver sees the marker only after the data)."""
    files = sorted((f for f in d.iterdir() if f.is_file() and is_snapshot_file(f.name)), key=lambda f: f.name)
    return [f for f in files if f.name != COMPLETE] + [f for f in files if f.name == COMPLETE]


def _replica_of(path: Path) -> str | None:
    for m in read_rank_metas(path):
        if m.replica:
            return m.replica
    return None

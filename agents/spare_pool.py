"""Warm spares of one agent (:mod:`agents.training.spare`): start, track, hand out and replace them.

With ``count`` > 0 the pool keeps that many pre-started worker processes that have imported torch
and Megatron-Core, connected to the hook socket and block waiting for an assignment. Wherever a
worker process would be launched a ready spare is taken instead (:meth:`SparePool.take`), and from
then on is that rank's worker; a replacement starts once the new worker has finished its first
iteration (or after ``refill_s``), so its imports do not compete with the transition for the CPU
(:meth:`SparePool.replace`). Spares are not workers: they appear in no status or heartbeat, and they
are killed when the agent stops (and by PDEATHSIG when it dies). Their pids and RSS are listed in
``RUN_DIR/spares.json``.

The spare zygote (``zygote=True``, :mod:`agents.training.zygote`, :mod:`agents.zygote_link`): instead
of each spare importing torch and Megatron-Core itself (3.6 s on a quiet CPU box, ~30 s on a loaded
2-core one, on the cores the training uses), one zygote process imports them once and forks each
spare in milliseconds. The agent makes itself a child subreaper, so a forked spare is re-parented to
it and supervised like any other child (:class:`~agents.zygote_link.AdoptedProcess`); a spare taken
from the zygote is replaced at once. If the zygote cannot start, dies or fails a fork, spares are
started as fresh processes again. Processes orphaned below the agent (a killed worker's helper
processes) are re-parented to it too: :meth:`SparePool.reap_orphans` reaps those that exit.

Warming (:attr:`SparePool.warming`): from the start until the first spare is ready (or spare starts
give up, or ``warming_max_s`` passed) the agent is *warming*: a rank placed on this node now would
start cold. Warming ends once, for good; ``on_warm`` is called when it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.prctl import session_of, zombie_children
from agents.training.hook_protocol import SpareReady
from agents.training.spare import rss_kb
from agents.zygote_link import AdoptedProcess, ChildProcess, ZygoteError, ZygoteLink, can_adopt

log = logging.getLogger("agents.supervisor")

SPARE_START_FAILURES = 3
"""Consecutive spares that die before becoming ready: stop starting spares (fresh processes only)."""
WARMING_MAX_S = 30.0
"""An agent with spares reports ``warming`` (Hello/Heartbeat) until its first spare is ready, spare
starts give up, or this long after the supervisor started, whichever comes first: the coordinator keeps
a returning node ``joining`` meanwhile, and this bound keeps a node whose spares never get ready from
staying out of service longer than that."""


@dataclass
class Spare:
    """A warm spare worker process (:mod:`agents.training.spare`) owned by the pool."""

    proc: ChildProcess
    log_path: Path
    started: float
    origin: str = "exec"
    """``exec``: a fresh process that imports everything itself; ``zygote``: forked by the zygote."""
    writer: asyncio.StreamWriter | None = None
    """Its hook connection; set when it announced itself ready."""
    ready_s: float | None = None
    """Seconds its imports took (reported by the spare)."""
    rss_kb: int = 0
    """Its resident memory when it became ready."""
    assigned: bool = False

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    @property
    def ready(self) -> bool:
        return (
            self.writer is not None
            and not self.assigned
            and self.proc.returncode is None
            and not self.writer.is_closing()
        )


Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


class SparePool:
    """The agent's warm spares and their zygote."""

    def __init__(
        self,
        run_dir: Path,
        count: int,
        refill_s: float,
        zygote: bool,
        base_env: Callable[[], dict[str, str]],
        prepare_child: Callable[[], None],
        spawn: Spawn,
    ) -> None:
        """``base_env``: every worker process's environment; ``prepare_child``: runs in a started
        process before it executes; ``spawn``: runs a background coroutine owned by the supervisor."""
        self.run_dir = run_dir
        self.count = count
        self.refill_s = refill_s
        self.zygote_wanted = zygote and count > 0
        self._base_env = base_env
        self._prepare_child = prepare_child
        self._spawn = spawn
        self.spares: dict[int, Spare] = {}
        """Spare processes not yet handed out (starting or ready), by pid."""
        self.zygote: ZygoteLink | None = None
        self.failures = 0
        """Consecutive spares that died before they were ready."""
        self._seq = 0
        self._refills = 0
        """Refills scheduled and not yet started (they count toward ``count``)."""
        self._starting = 0
        """Spare starts in progress (a fork or exec awaited; they count toward ``count``)."""
        self._early: dict[int, tuple[SpareReady, asyncio.StreamWriter]] = {}
        """Hellos of forked spares that arrived before the zygote's answer named their pid."""
        self.closing = False
        """The agent is stopping: no spare starts any more (set before its workers are stopped)."""
        self.started_at: float | None = None
        """``time.monotonic()`` when :meth:`start` ran (the warming bound counts from it)."""
        self.warming_max_s = WARMING_MAX_S
        self._warm = count == 0
        """Warming is over (latched; see :attr:`warming`)."""
        self.on_warm: Callable[[], None] | None = None
        """Called once when warming ends."""

    # ------------------------------------------------------------------ lifecycle
    async def start(self, owned_pids: Callable[[], set[int]]) -> None:
        """Start the zygote (if wanted) and the spares; ``owned_pids``: the worker processes the
        supervisor waits for itself (never reaped as orphans)."""
        self.started_at = time.monotonic()
        if not self._warm:
            self._spawn(self._warming_bound())
        if self.zygote_wanted:
            await self._start_zygote(owned_pids)
        await self.fill()

    async def close(self) -> None:
        """Kill every spare not handed out, and the zygote."""
        self.closing = True
        spares = list(self.spares.values())
        for sp in spares:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sp.pid, signal.SIGKILL)
        for sp in spares:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sp.proc.wait(), timeout=5)
        self.spares.clear()
        self.write_info()
        if self.zygote is not None:
            await self.zygote.close()

    def kill_all(self) -> None:
        """Node loss drill: SIGKILL every spare and the zygote at once."""
        for sp in self.spares.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sp.pid, signal.SIGKILL)
        if self.zygote is not None:
            self.zygote.kill()

    # ------------------------------------------------------------------ warming
    @property
    def warming(self) -> bool:
        """Spares are configured and none has been ready yet since the start (spare starts have not
        given up and ``warming_max_s`` has not passed). False for good once it was False."""
        if self._warm:
            return False
        if self.failures >= SPARE_START_FAILURES:
            self._end_warming("spare starts gave up")
        elif self.started_at is not None and time.monotonic() - self.started_at >= self.warming_max_s:
            self._end_warming(f"no spare ready after {self.warming_max_s:g} s")
        return not self._warm

    def _end_warming(self, why: str) -> None:
        if self._warm:
            return
        self._warm = True
        since = time.monotonic() - self.started_at if self.started_at is not None else 0.0
        log.info("warming over after %.2f s: %s", since, why)
        if self.on_warm is not None:
            self.on_warm()

    async def _warming_bound(self) -> None:
        await asyncio.sleep(self.warming_max_s)
        _ = self.warming  # ends it (and tells the agent) if nothing else did

    # ------------------------------------------------------------------ the zygote
    async def _start_zygote(self, owned_pids: Callable[[], set[int]]) -> None:
        why_not = can_adopt()
        if why_not is not None:
            log.warning("no spare zygote: %s; spares start as fresh processes", why_not)
            return
        self.zygote = ZygoteLink(self.run_dir, self._base_env(), self._prepare_child)
        await self.zygote.start()
        self._spawn(self._zygote_ready(self.zygote))
        self._spawn(self._watch_zygote(self.zygote))
        self._spawn(self.reap_orphans(owned_pids))

    async def _zygote_ready(self, zygote: ZygoteLink) -> None:
        await zygote.wait_ready()  # ready or gone: either way the spares can start now
        self.write_info()
        await self.fill()

    async def _watch_zygote(self, zygote: ZygoteLink) -> None:
        await zygote.watch()
        self.write_info()

    def _zygote_starting(self) -> bool:
        return self.zygote is not None and self.zygote.state == "starting"

    async def reap_orphans(self, owned_pids: Callable[[], set[int]], every_s: float = 5.0) -> None:
        """Reap exited processes that were orphaned below the agent and re-parented to it (a subreaper),
        such as a killed worker's checkpoint helpers. Only processes of another session than the agent's,
        and none the supervisor waits for itself."""
        own_session = os.getsid(0)
        while not self.closing:
            await asyncio.sleep(every_s)
            if self.zygote is not None and self.zygote.forking:
                continue  # a spare that died at once is ours before the zygote's answer names it
            zombies = zombie_children()
            if not zombies:
                continue
            owned = owned_pids() | set(self.spares)
            if self.zygote is not None and self.zygote.pid is not None:
                owned.add(self.zygote.pid)
            for pid in zombies:
                if pid in owned or session_of(pid) in (None, own_session):
                    continue
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                    log.info("reaped orphan %s", pid)

    # ------------------------------------------------------------------ spares
    async def fill(self) -> None:
        """Start spares until ``count`` exist (counting scheduled refills); none while the zygote
        is still importing (it starts them when it is ready)."""
        if self._zygote_starting():
            return
        while (
            not self.closing
            and self.failures < SPARE_START_FAILURES
            and len(self.spares) + self._refills + self._starting < self.count
        ):
            self._starting += 1
            try:
                await self._start_spare()
            finally:
                self._starting -= 1

    async def _start_spare(self) -> None:
        self._seq += 1
        log_path = self.run_dir / f"spare-{self._seq}.log"
        if self.zygote is not None and self.zygote.ready:
            try:
                pid = await self.zygote.fork(log_path)
            except ZygoteError:
                pass  # logged; a fresh process below
            else:
                try:
                    adopted = AdoptedProcess(pid)
                except ProcessLookupError:  # reaped already: never seen on Linux, but not a crash
                    log.warning("forked spare %s vanished before the agent adopted it", pid)
                    self.failures += 1
                    return
                sp = Spare(proc=adopted, log_path=log_path, started=time.time(), origin="zygote")
                self.spares[sp.pid] = sp
                self.write_info()
                self._spawn(self._watch_spare(sp))
                early = self._early.pop(pid, None)
                if early is not None:
                    self.on_ready(*early)
                return
        with open(log_path, "ab") as logf:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agents.training.spare",
                env=self._base_env(),
                stdout=logf,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=self._prepare_child,
            )
        sp = Spare(proc=proc, log_path=log_path, started=time.time())
        self.spares[sp.pid] = sp
        self.write_info()
        self._spawn(self._watch_spare(sp))

    async def _watch_spare(self, sp: Spare) -> None:
        code = await sp.proc.wait()
        if sp.assigned:
            return  # its worker's own watcher reports the exit
        self.spares.pop(sp.pid, None)
        self.write_info()
        if self.closing:
            return
        if sp.writer is None:
            self.failures += 1
            if self.failures >= SPARE_START_FAILURES:
                self._end_warming("spare starts gave up")
        log.warning("spare %s exited (rc %s) before it was used; see %s", sp.pid, code, sp.log_path)
        await self.fill()

    def on_ready(self, event: SpareReady, writer: asyncio.StreamWriter) -> None:
        """A spare said it is ready on the hook connection ``writer``."""
        sp = self.spares.get(event.pid)
        if sp is None and self.zygote is not None and self.zygote.ready:
            self._early[event.pid] = (event, writer)  # the zygote's answer is on its way
            return
        if sp is None:
            log.warning("spare hello from unknown pid %s", event.pid)
            writer.close()
            return
        sp.writer = writer
        sp.ready_s = event.ready_s
        sp.rss_kb = event.rss_kb or rss_kb(sp.pid)
        self.failures = 0
        log.info("spare %s (%s) ready after %.3f s (rss %d KiB)", sp.pid, sp.origin, sp.ready_s, sp.rss_kb)
        self.write_info()
        self._end_warming(f"spare {sp.pid} ready")

    def take(self) -> Spare | None:
        """A ready spare, handed out (it is no longer the pool's); None: none is ready."""
        for sp in list(self.spares.values()):
            if sp.ready:
                sp.assigned = True
                self.spares.pop(sp.pid, None)
                self.write_info()
                return sp
        return None

    def replace(self, used: Spare, first_iteration: asyncio.Event, exited: asyncio.Event) -> None:
        """Replace a handed-out spare: a fork at once; a fresh process once its worker finished its
        first iteration (or left, or after ``refill_s``)."""
        if used.origin == "zygote" and self.zygote is not None and self.zygote.ready:
            self._spawn(self.fill())  # a fork costs milliseconds: replace it at once
        else:
            self._spawn(self._refill_after(first_iteration, exited))

    async def _refill_after(self, first_iteration: asyncio.Event, exited: asyncio.Event) -> None:
        self._refills += 1
        try:
            waits = [asyncio.ensure_future(e.wait()) for e in (first_iteration, exited)]
            try:
                await asyncio.wait(waits, timeout=self.refill_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in waits:
                    t.cancel()
        finally:
            self._refills -= 1
        await self.fill()

    def info(self) -> list[dict[str, Any]]:
        """Spares not yet handed out: pid, ready, import seconds, RSS (KiB, now)."""
        return [
            {
                "pid": sp.pid,
                "ready": sp.ready,
                "ready_s": sp.ready_s,
                "rss_kb": rss_kb(sp.pid) if sp.proc.returncode is None else 0,
                "log": str(sp.log_path),
                "origin": sp.origin,
            }
            for sp in self.spares.values()
        ]

    def write_info(self) -> None:
        """``RUN_DIR/spares.json``: the spares now (for operators, tests and benchmarks)."""
        path = self.run_dir / "spares.json"
        tmp = path.with_suffix(".json.tmp")
        with contextlib.suppress(OSError):
            zygote = self.zygote.info() if self.zygote is not None else None
            tmp.write_text(json.dumps({"spares": self.info(), "zygote": zygote, "at": time.time()}))
            tmp.replace(path)

"""How the supervisor drives one rank, whatever runs it: a :class:`WorkerHandle`.

Two implementations: :class:`ProcessHandle`, a worker process (fresh or a warm spare) linked over the
hook socket, and :class:`agents.sim.SimWorker`, a simulated rank inside the agent. The supervisor
sends orders, signals, captures stacks and waits for the exit through this interface only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Protocol

from agents.training.hook_protocol import HookOrder, encode
from agents.zygote_link import ChildProcess


class WorkerHandle(Protocol):
    """One rank's running worker as the supervisor sees it."""

    @property
    def pid(self) -> int | None:
        """Its process id; None when it runs inside the agent."""
        ...

    def send(self, order: HookOrder) -> None:
        """Deliver an order (held until the worker's hook connects)."""
        ...

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the worker (and everything it started); nothing once it exited."""
        ...

    async def capture_stack(self, wait_s: float = 0.3) -> str:
        """Python stacks of all the worker's threads ("" if none could be had in ``wait_s``)."""
        ...

    async def wait(self) -> int:
        """Until the worker exits: its exit code (negative: the signal that killed it)."""
        ...


class ProcessHandle:
    """A worker process that leads its own session, linked to the agent over the hook socket."""

    def __init__(self, proc: ChildProcess, stack_file: Path | None) -> None:
        self.proc = proc
        self.stack_file = stack_file
        self.writer: asyncio.StreamWriter | None = None
        self.pending: list[HookOrder] = []
        self.exited = False

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def bind(self, writer: asyncio.StreamWriter) -> None:
        """The worker's hook said hello on ``writer``: deliver what waited for it."""
        self.writer = writer
        for order in self.pending:
            writer.write(encode(order))
        self.pending.clear()

    def unbind(self) -> None:
        self.writer = None

    def send(self, order: HookOrder) -> None:
        if self.writer is not None:
            self.writer.write(encode(order))
        else:
            self.pending.append(order)

    def signal(self, sig: int) -> None:
        if self.exited:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)  # the worker leads its own session: its helpers die too

    async def capture_stack(self, wait_s: float = 0.3) -> str:
        """faulthandler's dump on SIGUSR1 into the worker's stack file."""
        if self.stack_file is None or self.exited:
            return ""
        before = self.stack_file.stat().st_size if self.stack_file.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGUSR1)
        deadline = time.monotonic() + wait_s
        text = ""
        while time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            if self.stack_file.exists() and self.stack_file.stat().st_size > before:
                await asyncio.sleep(0.03)  # let faulthandler finish writing
                with open(self.stack_file) as fh:
                    fh.seek(before)
                    text = fh.read()
                break
        return text

    async def wait(self) -> int:
        """Until the worker exits; then whatever is left of its process group is killed.

        The worker leads its own session, and the helper processes it started stay in it:
        ``dist_checkpointing``'s multiprocessing helpers (``resource_tracker``, ``spawn_main``) outlive a
        worker that was killed or crashed, holding memory and file handles, unless their group goes too.
        """
        code = await self.proc.wait()
        self.exited = True
        kill_group(self.pid)
        return code


def kill_group(pgid: int) -> None:
    """SIGKILL every process left in process group ``pgid`` (none left: nothing happens).

    Safe after its leader exited: Linux does not reuse a pid while a process group still carries it.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)

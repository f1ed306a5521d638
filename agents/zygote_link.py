"""The agent's side of the spare zygote (:mod:`agents.training.zygote`): start it, ask it for spares,
and supervise the spares it forks, which the agent adopts as a child subreaper.

:class:`AdoptedProcess` gives an adopted spare the interface of ``asyncio.subprocess.Process`` that the
supervisor uses (``pid``, ``returncode``, ``await wait()``): the event loop watches a pidfd, which becomes
readable when the process exits, and ``waitpid`` then reaps it and reads its exit status (negative: the
signal that killed it, as asyncio reports it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agents.prctl import become_subreaper
from agents.training.zygote_protocol import (
    Forked,
    ForkFailed,
    ForkRequest,
    ZygoteAnswer,
    ZygoteProtocolError,
    ZygoteReady,
    decode_answer,
    encode,
)

log = logging.getLogger("agents.zygote")

FORK_TIMEOUT_S = 10.0
"""A fork request the zygote does not answer in this long: the zygote is given up (fresh spares)."""
ADOPTION_RETRY_S = 0.02
ADOPTION_RETRIES = 250
"""A spare that exited before it was re-parented to the agent is waited for this many times this long."""


class ChildProcess(Protocol):
    """What the supervisor needs of a worker's or spare's process."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...


class ZygoteError(RuntimeError):
    pass


def can_adopt() -> str | None:
    """None if this process can adopt forked spares; otherwise why not."""
    if not hasattr(os, "pidfd_open"):
        return "os.pidfd_open is missing (Linux ≥ 5.3 and Python ≥ 3.9 needed)"
    if not become_subreaper():
        return "prctl(PR_SET_CHILD_SUBREAPER) failed"
    return None


class AdoptedProcess:
    """A process re-parented to this one (its subreaper): asyncio-style pid / returncode / wait()."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._returncode: int | None = None
        self._loop = asyncio.get_running_loop()
        self._done: asyncio.Future[int] = self._loop.create_future()
        self._tries = 0
        self._fd = os.pidfd_open(pid)
        self._loop.add_reader(self._fd, self._exited)

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        return self._returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    def _exited(self) -> None:
        self._loop.remove_reader(self._fd)
        try:
            got, status = os.waitpid(self._pid, os.WNOHANG)
        except ChildProcessError:  # it exited before the intermediate's exit handed it over to us
            got, status = 0, 0
        if got == 0:
            self._tries += 1
            if self._tries < ADOPTION_RETRIES:
                self._loop.call_later(ADOPTION_RETRY_S, self._exited)
                return
            log.warning("pid %s exited but was never re-parented to the agent", self._pid)
            code = -int(signal.SIGKILL)
        else:
            code = os.waitstatus_to_exitcode(status)
        os.close(self._fd)
        self._returncode = code
        self._done.set_result(code)


class ZygoteLink:
    """One zygote process per agent. States: ``starting`` (importing), ``ready``, ``gone`` (it died, a
    fork failed, or it was closed: the supervisor starts fresh spare processes from then on)."""

    def __init__(self, run_dir: Path, env: dict[str, str], preexec: Callable[[], None]) -> None:
        self.run_dir = run_dir
        self.env = env
        self.preexec = preexec
        self.proc: asyncio.subprocess.Process | None = None
        self.state = "starting"
        self.ready_s: float | None = None
        self.rss_kb = 0
        self.why_gone = ""
        self._lock = asyncio.Lock()

    @property
    def ready(self) -> bool:
        return self.state == "ready"

    @property
    def forking(self) -> bool:
        """A fork request is in flight (its spare exists but is not registered yet)."""
        return self._lock.locked()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        with open(self.run_dir / "zygote.log", "ab") as logf:
            self.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agents.training.zygote",
                env=self.env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=logf,
                start_new_session=True,
                preexec_fn=self.preexec,
            )

    async def wait_ready(self) -> bool:
        """Until the zygote says it is ready (True) or dies first (False)."""
        assert self.proc is not None
        msg = await self._read()
        if isinstance(msg, ForkFailed):
            self._give_up(f"its first answer is not ready: {msg.error}")
            return False
        if not isinstance(msg, ZygoteReady):
            self._give_up(f"it exited while importing (rc {self.proc.returncode}); see zygote.log")
            return False
        self.ready_s = msg.ready_s
        self.rss_kb = msg.rss_kb
        self.state = "ready"
        log.info("spare zygote %s ready after %.2f s (rss %d KiB)", self.pid, self.ready_s, self.rss_kb)
        return True

    async def watch(self) -> None:
        """Give the zygote up when it exits (whenever that is)."""
        if self.proc is not None:
            code = await self.proc.wait()
            self._give_up(f"it exited (rc {code}); see zygote.log")

    async def fork(self, log_path: Path) -> int:
        """A new spare's pid; the spare is (or soon is) this process's child. Raises ZygoteError."""
        async with self._lock:
            if not self.ready or self.proc is None or self.proc.stdin is None:
                raise ZygoteError(f"the zygote is {self.state}")
            try:
                self.proc.stdin.write(encode(ForkRequest(log=str(log_path))))
                await self.proc.stdin.drain()
                msg = await asyncio.wait_for(self._read(), FORK_TIMEOUT_S)
            except (ConnectionError, TimeoutError) as exc:
                self._give_up(f"a fork request failed: {type(exc).__name__}")
                raise ZygoteError(self.why_gone) from exc
            if not isinstance(msg, Forked):
                why = "it exited" if msg is None else getattr(msg, "error", f"unexpected {msg.answer!r}")
                self._give_up(f"a fork failed: {why}")
                raise ZygoteError(self.why_gone)
            return msg.pid

    async def _read(self) -> ZygoteAnswer | None:
        """The zygote's next answer; None: it exited. A malformed answer is a :class:`ForkFailed`
        naming what is wrong with it."""
        assert self.proc is not None
        assert self.proc.stdout is not None
        line = await self.proc.stdout.readline()
        if not line:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 5)
            return None
        try:
            return decode_answer(line)
        except ZygoteProtocolError as exc:
            return ForkFailed(error=str(exc))

    def _give_up(self, why: str) -> None:
        if self.state == "gone":
            return
        self.state = "gone"
        self.why_gone = why
        log.warning("spare zygote given up: %s; spares start as fresh processes", why)
        self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def close(self) -> None:
        self.state = "gone"
        self.why_gone = self.why_gone or "closed"
        self.kill()
        if self.proc is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.proc.wait(), 5)

    def info(self) -> dict[str, Any]:
        return {"pid": self.pid, "state": self.state, "ready_s": self.ready_s, "rss_kb": self.rss_kb}

"""The training hook: a few lines in a training loop report progress and errors to the node agent.

Usage in any Megatron/PyTorch loop (the hook itself imports neither)::

    hook = TrainingHook.from_env()
    with hook.guard():                          # exceptions -> report -> os._exit(EXIT_EXCEPTION)
        setup()
        for it in range(start, n):
            with hook.iteration(it, phase="first" if it == start else "train"):
                for k, mb in enumerate(micro_batches):
                    step(mb); hook.micro_batch_done(it, k)
                hook.compute_done()             # before the gradient all-reduce
                sync_and_update()
                hook.set_progress(tokens=..., model_flops=..., loss=...)
            if it % 50 == 0:
                with hook.slow_phase("checkpoint"):
                    save()
    hook.finished()

Transport: newline-delimited JSON over the Unix socket named by ``UNICRON_HOOK_SOCKET`` (the agent
serves it); the frames are the typed messages of :mod:`agents.training.hook_protocol`. Without that
variable the hook is inert (a standalone run pays one attribute check per call). The agent pushes
orders down the same socket: fault-injection orders (:class:`~agents.training.hook_protocol.FaultOrder`)
and transition orders (:class:`~agents.training.hook_protocol.TransitionOrder`, see
:mod:`agents.training.elastic`); a malformed one is refused with a line on stderr. Both are picked up
without a thread by a non-blocking read at every iteration start; a worker whose collective failed
blocks in :meth:`TrainingHook.wait_order` (bounded) instead.

Stack capture: the hook registers :mod:`faulthandler` on ``SIGUSR1`` writing all threads' Python
stacks to ``UNICRON_STACK_FILE``; it works even while the main thread is blocked inside a C-level
collective, which is exactly when the agent needs it (a hang).
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from pydantic import BaseModel as HookFrame

from agents.training.hook_protocol import (
    AwaitingOrder,
    CheckpointDone,
    ComputeDone,
    Evaluated,
    ExceptionRaised,
    FaultOrder,
    HookProtocolError,
    IterationEnd,
    IterationStart,
    MicroBatchDone,
    SlowPhase,
    TrainingDone,
    TransitionDone,
    TransitionOrder,
    WorkerHello,
    decode_order,
    encode,
)
from controlplane.core.env import env_int, env_str
from controlplane.core.protocol import TransitionReport

EXIT_OK = 0
EXIT_EXCEPTION = 17
"""The worker reported an exception through the hook and left with this code."""
EXIT_HOOK_LOST = 18
"""The worker lost its agent (socket closed) and left."""

NETWORK_ERROR_MESSAGE = (
    "[injected] [../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]: "
    "Connection reset by peer"
)
"""What a ``network_error`` drill raises inside a collective: gloo's own wording for a dropped link."""

ENV_SOCKET = "UNICRON_HOOK_SOCKET"
ENV_STACK_FILE = "UNICRON_STACK_FILE"
ENV_RANK = "UNICRON_RANK"

FaultHandler = Callable[[FaultOrder], None]


def reap_children() -> None:
    """Kill helper processes we started (dist_checkpointing's writer/manager) before ``os._exit``."""
    try:
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    except ImportError:  # pragma: no cover - psutil is a dependency
        pass


class TrainingHook:
    """Reports to the agent. All methods are cheap; none blocks on the agent."""

    def __init__(self, sock: socket.socket | None, rank: int, stack_file: str | None = None) -> None:
        self._sock = sock
        self._rank = rank
        self._buf = b""
        self._iteration: int | None = None
        self._iter_start = 0.0
        self._compute_s: float | None = None
        self._progress: dict[str, Any] = {}
        self._micro_batches = 0
        self.epoch: int | None = None
        """The worker's epoch; tags exception and transition events (the agent may already have
        moved the worker to a newer epoch when an old epoch's error arrives)."""
        self.fault_handlers: list[FaultHandler] = []
        self.orders: list[TransitionOrder] = []
        """Transition orders received and not yet taken."""
        self.in_collective = False
        self._stack_fh: TextIO | None = None
        if stack_file:
            self._stack_fh = open(stack_file, "w")  # noqa: SIM115 - lives as long as the process
            faulthandler.register(signal.SIGUSR1, file=self._stack_fh, all_threads=True, chain=False)
        if sock is not None:
            self._send(WorkerHello(rank=rank, pid=os.getpid()))

    @classmethod
    def from_env(cls, sock: socket.socket | None = None, buffered: bytes = b"") -> TrainingHook:
        """Connect to the agent named by the environment, or use ``sock``: a warm spare's connection
        (:mod:`agents.training.spare`), with ``buffered`` bytes it has already read past its
        assignment."""
        path = env_str(ENV_SOCKET)
        rank = env_int(ENV_RANK, 0, minimum=0)
        if sock is None and path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
        hook = cls(sock, rank, env_str(ENV_STACK_FILE))
        if buffered:
            hook._take(buffered)
        return hook

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    # ---------------------------------------------------------------- transport
    def _send(self, event: HookFrame) -> None:
        if self._sock is None:
            return
        try:
            self._sock.sendall(encode(event))
        except OSError:
            # The agent is gone: a worker without its supervisor must not keep training.
            os._exit(EXIT_HOOK_LOST)

    def _poll(self) -> None:
        """Pick up orders from the agent without blocking."""
        if self._sock is None:
            return
        try:
            chunk = self._sock.recv(65536, socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            os._exit(EXIT_HOOK_LOST)
        if not chunk:
            os._exit(EXIT_HOOK_LOST)
        self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            try:
                order = decode_order(line)
            except HookProtocolError as exc:
                print(f"[hook] refused: {exc}", file=sys.stderr, flush=True)
                continue
            if order.order == "transition":
                self.orders.append(order)
            elif order.order == "fault":
                for handler in self.fault_handlers:
                    handler(order)
            else:
                print(f"[hook] refused: a worker takes no {order.order!r} order", file=sys.stderr, flush=True)

    def poll_orders(self) -> TransitionOrder | None:
        """A pending transition order, if one arrived (non-blocking); it is taken."""
        self._poll()
        return self.orders.pop(0) if self.orders else None

    def wait_order(self, timeout_s: float) -> TransitionOrder | None:
        """Block up to ``timeout_s`` for a transition order (after a failed collective)."""
        if self.orders:
            return self.orders.pop(0)
        if self._sock is None:
            return None
        self._send(AwaitingOrder(t=time.time(), ep=self.epoch))
        deadline = time.monotonic() + timeout_s
        while not self.orders:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._sock.settimeout(left)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                return None
            except OSError:
                os._exit(EXIT_HOOK_LOST)
            finally:
                self._sock.settimeout(None)
            if not chunk:
                os._exit(EXIT_HOOK_LOST)
            self._take(chunk)
        return self.orders.pop(0)

    # ---------------------------------------------------------------- progress
    @contextlib.contextmanager
    def iteration(self, it: int, phase: str = "train") -> Iterator[None]:
        self._poll()
        self._iteration = it
        self._compute_s = None
        self._progress = {}
        self._micro_batches = 0
        start = time.time()
        self._iter_start = start
        self._send(IterationStart(it=it, t=start, phase=phase, ep=self.epoch))
        yield
        end = time.time()
        self._send(
            IterationEnd(
                it=it,
                t=end,
                dur=end - start,
                compute=self._compute_s if self._compute_s is not None else end - start,
                mbs=self._micro_batches,
                phase=phase,
                ep=self.epoch,
                **self._progress,
            )
        )

    def micro_batch_done(self, it: int, index: int) -> None:
        """Micro-batch ``index`` (its global index in the iteration) of iteration ``it`` finished."""
        self._micro_batches += 1
        self._send(MicroBatchDone(it=it, idx=index, t=time.time()))

    def compute_done(self) -> None:
        """All local micro-batches done; what follows is gradient synchronisation and the update.

        The agent learns that this rank now waits for its peers: if the iteration then hangs, this
        rank is a victim of a hung peer, not the culprit (see :mod:`agents.worker_monitor`)."""
        now = time.time()
        self._compute_s = now - self._iter_start
        self._send(ComputeDone(it=self._iteration, t=now))

    def transition(self, report: TransitionReport) -> None:
        """The first iteration of a new epoch completed: how the rank got there."""
        self._send(TransitionDone(t=time.time(), ep=self.epoch, report=report))

    def checkpoint_saved(self, iteration: int, path: str, size_bytes: int) -> None:
        """A persistent checkpoint of ``iteration`` is complete at ``path`` (``size_bytes`` on storage)."""
        frame = CheckpointDone(t=time.time(), ep=self.epoch, it=iteration, path=path, size_bytes=size_bytes)
        self._send(frame)

    def evaluated(self, iteration: int, loss: float) -> None:
        """The evaluation after ``iteration`` measured validation loss ``loss``."""
        self._send(Evaluated(t=time.time(), ep=self.epoch, it=iteration, loss=loss))

    def set_progress(
        self,
        tokens: int,
        model_flops: float,
        loss: float | None = None,
        learning_rate: float | None = None,
        grad_norm: float | None = None,
    ) -> None:
        self._progress = {
            "tokens": tokens,
            "flops": model_flops,
            "loss": loss,
            "lr": learning_rate,
            "grad_norm": grad_norm,
        }

    @contextlib.contextmanager
    def slow_phase(self, phase: str) -> Iterator[None]:
        """Mark a phase that is slow on purpose (checkpoint, evaluation); monitors exclude it."""
        self._send(SlowPhase(phase=phase, state="begin", t=time.time()))
        yield
        self._send(SlowPhase(phase=phase, state="end", t=time.time()))

    def finished(self) -> None:
        self._send(TrainingDone(t=time.time()))

    # ---------------------------------------------------------------- errors
    def report_exception(self, exc: BaseException, waiting: bool = False) -> None:
        """Forward ``exc``; ``waiting``: the worker stays alive and waits for an order (elastic)."""
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self._send(
            ExceptionRaised(
                t=time.time(),
                type=f"{type(exc).__module__}.{type(exc).__qualname__}"
                if type(exc).__module__ != "builtins"
                else type(exc).__qualname__,
                msg=str(exc),
                tb=tb,
                it=self._iteration,
                in_collective=self.in_collective or "distributed_c10d.py" in tb,
                ep=self.epoch,
                waiting=waiting,
            )
        )
        exc.__dict__["_unicron_reported"] = True

    @contextlib.contextmanager
    def guard(self) -> Iterator[TrainingHook]:
        """Catch any exception, forward it, and leave with :data:`EXIT_EXCEPTION`.

        ``os._exit`` rather than ``sys.exit``: after a failed gloo collective the interpreter may
        abort at exit (rc -6); the agent must see a predictable code.
        """
        try:
            yield self
        except SystemExit as exc:
            if exc.code in (None, 0):
                raise
            self.report_exception(exc)
            reap_children()
            os._exit(EXIT_EXCEPTION)
        except BaseException as exc:
            if not getattr(exc, "_unicron_reported", False):
                self.report_exception(exc)
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            reap_children()
            os._exit(EXIT_EXCEPTION)

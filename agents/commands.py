"""Command handling: a registry keyed by message type, duplicate suppression and epoch fencing.

Every command gets exactly one :class:`Ack` per delivery:

- a ``command_id`` seen before → ``duplicate`` (the coordinator's outbox re-sends unacked commands
  after a reconnect; the work is not done twice), with the first outcome in ``detail``;
- an ``epoch`` older than the newest seen for the task → ``stale_epoch`` (fencing);
- a handler that raises ``LookupError``/``ValueError`` → ``rejected``; anything else → ``failed``;
- otherwise the handler's outcome (``done`` with a short description).

Commands of the same task are handled one at a time in arrival order (a per-task lock), so an
``InjectFault`` sent right after a ``StartWorkers`` finds the workers.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from controlplane.core.protocol import Ack, AckOutcome, Command

log = logging.getLogger("agents.commands")

Handler = Callable[[Any], Awaitable[str]]
MAX_REMEMBERED = 4096


class CommandRegistry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._seen: OrderedDict[str, AckOutcome] = OrderedDict()
        self.epochs: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def register(self, type_: str, handler: Handler) -> None:
        if type_ in self._handlers:
            raise ValueError(f"handler for {type_!r} already registered")
        self._handlers[type_] = handler

    @property
    def types(self) -> frozenset[str]:
        return frozenset(self._handlers)

    def _remember(self, command_id: str, outcome: AckOutcome) -> None:
        self._seen[command_id] = outcome
        while len(self._seen) > MAX_REMEMBERED:
            self._seen.popitem(last=False)

    async def dispatch(self, cmd: Command) -> Ack:
        cid = cmd.command_id
        if cid in self._seen:
            return Ack(command_id=cid, outcome="duplicate", detail=f"already handled: {self._seen[cid]}")
        task_id = cmd.task_id
        if task_id is not None:
            newest = self.epochs.get(task_id, -1)
            if cmd.epoch < newest:
                self._remember(cid, "stale_epoch")
                return Ack(
                    command_id=cid,
                    outcome="stale_epoch",
                    detail=f"epoch {cmd.epoch} < newest epoch {newest} of task {task_id!r}",
                )
            self.epochs[task_id] = cmd.epoch
        handler = self._handlers.get(cmd.type)
        if handler is None:
            self._remember(cid, "rejected")
            return Ack(command_id=cid, outcome="rejected", detail=f"no handler for {cmd.type!r}")
        self._remember(cid, "accepted")  # a re-delivery while it runs is a duplicate too
        outcome: AckOutcome
        # Commands of one task run one after the other, in arrival order; other tasks are not held up.
        lock = self._locks.setdefault(task_id or "", asyncio.Lock())
        try:
            async with lock:
                detail = await handler(cmd)
            outcome = "done"
        except (LookupError, ValueError) as exc:
            outcome, detail = "rejected", f"{type(exc).__name__}: {exc}"
        except Exception as exc:
            log.exception("command %s (%s) failed", cid, cmd.type)
            outcome, detail = "failed", f"{type(exc).__name__}: {exc}"
        self._remember(cid, outcome)
        return Ack(command_id=cid, outcome=outcome, detail=detail)

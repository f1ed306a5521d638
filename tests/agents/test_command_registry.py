"""Commands are acked once each: duplicates and older epochs are refused, handler errors are reported."""

from __future__ import annotations

from agents.commands import CommandRegistry
from controlplane.core.protocol import StopWorkersCommand


def _stop(cid: str, epoch: int, task: str = "t") -> StopWorkersCommand:
    return StopWorkersCommand(command_id=cid, task_id=task, epoch=epoch)


async def test_handler_result_is_acked_done() -> None:
    reg = CommandRegistry()
    calls: list[str] = []

    async def handle(cmd: StopWorkersCommand) -> str:
        calls.append(cmd.command_id)
        return "stopped"

    reg.register("stop_workers", handle)
    ack = await reg.dispatch(_stop("c1", 1))
    assert (ack.outcome, ack.detail) == ("done", "stopped")
    assert calls == ["c1"]


async def test_duplicate_command_is_not_run_twice() -> None:
    reg = CommandRegistry()
    calls: list[str] = []

    async def handle(cmd: StopWorkersCommand) -> str:
        calls.append(cmd.command_id)
        return "ok"

    reg.register("stop_workers", handle)
    await reg.dispatch(_stop("c1", 1))
    ack = await reg.dispatch(_stop("c1", 1))
    assert ack.outcome == "duplicate"
    assert "done" in ack.detail
    assert calls == ["c1"]


async def test_older_epoch_is_fenced_per_task() -> None:
    reg = CommandRegistry()

    async def handle(cmd: StopWorkersCommand) -> str:
        return "ok"

    reg.register("stop_workers", handle)
    assert (await reg.dispatch(_stop("c1", 5))).outcome == "done"
    stale = await reg.dispatch(_stop("c2", 4))
    assert stale.outcome == "stale_epoch"
    assert "4 < newest epoch 5" in stale.detail
    assert (await reg.dispatch(_stop("c3", 5))).outcome == "done"  # same epoch is fine
    assert (await reg.dispatch(_stop("c4", 1, task="other"))).outcome == "done"  # epochs are per task


async def test_handler_errors_are_reported() -> None:
    reg = CommandRegistry()

    async def missing(cmd: StopWorkersCommand) -> str:
        raise LookupError("no such task")

    reg.register("stop_workers", missing)
    ack = await reg.dispatch(_stop("c1", 1))
    assert ack.outcome == "rejected"
    assert "no such task" in ack.detail


async def test_unexpected_handler_crash_is_failed_not_raised() -> None:
    reg = CommandRegistry()

    async def broken(cmd: StopWorkersCommand) -> str:
        raise RuntimeError("boom")

    reg.register("stop_workers", broken)
    ack = await reg.dispatch(_stop("c1", 1))
    assert ack.outcome == "failed"
    assert "boom" in ack.detail

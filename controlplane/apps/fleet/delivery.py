"""Delivering a node's outbox over its agent link: what is pending, what was sent, what the agent
acknowledged, what can never be delivered. The rows are the truth (:mod:`controlplane.apps.fleet.outbox`).
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass

from django.db import transaction

from controlplane.apps.common.errors import StaleState
from controlplane.apps.fleet.authority import list_snapshot_keys
from controlplane.apps.fleet.choices import CommandState
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.fleet.selectors import list_pending_commands
from controlplane.apps.fleet.services import do_ack_command, do_mark_command_sent
from controlplane.core.protocol import Ack

_OK_OUTCOMES = frozenset({"accepted", "done", "duplicate"})


@transaction.atomic
def record_ack(node_id: int, ack: Ack) -> tuple[str | None, AgentCommand | None]:
    """Acknowledge the node's outbox row. Returns a refusal detail when the ack names no command of this
    node, and the row when this ack settled it (its transition then moves on)."""
    try:
        command_id = uuid.UUID(ack.command_id)
    except ValueError:
        return f"ack: command_id {ack.command_id!r} is not a UUID", None
    row = (
        AgentCommand.objects.select_for_update(no_key=True)
        .filter(command_id=command_id, node_id=node_id)
        .first()
    )
    if row is None:
        return f"ack: no command {ack.command_id} for this node", None
    if row.state == CommandState.PENDING:  # requeued on reconnect, but the agent had it already
        do_mark_command_sent(row)
        row.refresh_from_db()
    ok = ack.outcome in _OK_OUTCOMES
    if do_ack_command(row, ok, "" if ok else f"{ack.outcome}: {ack.detail}".strip(": ")):
        return None, row
    return None, None


def pending_commands(node_id: int) -> list[AgentCommand]:
    return list(list_pending_commands(Node(pk=node_id)).select_related("task"))  # its snapshot key


@dataclass(frozen=True)
class Outbox:
    """What a node's link has to send, read in one go: the snapshot keys of the tasks whose replicas
    the node keeps (``task id → secret``), and its pending commands in order."""

    snapshot_keys: dict[str, str]
    commands: list[AgentCommand]


def read_outbox(node_id: int) -> Outbox:
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return Outbox({}, [])
    return Outbox(list_snapshot_keys(node), pending_commands(node_id))


def settle_sends(sent: list[AgentCommand], undeliverable: list[tuple[AgentCommand, str]]) -> None:
    """After a batch of sends: the rows that went out are marked sent, those that could not be built
    fail. A row sent but not yet marked when the link broke is still pending and is sent again after
    the reconnect (the agent drops a command it has already seen)."""
    for command in sent:
        mark_sent(command)
    for command, error in undeliverable:
        fail_undeliverable(command, error)


def mark_sent(command: AgentCommand) -> None:
    with contextlib.suppress(StaleState):  # another socket of the node sent it, or it was acked
        do_mark_command_sent(command)


def fail_undeliverable(command: AgentCommand, error: str) -> None:
    with contextlib.suppress(StaleState):
        do_ack_command(command, ok=False, error=f"undeliverable: {error}")

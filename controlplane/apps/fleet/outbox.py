"""The agent command outbox on the wire (docs/ARCHITECTURE.md §2, §6).

The :class:`~controlplane.apps.fleet.models.AgentCommand` row is the source of truth; this module only

- turns a row into the protocol message the agent receives (:func:`command_message`; a launch or
  reconfiguration gets the task's snapshot key here, from the task row), and
- wakes the node's agent link after a command was committed (:func:`notify_agent_on_commit`): every
  socket of node ``n`` is in the channel-layer group :func:`agent_group` ``(n)``; on ``agent.command``
  it reads the node's pending rows from PostgreSQL and sends them. A lost wake-up (Redis down) loses
  nothing: the rows stay pending and go out when the agent next (re)connects.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.db import transaction
from pydantic import ValidationError

from controlplane.apps.common.broadcast import group_send
from controlplane.apps.fleet.models import AgentCommand
from controlplane.core.protocol import COMMAND_TYPES, COORDINATOR_MESSAGE_ADAPTER, Command

log = logging.getLogger(__name__)

AGENT_COMMAND_EVENT = "agent.command"
"""Channel-layer message type: "read your node's pending commands and send them"."""
AGENT_SUPERSEDED_EVENT = "agent.superseded"
"""Channel-layer message type: a newer socket authenticated as the same node; older ones close."""
NODE_STATE_EVENT = "node.state"
"""Channel-layer message type: the node's state changed (``state``); its link re-reads what it caches."""

_GROUP_PREFIX = "agent."
_MAX_GROUP_NAME = 99  # channels refuses group names of 100 characters or more

_COMMAND_CLASSES: dict[str, Any] = {cls.model_fields["type"].default: cls for cls in COMMAND_TYPES}


class UndeliverableCommand(ValueError):
    """The row cannot be expressed as a protocol command (bad payload): it is failed, not retried."""


def agent_group(node_name: str) -> str:
    """Channel-layer group of every agent-link socket of ``node_name`` (node names are slugs)."""
    name = _GROUP_PREFIX + node_name
    if len(name) <= _MAX_GROUP_NAME:
        return name
    return _GROUP_PREFIX + "h" + hashlib.sha256(node_name.encode()).hexdigest()


def command_message(row: AgentCommand) -> Command:
    """The wire command for an outbox row: ``command_id`` and ``epoch`` from the row (fencing),
    ``task_id`` is the task's primary key as a string; payload keys the message does not define (such
    as the ``task`` the training services store for their own use) are left out."""
    cls = _COMMAND_CLASSES.get(row.type)
    if cls is None:
        raise UndeliverableCommand(f"no protocol message for command type {row.type!r}")
    data = {k: v for k, v in (row.payload or {}).items() if k in cls.model_fields}
    data.update(
        type=row.type,
        command_id=str(row.command_id),
        epoch=row.task_epoch or 0,
        task_id=str(row.task_id) if row.task_id is not None else data.get("task_id"),
    )
    if data["task_id"] is None and cls.model_fields["task_id"].is_required():
        data["task_id"] = ""
    if "snapshot_secret" in cls.model_fields and row.task is not None:
        # the key lives on the task row only (never in the stored payload the API shows)
        data["snapshot_secret"] = row.task.snapshot_secret
    try:
        message: Command = COORDINATOR_MESSAGE_ADAPTER.validate_python(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        raise UndeliverableCommand(f"{row.type}: {problems}") from None
    return message


def _tell(node_name: str, event: dict[str, Any]) -> None:
    # best effort: what the event says is in PostgreSQL, read on the next (re)connect
    group_send(agent_group(node_name), event)


def _wake(node_name: str) -> None:
    _tell(node_name, {"type": AGENT_COMMAND_EVENT})


def notify_node_state_on_commit(node_name: str, state: str) -> None:
    """After the current transaction commits, tell ``node_name``'s agent link its node is now ``state``
    (the link keeps heartbeats of a healthy node off PostgreSQL and must know when it is not)."""
    transaction.on_commit(lambda: _tell(node_name, {"type": NODE_STATE_EVENT, "state": state}))


def notify_agent_on_commit(node_name: str) -> None:
    """After the current transaction commits, tell ``node_name``'s agent link to send its pending
    commands."""
    transaction.on_commit(lambda: _wake(node_name))

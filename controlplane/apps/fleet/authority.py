"""What a node's agent may speak for (docs/ARCHITECTURE.md §6): its own ranks, and snapshots of tasks it
serves.

A node token authenticates the agent link as one node; these checks authorise each message's content
against that node's allocations, so a node cannot report for another node's ranks or tasks:

- a worker report (failure evidence, iteration stats, transition report, exit) names a task, an epoch
  and a rank: the node must have held that rank of that task at that epoch (an allocation row on one
  of its devices; the row may be released since: late evidence of an older epoch is recorded, never
  acted on);
- a snapshot advert (``Hello.snapshots``, ``Heartbeat.snapshots``) names a task, an origin node, an
  epoch and ranks: the advertising node must have run a worker of the task or be one of its replica
  peers (a launch of the task named its snapshot endpoint as ``snapshot_replica``), and the origin node
  must have held those ranks at that epoch.

Refusals are audited (``agent_report_refused``, ``agent_snapshot_refused``) by the caller through
:func:`do_record_refusal`; nothing else changes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from controlplane.apps.accounts.services import do_record_audit
from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.training.models import Allocation, TrainingTask
from controlplane.apps.training.selectors import task_pk
from controlplane.core.protocol import SnapshotInfo, WorkerReport

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    """Why a message was refused (the ``protocol_error`` detail) and what the audit row records."""

    detail: str
    audit: dict[str, Any]


def check_worker_report(node_id: int, report: WorkerReport) -> Refusal | None:
    """None when ``node_id`` held rank ``report.rank`` of ``report.task_id`` at ``report.epoch``."""
    pk = task_pk(report.task_id)
    held = (
        pk is not None
        and Allocation.objects.filter(
            task_id=pk, epoch=report.epoch, rank=report.rank, device__node_id=node_id
        ).exists()
    )
    if held:
        return None
    return Refusal(
        f"worker_report {report.event.kind}: this node never ran rank {report.rank} of task "
        f"{report.task_id!r} at epoch {report.epoch}",
        {
            "task_id": report.task_id[:100],
            "epoch": report.epoch,
            "rank": report.rank,
            "event": report.event.kind,
            "report_id": report.report_id,
        },
    )


def list_granted_tasks(node: Node) -> list[int]:
    """Tasks (not terminal) whose launches name ``node``'s snapshot server as their replica peer."""
    if not node.snapshot_endpoint:
        return []
    from controlplane.apps.training.choices import TERMINAL_TASK_STATES

    rows = (
        AgentCommand.objects.filter(
            task__isnull=False, payload__launch__snapshot_replica=node.snapshot_endpoint
        )
        .exclude(node=node)
        .exclude(task__state__in=list(TERMINAL_TASK_STATES))
        .values_list("task_id", flat=True)
        .distinct()
    )
    return sorted(int(t) for t in rows if t is not None)


def list_snapshot_keys(node: Node) -> dict[str, str]:
    """``task id → snapshot secret`` of the tasks whose snapshots ``node`` keeps and serves: those it is
    a replica peer of (:func:`list_granted_tasks`) and those with an active allocation on it (their
    commands carry the key too, but an agent that restarted has lost it until the next command)."""
    from controlplane.apps.training.choices import TERMINAL_TASK_STATES

    running = (
        Allocation.objects.filter(active=True, device__node=node)
        .exclude(task__state__in=list(TERMINAL_TASK_STATES))
        .values_list("task_id", flat=True)
    )
    granted = sorted(set(list_granted_tasks(node)) | set(running))
    if not granted:
        return {}
    return {
        str(pk): secret
        for pk, secret in TrainingTask.objects.filter(pk__in=granted).values_list("pk", "snapshot_secret")
    }


def trusted_snapshot_holders(task_id: int) -> set[str]:
    """Names of the nodes whose snapshot adverts of ``task_id`` are believed: those that ran a worker of
    it (any epoch) and its replica peers."""
    names = set(
        Allocation.objects.filter(task_id=task_id).values_list("device__node__name", flat=True).distinct()
    )
    endpoints = {
        str(e)
        for e in AgentCommand.objects.filter(task_id=task_id).values_list(
            "payload__launch__snapshot_replica", flat=True
        )
        if e
    }
    if endpoints:
        names |= set(Node.objects.filter(snapshot_endpoint__in=endpoints).values_list("name", flat=True))
    return names


def _ranks_held(task_id: int, epoch: int, origin: str) -> set[int]:
    return set(
        Allocation.objects.filter(task_id=task_id, epoch=epoch, device__node__name=origin).values_list(
            "rank", flat=True
        )
    )


def check_snapshot_adverts(
    node_id: int, snapshots: Sequence[SnapshotInfo]
) -> tuple[list[SnapshotInfo], list[Refusal]]:
    """Split an advert into the snapshots ``node_id`` may list and the refused ones."""
    if not snapshots:
        return [], []
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return [], []
    holders: dict[int, set[str]] = {}
    held: dict[tuple[int, int, str], set[int]] = {}
    ok: list[SnapshotInfo] = []
    refused: list[Refusal] = []
    for info in snapshots:
        pk = task_pk(info.task_id)
        why = None
        if pk is None:
            why = "names no task"
        else:
            if pk not in holders:
                holders[pk] = trusted_snapshot_holders(pk)
            key = (pk, info.epoch, info.origin_node)
            if key not in held:
                held[key] = _ranks_held(*key)
            if node.name not in holders[pk]:
                why = f"{node.name} runs no worker of it and is not its replica peer"
            elif not set(info.ranks) <= held[key]:
                extra = sorted(set(info.ranks) - held[key])
                why = f"{info.origin_node} did not hold ranks {extra} at epoch {info.epoch}"
        if why is None:
            ok.append(info)
            continue
        refused.append(
            Refusal(
                f"snapshot of task {info.task_id!r} (origin {info.origin_node}, epoch {info.epoch}, "
                f"iteration {info.iteration}): {why}",
                {
                    "task_id": info.task_id[:100],
                    "origin_node": info.origin_node,
                    "epoch": info.epoch,
                    "iteration": info.iteration,
                },
            )
        )
    return ok, refused


@transaction.atomic
def do_record_refusal(node_id: int, verb: str, refusals: Iterable[Refusal]) -> int:
    """Audit refused agent messages (one row each); returns how many were written."""
    node = Node.objects.filter(pk=node_id).first()
    if node is None:
        return 0
    n = 0
    for r in refusals:
        log.warning("agent of %s: refused: %s", node.name, r.detail)
        do_record_audit(None, verb, node, after={"detail": r.detail[:1000], **r.audit})
        n += 1
    return n

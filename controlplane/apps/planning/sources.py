"""Where each new rank takes its state from (docs/ARCHITECTURE.md §7.6): a live peer, an in-memory
snapshot copy on a usable node, or the newest saved checkpoint (the nearest principle,
:mod:`controlplane.core.transitions`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

from controlplane.apps.fleet.authority import trusted_snapshot_holders
from controlplane.apps.planning.models import Transition
from controlplane.apps.planning.records import config_record, read_decisions
from controlplane.apps.planning.selectors import (
    HeldDevice,
    NodeView,
)
from controlplane.apps.training.models import TrainingTask
from controlplane.apps.training.selectors import get_task_recipe, latest_checkpoint_iteration
from controlplane.core.orchestration import Layout, RankPlacement
from controlplane.core.protocol import (
    SnapshotInfo,
    StateSource,
)
from controlplane.core.transitions.migration import LiveShard, NewRank, SnapshotCopy, choose_state_sources
from controlplane.core.transitions.snapshots import complete_snapshot_copies


def checkpoint_dir(task: TrainingTask) -> str:
    """The task's checkpoint root: its recipe's ``checkpoint.directory``, else ``task-{id}`` under the
    deployment's ``UNICRON_CHECKPOINT_ROOT``."""
    section = get_task_recipe(task).checkpoint
    if section is not None:
        return section.directory
    return str(Path(str(settings.UNICRON_CHECKPOINT_ROOT)) / f"task-{task.pk}")


def state_sources(
    task: TrainingTask,
    placements: Sequence[RankPlacement],
    layout: Layout,
    held: Sequence[HeldDevice],
    alive: set[int],
    view: NodeView | None = None,
) -> tuple[list[StateSource], int]:
    """Nearest-principle sources per new rank (``core.transitions``), and the planned rollback."""
    old = task.parallel_config or {}
    old_layout = (int(old["tp"]), int(old["pp"])) if old.get("tp") and old.get("pp") else None
    live = []
    for h in held:
        if h.rank in alive and old_layout is not None:
            tp_rank = h.rank % old_layout[0]
            dp = int(old.get("dp", 1))
            pp_rank = h.rank // (old_layout[0] * dp)
            live.append(LiveShard(h.rank, h.slot.node, h.slot.index, tp_rank, pp_rank))
    snapshots = snapshot_copies(task, view, old_layout) if view is not None else []
    done = int(task.iteration) + 1 if task.iteration or live else int(task.iteration)
    # what the workers reported saved (a save can be skipped, fail or still be in flight), never a guess
    # from the interval nor a read of the checkpoint storage, which the control plane need not see
    ckpt = latest_checkpoint_iteration(task)
    plan = choose_state_sources(
        [NewRank(p.rank, p.device.node, p.device.index, p.tp_rank, p.pp_rank) for p in placements],
        new_layout=(layout.tp, layout.pp),
        old_layout=old_layout,
        live=live,
        live_iteration=done if live else None,
        snapshots=snapshots,
        checkpoint_iteration=ckpt,
        checkpoint_path=checkpoint_dir(task) if ckpt is not None else None,
    )
    return list(plan.sources), plan.rollback_iterations


def epoch_layouts(task: TrainingTask) -> dict[int, tuple[int, int, int]]:
    """``(tp, pp, dp)`` of every epoch of ``task`` that has one: the plan of the transition that began
    it, and the task's current layout for the current epoch. A restart or a retry begins a new epoch
    with the same layout, so an older epoch's snapshot is as good a source as the current one's."""
    out: dict[int, tuple[int, int, int]] = {}
    for epoch, decisions in Transition.objects.filter(task=task).values_list("epoch", "plan__decisions"):
        for d in read_decisions(decisions):
            if d.task == task.pk and d.new_config is not None:
                out[int(epoch)] = (d.new_config.tp, d.new_config.pp, d.new_config.dp)
    current = config_record(task.parallel_config)
    if current is not None:
        out[task.epoch] = (current.tp, current.pp, current.dp)
    return out


def snapshot_copies(
    task: TrainingTask, view: NodeView, old_layout: tuple[int, int] | None
) -> list[SnapshotCopy]:
    """Complete in-memory snapshots of ``task`` on usable nodes, as their agents last listed them
    (``core.transitions.complete_snapshot_copies``), of any epoch whose layout is known
    (:func:`epoch_layouts`); the worker's loader reshards a copy whose layout differs.

    Only nodes that ran a worker of the task or are its replica peers are believed
    (``fleet.authority.trusted_snapshot_holders``), and only endpoints no other node claims too."""
    cfg = task.parallel_config or {}
    if old_layout is None or not cfg.get("dp"):
        return []
    trusted = trusted_snapshot_holders(task.pk)
    claimed: dict[str, int] = {}
    for n in (view.nodes_by_name[name] for name in view.usable_nodes):
        if n.snapshot_endpoint:
            claimed[n.snapshot_endpoint] = claimed.get(n.snapshot_endpoint, 0) + 1
    held: dict[str, list[SnapshotInfo]] = {}
    endpoints: dict[str, str] = {}
    for name in view.usable_nodes:
        node = view.nodes_by_name[name]
        if name not in trusted or claimed.get(node.snapshot_endpoint, 0) > 1:
            continue
        infos = []
        for raw in node.snapshots or []:
            try:
                infos.append(SnapshotInfo.model_validate(raw))
            except ValueError:
                continue
        held[name] = infos
        if node.snapshot_endpoint:
            endpoints[name] = node.snapshot_endpoint
    return complete_snapshot_copies(str(task.pk), held, epoch_layouts(task), endpoints)

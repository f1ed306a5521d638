"""Stored checkpoints of one rank: save every ``checkpoint_interval`` iterations, find and load one.

The directory layout is :mod:`controlplane.core.transitions.checkpoints` (the coordinator reads it
too); the content is Megatron's ``dist_checkpointing`` of :meth:`RankModel.sharded_state`, which
reshards on load when the layout (TP/PP) changed.
"""

from __future__ import annotations

from pathlib import Path

from agents.training.hook import TrainingHook
from agents.training.rank_model import RankModel
from controlplane.core.protocol import StateSource
from controlplane.core.transitions.checkpoints import checkpoint_dir, latest_checkpoint, mark_latest, prune


def save_checkpoint(
    state: RankModel, root: Path, iteration: int, rank: int, hook: TrainingHook, keep: int = 0
) -> None:
    """Every rank saves its shards of ``iteration``; rank 0 then marks it the latest and removes all but
    the ``keep`` newest (0: keeps all)."""
    import torch.distributed as dist
    from megatron.core import dist_checkpointing

    with hook.slow_phase("checkpoint"):  # hook
        path = checkpoint_dir(root, iteration)
        if rank == 0:
            path.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        dist_checkpointing.save(state.sharded_state(), str(path))
        dist.barrier()
        if rank == 0:
            mark_latest(root, iteration)
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            hook.checkpoint_saved(iteration, str(path), size)  # hook
            prune(root, keep)


def load_checkpoint(state: RankModel, path: Path, hook: TrainingHook) -> int:
    """Load the checkpoint directory ``path`` into the model and optimizer; returns bytes loaded."""
    from megatron.core import dist_checkpointing

    with hook.slow_phase("checkpoint"):  # hook
        loaded = dist_checkpointing.load(state.sharded_state(is_loading=True), str(path))
        state.model.load_state_dict(loaded["model"])
        state.optimizer.load_state_dict(loaded["optimizer"])
    return state.state_bytes()


def checkpoint_to_load(source: StateSource | None, default_root: str | None) -> tuple[int, Path] | None:
    """``(iteration, directory)`` of the checkpoint a rank loads, or None: start from scratch.

    A checkpoint source names the task's checkpoint root and the iteration wanted: that iteration's
    directory when it exists, else the newest complete one (or the source's path is a checkpoint
    directory itself). Without one, the newest complete checkpoint under the launch's root.
    """
    if source is not None and source.kind == "checkpoint" and source.path:
        root = Path(source.path)
        if source.iteration is not None and (wanted := checkpoint_dir(root, source.iteration)).is_dir():
            return source.iteration, wanted
        if (found := latest_checkpoint(root)) is not None:
            return found
        if (root / "metadata.json").exists() and source.iteration is not None:
            return source.iteration, root
        return None
    if default_root:
        return latest_checkpoint(Path(default_root))
    return None

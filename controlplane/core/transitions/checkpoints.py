"""The layout of a task's stored checkpoints, written by its workers and read by the coordinator.

A task's checkpoint root holds one ``dist_checkpointing`` directory per saved iteration,
``iter_{iteration:07d}``, and a ``latest`` marker naming the newest complete one. Rank 0 writes the
marker after every rank has saved (through a temporary file and a rename), so a marker never names a
half-written directory.
"""

from __future__ import annotations

from pathlib import Path

LATEST_MARKER = "latest"


def checkpoint_dir(root: Path, iteration: int) -> Path:
    """The directory of ``iteration``'s checkpoint under the task's checkpoint ``root``."""
    return root / f"iter_{iteration:07d}"


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    """``(iteration, directory)`` of the newest complete checkpoint under ``root``, or None."""
    try:
        iteration = int((root / LATEST_MARKER).read_text().strip())
    except (OSError, ValueError):
        return None
    path = checkpoint_dir(root, iteration)
    return (iteration, path) if path.is_dir() else None


def mark_latest(root: Path, iteration: int) -> None:
    """Name ``iteration`` the newest complete checkpoint (atomically: a reader sees old or new)."""
    tmp = root / f"{LATEST_MARKER}.tmp"
    tmp.write_text(str(iteration))
    tmp.replace(root / LATEST_MARKER)

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


def saved_iterations(root: Path) -> list[int]:
    """The iterations with a checkpoint directory under ``root``, ascending."""
    out = []
    for d in root.iterdir() if root.is_dir() else []:
        if d.is_dir() and d.name.startswith("iter_") and d.name[5:].isdigit():
            out.append(int(d.name[5:]))
    return sorted(out)


def prune(root: Path, keep: int) -> list[int]:
    """Remove all but the ``keep`` newest checkpoints up to the one the marker names (never it, never a
    newer one, which may still be written); returns the iterations removed."""
    import shutil

    latest = latest_checkpoint(root)
    if latest is None or keep < 1:
        return []
    older = [it for it in saved_iterations(root) if it <= latest[0]]
    gone = older[: max(len(older) - keep, 0)]
    for it in gone:
        shutil.rmtree(checkpoint_dir(root, it), ignore_errors=True)
    return gone


def mark_latest(root: Path, iteration: int) -> None:
    """Name ``iteration`` the newest complete checkpoint (atomically: a reader sees old or new)."""
    tmp = root / f"{LATEST_MARKER}.tmp"
    tmp.write_text(str(iteration))
    tmp.replace(root / LATEST_MARKER)

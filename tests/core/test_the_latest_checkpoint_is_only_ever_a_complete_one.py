"""The checkpoint layout shared by the workers (which write it) and the workload manager (which reads it):
the ``latest`` marker names the newest complete checkpoint, and a marker that is missing, unreadable or
names a directory that does not exist means no checkpoint."""

from __future__ import annotations

from pathlib import Path

from controlplane.core.transitions.checkpoints import checkpoint_dir, latest_checkpoint, mark_latest


def test_a_marked_checkpoint_is_found_by_its_iteration(tmp_path: Path) -> None:
    assert checkpoint_dir(tmp_path, 41) == tmp_path / "iter_0000041"
    checkpoint_dir(tmp_path, 41).mkdir()
    mark_latest(tmp_path, 41)
    assert latest_checkpoint(tmp_path) == (41, tmp_path / "iter_0000041")
    assert not (tmp_path / "latest.tmp").exists()


def test_no_marker_a_bad_marker_or_a_missing_directory_is_no_checkpoint(tmp_path: Path) -> None:
    assert latest_checkpoint(tmp_path) is None
    (tmp_path / "latest").write_text("forty-one")
    assert latest_checkpoint(tmp_path) is None
    mark_latest(tmp_path, 7)  # the directory was never written
    assert latest_checkpoint(tmp_path) is None
    assert latest_checkpoint(tmp_path / "nowhere") is None

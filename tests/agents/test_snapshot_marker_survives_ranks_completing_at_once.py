"""Every rank of a node writes the same ``COMPLETE`` marker into the snapshot's shared directory; two
ranks finishing at once must both succeed (with one shared temporary name the second rename found
nothing and that rank's snapshot counted as failed — a CI failure of the completion test)."""

from __future__ import annotations

import threading
from pathlib import Path

from agents.training.snapshot import COMPLETE, _write_atomic


def test_concurrent_marker_writes_all_succeed(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def rank(r: int) -> None:
        start.wait()
        for i in range(300):
            try:
                _write_atomic(tmp_path / COMPLETE, f'{{"rank": {r}, "i": {i}}}'.encode())
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (tmp_path / COMPLETE).read_bytes().startswith(b'{"rank": ')
    assert [p.name for p in tmp_path.iterdir()] == [COMPLETE]  # no temporary left behind

"""Ctrl-C or SIGTERM on a test run that uses the embedded servers stops everything it started: the
children the tests spawned, the embedded PostgreSQL and the embedded Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import alive

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_test_run_leaves_no_process_behind(tmp_path: Path, signum: int) -> None:
    pids_file = tmp_path / "pids.json"
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(UNICRON_STATE_DIR=str(tmp_path / "state"), UNICRON_PIDS_FILE=str(pids_file))
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/config/interrupted_run.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not pids_file.exists() or not pids_file.read_text():
            assert run.poll() is None, run.communicate()[0].decode()[-3000:]
            assert time.monotonic() < deadline, "the inner run did not start its servers within 180 s"
            time.sleep(0.2)
        pids = json.loads(pids_file.read_text())
        started = [pids["child"], pids["postgres"], *pids["redis"]]
        assert len(started) == 3, pids
        assert all(alive(pid) for pid in started), pids

        run.send_signal(signum)
        output = run.communicate(timeout=90)[0].decode()
        deadline = time.monotonic() + 20
        while any(alive(pid) for pid in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [pid for pid in started if alive(pid)]
        assert not left, f"still running after the run ended: {left} of {pids}\n{output[-3000:]}"
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()

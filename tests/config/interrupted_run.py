"""The inner run of ``test_an_interrupted_test_run_leaves_no_process_behind`` (not collected by itself).

It starts what a real test run starts — the embedded PostgreSQL and Redis (the root conftest, with
nothing configured) and a child process through :func:`tests.processes.spawn` — plus a process that takes a
handle on the embedded PostgreSQL and dies without letting go (as a killed test process would), writes their
pids to ``$UNICRON_PIDS_FILE`` and waits to be interrupted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.processes import spawn


def test_waits_to_be_interrupted() -> None:
    from django.conf import settings

    from controlplane.config import embedded

    assert settings.DATABASES["default"]["HOST"], "the test run did not start the embedded PostgreSQL"
    child = spawn(["sleep", "600"])
    holder = "import os; from controlplane.config.embedded import ensure_database_url as e; e(); os._exit(0)"
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    subprocess.run([sys.executable, "-c", holder], env=env, check=True, timeout=120)
    postmaster = int((embedded.state_dir() / "pgdata" / "postmaster.pid").read_text().split()[0])
    redis = [int(server.pid) for server in embedded._KEEP if hasattr(server, "pid")]
    Path(os.environ["UNICRON_PIDS_FILE"]).write_text(
        json.dumps({"child": child.pid, "postgres": postmaster, "redis": redis})
    )
    time.sleep(600)

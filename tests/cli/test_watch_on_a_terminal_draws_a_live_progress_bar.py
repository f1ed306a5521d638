from __future__ import annotations

import os
import pty
import re
import select
import time

from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.services import do_record_progress, do_set_task_state
from tests.cli.harness import UNICRON, Cli
from tests.cli.test_tasks_watch_follows_a_task_and_exits_by_how_it_ended import _submit
from tests.processes import spawn

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_watch_on_a_terminal_updates_a_progress_bar_in_place_until_the_task_completes(cli: Cli) -> None:
    task = _submit(total_iterations=200)
    master, slave = pty.openpty()
    env = cli.env(COLUMNS="120", LINES="30", TERM="xterm-256color")
    watch = spawn(
        [
            UNICRON,
            "--server",
            cli.server,
            "--token",
            cli.token or "",
            "tasks",
            "watch",
            str(task.pk),
            "--interval",
            "0.2",
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    screen = b""

    def read_until(text: str, timeout: float = 60.0) -> None:
        nonlocal screen
        deadline = time.monotonic() + timeout
        while text not in ANSI.sub("", screen.decode(errors="replace")):
            assert time.monotonic() < deadline, (
                f"no {text!r} on the terminal:\n{screen.decode(errors='replace')}"
            )
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    screen += os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break

    try:
        read_until("Ctrl-C stops watching")
        do_set_task_state(task, TaskState.RUNNING, bump_epoch=True)
        do_record_progress(task, 50)
        read_until("50/200")
        task.refresh_from_db()
        do_set_task_state(task, TaskState.COMPLETED)
        read_until(f"Task {task.pk} completed at iteration 50")
        assert watch.wait(60) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait(10)
        os.close(master)
    text = ANSI.sub("", screen.decode(errors="replace"))
    assert "25%" in text  # the progress bar's percentage
    assert "iteration 50" in text
    assert "━" in text  # the bar itself
    assert "\x1b[" in screen.decode(errors="replace")  # drawn in place with cursor movements

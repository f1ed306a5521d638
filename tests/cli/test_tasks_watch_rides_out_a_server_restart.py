from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from controlplane.apps.training.choices import TaskState
from controlplane.apps.training.services import do_record_progress, do_set_task_state
from tests.cli.harness import Background, Cli
from tests.cli.test_tasks_watch_follows_a_task_and_exits_by_how_it_ended import _submit
from tests.e2e.loop import AsgiServer, free_port
from tests.e2e.loop import test_database_url as child_database_url

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_server(transactional_db: None, tmp_path: Path) -> Iterator[AsgiServer]:
    """A daphne of this test's own, which it kills and starts again."""
    env = dict(
        os.environ, DATABASE_URL=child_database_url(), REDIS_URL=settings.REDIS_URL, PYTHONPATH=str(REPO)
    )
    server = AsgiServer(free_port(), env, tmp_path / "daphne.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _cli(cli: Cli, server: AsgiServer) -> Cli:
    return Cli(f"http://127.0.0.1:{server.port}", cli.home, cli.token)


def test_watch_keeps_going_while_the_server_restarts_and_ends_when_the_task_completes(
    cli: Cli, own_server: AsgiServer
) -> None:
    task = _submit(total_iterations=100)
    do_set_task_state(task, TaskState.RUNNING, bump_epoch=True)
    watch = Background.start(_cli(cli, own_server), "tasks", "watch", str(task.pk), "--interval", "0.3")
    try:
        watch.wait_for_line(f"task {task.pk} | running")
        own_server.kill()
        watch.wait_for_line("(retrying: cannot reach")
        do_record_progress(task, 60)
        own_server.start()
        watch.wait_for_line("iteration 60/100", timeout=90)
        task.refresh_from_db()
        do_set_task_state(task, TaskState.COMPLETED)

        assert watch.wait(90) == 0, watch.output
    finally:
        watch.stop()
    assert f"Task {task.pk} completed at iteration 60" in watch.output


def test_watch_gives_up_with_exit_4_when_the_server_stays_away(cli: Cli, own_server: AsgiServer) -> None:
    task = _submit()
    watch = Background.start(
        _cli(cli, own_server), "tasks", "watch", str(task.pk), "--interval", "0.3", "--give-up-after", "3"
    )
    try:
        watch.wait_for_line(f"task {task.pk} | pending")
        own_server.kill()

        assert watch.wait(60) == 4, watch.output
    finally:
        watch.stop()
    assert "server error (no answer): cannot reach" in watch.output

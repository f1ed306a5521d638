"""Killing the ASGI server (daphne: every agent link) mid-transition leaves no transition stuck, no
device in two active allocations and no failure event lost or doubled (docs/ARCHITECTURE.md §8): a new server
on
the same port gets the agents back (they reconnect with backoff and re-send what was not confirmed),
the outbox re-sends the commands that were not acknowledged, and the transition completes (or rolls
back and a later one completes)."""

from __future__ import annotations

import itertools
import re
import time
from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from controlplane.apps.fleet.models import AgentCommand, Node
from controlplane.apps.incidents.models import FailureEvent
from controlplane.apps.planning.models import Transition
from controlplane.apps.training.models import TrainingTask
from tests.e2e.conftest import LOOP_ENV
from tests.e2e.loop import Loop, assert_allocations_consistent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SHORT = {"outage_s": 0.5, "suspect_after_s": "30", "lost_after_s": "30"}
"""The server is back before the health watchdog suspects the silent nodes: nothing but the link broke,
so the in-flight transition itself completes."""
LONG = {
    "outage_s": 6.5,
    "suspect_after_s": LOOP_ENV["UNICRON_SUSPECT_AFTER_S"],
    "lost_after_s": LOOP_ENV["UNICRON_LOST_AFTER_S"],
}
"""The server stays dead longer than ``UNICRON_LOST_AFTER_S``: the watchdog (in Celery) cannot tell a
deaf server from dead nodes and declares every node lost; the in-flight transition is rolled back and
the task runs again once the agents are back."""
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def _first_step_sent(task: TrainingTask, epoch: int, timeout: float = 30.0) -> Transition:
    """Poll tightly (a sim task's restart takes well under a second) for the failure's transition once
    its first command left the outbox: the server is killed right then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        t = Transition.objects.filter(task=task, epoch__gt=epoch).order_by("epoch").first()
        if t is not None and AgentCommand.objects.filter(transition=t, state__in=["sent", "acked"]).exists():
            return t
        time.sleep(0.005)
    raise AssertionError(f"no command of a transition of task {task.pk} sent within {timeout}s")


def _link_down_times(agent_log: str, since: datetime) -> list[float]:
    """When the agent's link attempts failed (``link to coordinator down``), as Unix times after ``since``."""
    times = []
    for line in agent_log.splitlines():
        m = LOG_TIME.match(line)
        if m and "link to coordinator down" in line:
            at = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= since.timestamp() - 0.5:
                times.append(at)
    return times


def _resume_reported(t: Transition) -> dict[str, str]:
    step = t.steps.filter(name="resume").first()
    reported = ((step.detail or {}).get("reported") or {}) if step is not None else {}
    return {rank: str(entry.get("at")) for rank, entry in reported.items()}


@pytest.mark.parametrize(
    "outage", [SHORT, LONG], ids=["back_before_nodes_are_suspect", "longer_than_lost_after"]
)
def test_asgi_server_killed_mid_transition(loop: Loop, outage: dict[str, Any]) -> None:
    assert loop.asgi is not None
    loop.restart_worker(
        UNICRON_SUSPECT_AFTER_S=outage["suspect_after_s"], UNICRON_LOST_AFTER_S=outage["lost_after_s"]
    )
    nodes = [loop.add_node(2).name, loop.add_node(2).name]
    loop.wait_nodes_healthy(2)
    task = loop.submit("a", min_workers=1, max_workers=4, total_iterations=100000)
    loop.wait_running(task)
    loop.wait("progress", lambda: (task.refresh_from_db(), task.iteration > 3)[1])
    task.refresh_from_db()
    epoch = task.epoch
    loop.inject(task, "crash", rank=0)

    inflight = _first_step_sent(task, epoch)
    loop.kill_asgi()
    killed_at = timezone.now()
    inflight.refresh_from_db()
    commands_at_kill = {
        str(c.command_id): (c.state, c.attempts) for c in AgentCommand.objects.filter(transition=inflight)
    }
    reported_at_kill = _resume_reported(inflight)
    print(
        f"\nat the kill: transition {inflight.pk} {inflight.kind} {inflight.state}; "
        f"commands {sorted(commands_at_kill.values())}; resume reported by ranks {sorted(reported_at_kill)}"
    )
    assert inflight.state == "running", f"the transition was not in flight: {inflight.state}"

    time.sleep(outage["outage_s"])
    inflight.refresh_from_db()
    if outage is SHORT:
        assert inflight.state == "running", "the transition moved on without an agent link"
    assert_allocations_consistent()
    log_offset = loop.asgi.log_path.stat().st_size
    startup_s = loop.start_asgi()
    restarted_at = timezone.now()

    # the agents come back on their own (backoff) and say hello to the new server
    loop.wait(
        "both agents heard by the new server",
        lambda: Node.objects.filter(name__in=nodes, last_heartbeat_at__gt=restarted_at).count() == 2,
        timeout=30,
    )
    reconnected_at = timezone.now()
    done = loop.wait(
        "the in-flight transition completed or rolled back",
        lambda: Transition.objects.filter(pk=inflight.pk).exclude(state__in=["pending", "running"]).first(),
        timeout=60,
    )
    final = loop.wait(
        "the task running again at a newer epoch",
        lambda: (task.refresh_from_db(), task.state == "running")[1]
        and Transition.objects.filter(
            task=task, epoch=task.epoch, epoch__gt=epoch, state="completed"
        ).first(),
        timeout=90,
    )
    # Nodes come back one by one after the long outage, so the task may grow again in a later
    # transition: progress is asked of whichever epoch the task runs by then, not of the first one.
    resumed_at = task.iteration
    loop.wait(
        "progress at a newer epoch",
        lambda: (task.refresh_from_db(), task.state == "running" and task.iteration > resumed_at + 3)[1]
        and task.epoch >= final.epoch,
        timeout=30,
    )
    loop.wait(
        "no transition left open",
        lambda: not Transition.objects.filter(state__in=["pending", "running"]).exists(),
        timeout=30,
    )
    task.refresh_from_db()
    assert task.state == "running"
    settled = Transition.objects.filter(task=task, epoch=task.epoch, state="completed").first()
    assert settled is not None, (task.epoch, loop.diagnose())
    assert settled.epoch > epoch
    assert_allocations_consistent()
    for t in Transition.objects.all():  # terminal rows with terminal steps: nothing left half-done
        assert t.state in ("completed", "rolled_back", "failed"), (t.pk, t.state)
        assert all(s.state in ("done", "skipped", "failed") for s in t.steps.all()), (t.pk, loop.diagnose())
        open_commands = AgentCommand.objects.filter(transition=t, state__in=["pending", "sent"])
        assert not open_commands.exists(), (t.pk, list(open_commands.values_list("type", "state")))

    lost = FailureEvent.objects.filter(detector="node_health")
    if outage is LONG:
        assert sorted(lost.values_list("node__name", flat=True)) == sorted(nodes)  # once per node
        assert done.state == "rolled_back", done.error
    else:
        assert not lost.exists(), loop.diagnose()
        assert done.state == "completed", loop.diagnose()
        # the outbox: the commands not acknowledged at the kill were (re-)sent to the reconnected agents
        # and acknowledged on the new server ...
        for c in AgentCommand.objects.filter(transition=inflight):
            state, attempts = commands_at_kill.get(str(c.command_id), ("pending", 0))
            assert c.state == "acked", (c.command_id, state, c.state, c.error)
            if state != "acked":
                assert c.acked_at is not None
                assert c.acked_at > restarted_at, (c.command_id, c.acked_at)
                assert c.attempts > attempts, (c.command_id, state, attempts, c.attempts)
        # ... and the resume reports the old server never stored reached the new one (buffered or re-sent)
        after = _resume_reported(done)
        missing_at_kill = set(after) - set(reported_at_kill)
        assert missing_at_kill, "every rank had reported before the kill: nothing was left to re-send"
        assert all(datetime.fromisoformat(after[r]) > restarted_at for r in missing_at_kill), after
    # failure events: the crash is one event (its report may have been re-sent: idempotent by report_id)
    crash = FailureEvent.objects.filter(task=task, task_epoch=epoch, detector="process_supervision")
    assert crash.count() == 1, loop.diagnose()
    evidence = list(
        FailureEvent.objects.values_list("detector", "kind", "node__name", "device__index", "task_epoch")
    )
    assert len(evidence) == len(set(evidence)), evidence
    unresolved = FailureEvent.objects.filter(resolved_at__isnull=True)
    assert not unresolved.exists(), loop.diagnose()  # every failure handled and over: none left open

    new_log = loop.asgi.log_path.read_bytes()[log_offset:].decode(errors="replace")
    link_downs = {
        n: _link_down_times((loop.run_dir / n / "agent.log").read_text(errors="replace"), killed_at)
        for n in nodes
    }
    assert all(link_downs.values()), f"an agent never saw its link drop: {link_downs}"
    gaps = {n: [round(b - a, 2) for a, b in itertools.pairwise(times)] for n, times in link_downs.items()}
    print(
        f"FIGURE asgi_killed {outage}: startup_s={startup_s:.2f} "
        f"agents_back_s={(reconnected_at - killed_at).total_seconds():.2f} "
        f"in_flight={done.kind}/{done.state} final_epoch={settled.epoch} (from {epoch}) "
        f"running_again_after_s={((final.finished_at or timezone.now()) - killed_at).total_seconds():.2f} "
        f"node_lost_events={lost.count()} "
        f"duplicate_reports_on_new_server={new_log.count('duplicate report')} "
        f"failed_link_attempt_gaps_s={gaps}"
    )
    for t in Transition.objects.filter(epoch__gt=epoch).order_by("epoch"):
        print(f"  transition e{t.epoch} {t.kind} {t.state} {t.error}")

"""Celery tasks of the incidents app (ids only):

- ``fleet.check_node_health`` (beat, every second, and once more at a silent node's deadline when it
  falls between two ticks): the node health watchdog (:mod:`controlplane.apps.incidents.node_health`);
- ``incidents.release_isolations`` (beat): isolated devices and nodes back to service (on probation, or
  without it where a fault drill caused the isolation);
- ``incidents.reclaim_failure_handling`` (beat, every second): handling whose worker died is re-enqueued.

``incidents.handle_failure`` itself runs the failure handler, which acts through the workload manager: it is
a task of the planning app (:mod:`controlplane.apps.planning.tasks`).
"""

from __future__ import annotations

import time

from celery import shared_task

from controlplane.apps.incidents.claims import do_reclaim_abandoned_handling
from controlplane.apps.incidents.node_health import (
    LINK_BACKLOG_CHECK_EVERY_S,
    check_link_backlog,
    sweep_node_health,
)
from controlplane.apps.incidents.probation import do_release_isolations

SWEEP_PERIOD_S = 1.0
"""The beat schedule's period of ``fleet.check_node_health`` (fleet's migration 0003)."""
DEADLINE_MARGIN_S = 0.02
"""A sweep at a deadline runs this long after it (a deadline is passed, not met, by a silence)."""


@shared_task(name="incidents.release_isolations", ignore_result=True)  # type: ignore[misc]
def release_isolations_task() -> str:
    return do_release_isolations().describe()


@shared_task(name="incidents.reclaim_failure_handling", ignore_result=True)  # type: ignore[misc]
def reclaim_failure_handling_task() -> str:
    return f"re-enqueued abandoned handling of failure events {do_reclaim_abandoned_handling()}"


@shared_task(name="fleet.check_node_health", ignore_result=True)  # type: ignore[misc]
def check_node_health(at_deadline: bool = False) -> dict[str, object]:
    """One sweep (beat, every second). A silent node whose deadline falls before the next tick is swept
    again at that moment (``at_deadline``): a node is declared lost when its deadline passes, not up to a
    beat period later. A sweep at a deadline schedules no further one (the ticks go on meanwhile)."""
    sweep = sweep_node_health()
    if not at_deadline and int(time.time()) % LINK_BACKLOG_CHECK_EVERY_S == 0:
        check_link_backlog()
    follow_up = None
    if sweep.next_deadline_s is not None and not at_deadline:
        wait_s = sweep.next_deadline_s - time.time() + DEADLINE_MARGIN_S
        if 0 < wait_s < SWEEP_PERIOD_S:
            check_node_health.apply_async(kwargs={"at_deadline": True}, countdown=wait_s, expires=wait_s + 2)
            follow_up = round(wait_s, 3)
    return {
        "checked": sweep.checked,
        "suspect": sweep.suspect,
        "lost": sweep.lost,
        "held": sweep.held,
        "again_in_s": follow_up,
    }

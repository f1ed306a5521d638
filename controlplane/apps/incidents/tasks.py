"""Celery tasks of the incidents app (ids only):

- ``fleet.check_node_health`` (beat, every second): the node health watchdog
  (:mod:`controlplane.apps.incidents.node_health`);
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


@shared_task(name="incidents.release_isolations", ignore_result=True)  # type: ignore[misc]
def release_isolations_task() -> str:
    return do_release_isolations().describe()


@shared_task(name="incidents.reclaim_failure_handling", ignore_result=True)  # type: ignore[misc]
def reclaim_failure_handling_task() -> str:
    return f"re-enqueued abandoned handling of failure events {do_reclaim_abandoned_handling()}"


@shared_task(name="fleet.check_node_health", ignore_result=True)  # type: ignore[misc]
def check_node_health() -> dict[str, object]:
    sweep = sweep_node_health()
    if int(time.time()) % LINK_BACKLOG_CHECK_EVERY_S == 0:
        check_link_backlog()
    return {"checked": sweep.checked, "suspect": sweep.suspect, "lost": sweep.lost, "held": sweep.held}

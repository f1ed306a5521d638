"""Celery tasks of alert notifications (ids only):

- ``notifications.deliver_alert``: one attempt of a delivery (``services.do_deliver_alert``); a transient
  failure re-runs the task through Celery's retry with the backoff the service computed (the row counts
  the attempts and decides when to give up, so Celery's own retry limit is off);
- ``notifications.sweep_deliveries``: beat, every 30 s (migration 0002): stale claims and lost messages.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from controlplane.apps.notifications.services import do_deliver_alert, do_sweep_deliveries


@shared_task(name="notifications.deliver_alert", bind=True, ignore_result=True, max_retries=None)  # type: ignore[misc]
def deliver_alert(self: Any, delivery_id: int) -> str:
    outcome = do_deliver_alert(delivery_id)
    if outcome.retry_in_s is not None:
        raise self.retry(countdown=outcome.retry_in_s)
    return f"{outcome.status}: {outcome.detail}"


@shared_task(name="notifications.sweep_deliveries", ignore_result=True)  # type: ignore[misc]
def sweep_deliveries() -> dict[str, int]:
    result = do_sweep_deliveries()
    return {"released": result.released, "enqueued": result.enqueued}

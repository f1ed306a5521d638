from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from controlplane.apps.notifications.models import AlertDelivery
from controlplane.apps.notifications.services import do_sweep_deliveries
from tests.notifications.conftest import raise_alert, webhook_route


def test_an_old_claim_goes_back_to_pending_and_an_overdue_delivery_is_enqueued_again(db: None) -> None:
    webhook_route("pager", "http://127.0.0.1:9/hook")
    webhook_route("chat", "http://127.0.0.1:9/chat")
    alert = raise_alert()
    stuck, lost = AlertDelivery.objects.filter(alert=alert).order_by("route_name").reverse()
    long_ago = timezone.now() - timedelta(minutes=10)
    AlertDelivery.objects.filter(pk=stuck.pk).update(state="sending", attempts=1, claimed_at=long_ago)
    AlertDelivery.objects.filter(pk=lost.pk).update(next_attempt_at=long_ago)
    fresh_claim = timezone.now()

    result = do_sweep_deliveries()

    stuck.refresh_from_db()
    assert (stuck.state, stuck.attempts, stuck.claimed_at) == ("pending", 1, None)
    assert "stopped before it finished" in stuck.last_error
    assert result.released == 1
    assert result.enqueued == 1  # the lost one; the released one is due now, not overdue
    # a recent claim is left alone
    AlertDelivery.objects.filter(pk=stuck.pk).update(state="sending", attempts=2, claimed_at=fresh_claim)
    assert do_sweep_deliveries().released == 0
    assert AlertDelivery.objects.get(pk=stuck.pk).state == "sending"

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable

from controlplane.apps.notifications.models import AlertDelivery
from controlplane.apps.notifications.services import do_deliver_alert
from controlplane.apps.notifications.signing import verify
from tests.notifications.conftest import SECRET, raise_alert, webhook_route
from tests.notifications.receivers import HttpReceiver


def test_the_signature_header_is_the_hmac_sha256_of_the_body_under_the_secret(
    db: None, make_receiver: Callable[..., HttpReceiver]
) -> None:
    receiver = make_receiver()
    webhook_route("pager", receiver.url)
    alert = raise_alert(message="node n7 lost")
    delivery = AlertDelivery.objects.get(alert=alert)

    outcome = do_deliver_alert(delivery.pk)

    assert outcome.status == "sent"
    [request] = receiver.received()
    header = request.headers["X-Unicron-Signature"]
    expected = "sha256=" + hmac.new(SECRET.encode(), request.body, hashlib.sha256).hexdigest()
    assert header == expected
    assert verify(request.body, SECRET, header)
    assert not verify(request.body, "another-secret-0123456789", header)
    assert not verify(request.body.replace(b"n7", b"n8"), SECRET, header)
    body = json.loads(request.body)
    assert str(body["timestamp"]) == request.headers["X-Unicron-Timestamp"]
    assert abs(body["timestamp"] - time.time()) < 120
    assert request.headers["X-Unicron-Event"] == "alert.fired"
    assert request.headers["X-Unicron-Delivery"] == str(delivery.pk)
    assert body["type"] == "alert.fired"
    assert body["route"] == "pager"
    assert body["alert"]["id"] == alert.pk
    assert (body["alert"]["severity"], body["alert"]["kind"], body["alert"]["message"]) == (
        "sev1",
        "node_lost",
        "node n7 lost",
    )
    assert body["alert"]["node_name"] == alert.node.name

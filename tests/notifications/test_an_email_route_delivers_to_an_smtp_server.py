from __future__ import annotations

from email import message_from_bytes, policy

import pytest

from controlplane.apps.notifications.models import AlertDelivery, AlertRoute
from controlplane.apps.notifications.services import do_deliver_alert
from tests.notifications.conftest import Worker, raise_alert
from tests.notifications.receivers import SmtpSink, free_port, wait_for


def test_an_apprise_mailto_route_sends_the_alert_by_plain_smtp(
    transactional_db: None, celery_worker: Worker, smtp_sink: SmtpSink
) -> None:
    # mailto:// (not mailtos://) speaks plain SMTP; the host:port is the server, from= and to= the envelope
    AlertRoute.objects.create(
        name="on-call e-mail",
        destination="apprise",
        url=f"mailto://127.0.0.1:{smtp_sink.port}?from=unicron@example.org&to=oncall@example.org",
    )

    alert = raise_alert(message="node n5 lost: no heartbeat for 3 s")

    [mail] = wait_for("an e-mail in the SMTP sink", lambda: smtp_sink.messages, 90)
    assert mail.mail_from == "unicron@example.org"
    assert mail.rcpt_tos == ["oncall@example.org"]
    message = message_from_bytes(mail.content, policy=policy.default)
    assert message["Subject"] == "[sev1] FIRING: node n5 lost: no heartbeat for 3 s"
    text = message.get_body(preferencelist=("plain",))
    assert text is not None
    assert "node n5 lost: no heartbeat for 3 s" in text.get_content()
    assert f"alert #{alert.pk}" in text.get_content()
    wait_for(
        "the delivery to be recorded as sent", lambda: AlertDelivery.objects.filter(state="sent").exists()
    )


def test_an_unreachable_smtp_server_is_retried_and_named_in_the_reason(
    db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("UNICRON_ALERT_MAX_ATTEMPTS", "2")
    monkeypatch.setenv("UNICRON_ALERT_RETRY_BASE_S", "0")
    AlertRoute.objects.create(
        name="on-call e-mail",
        destination="apprise",
        url=f"mailto://127.0.0.1:{free_port()}?from=unicron@example.org&to=oncall@example.org",
    )
    delivery = AlertDelivery.objects.get(alert=raise_alert())

    first = do_deliver_alert(delivery.pk)
    last = do_deliver_alert(delivery.pk)

    assert first.status == "retry"
    assert first.detail == 'Connection error while submitting email to "127.0.0.1"'
    assert (last.status, last.detail) == ("failed", f"gave up after 2 attempts; last: {first.detail}")

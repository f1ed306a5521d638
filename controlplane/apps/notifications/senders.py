"""Send one notification to one destination and say what happened (no database access here)."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from controlplane.apps.notifications.payload import AlertNotification
from controlplane.apps.notifications.rules import Verdict, http_verdict
from controlplane.apps.notifications.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign,
)

USER_AGENT = "unicron-alerts/1"
MAX_REASON = 300


@dataclass(frozen=True)
class SendResult:
    verdict: Verdict
    status_code: int | None = None
    error: str = ""


def send_webhook(url: str, secret: str, note: AlertNotification, timeout_s: float) -> SendResult:
    body = note.model_dump_json().encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        SIGNATURE_HEADER: sign(body, secret),
        TIMESTAMP_HEADER: str(note.timestamp),
        DELIVERY_HEADER: str(note.delivery),
        EVENT_HEADER: note.type,
    }
    try:
        response = httpx.post(url, content=body, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:  # connection refused, DNS, timeout, protocol error: try again later
        return SendResult(Verdict.RETRY, None, f"{type(exc).__name__}: {exc}"[:MAX_REASON] or "HTTP error")
    verdict = http_verdict(response.status_code)
    if verdict is Verdict.SENT:
        return SendResult(verdict, response.status_code)
    reason = f"HTTP {response.status_code} {response.reason_phrase}"
    text = response.text.strip()
    if text:
        reason += f": {text}"
    return SendResult(verdict, response.status_code, reason[:MAX_REASON])


def send_apprise(url: str, note: AlertNotification) -> SendResult:
    """Apprise says only sent or not: a failure is taken as transient (retried up to the attempt limit),
    with the reason Apprise logged."""
    import apprise

    service = apprise.Apprise.instantiate(url, suppress_exceptions=True)
    if service is None:
        return SendResult(Verdict.PERMANENT, None, "Apprise does not understand the route's URL")
    notify_type = apprise.NotifyType.FAILURE if note.type == "alert.fired" else apprise.NotifyType.SUCCESS
    with apprise.LogCapture(level=apprise.logging.WARNING, fmt="%(message)s") as logs:  # type: ignore[no-untyped-call]
        ok = bool(service.notify(body=note.text, title=note.title, notify_type=notify_type))
        captured = logs.getvalue()
    if ok:
        return SendResult(Verdict.SENT)
    lines = [line.strip() for line in captured.splitlines() if line.strip()]
    reason = " | ".join(lines[-3:]) or "Apprise could not deliver the notification"
    return SendResult(Verdict.RETRY, None, reason[:MAX_REASON])

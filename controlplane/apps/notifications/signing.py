"""Webhook signatures: ``X-Unicron-Signature: sha256=<hex HMAC-SHA256 of the raw body, keyed with the
route's secret>``. Receivers recompute it over the bytes they received and compare in constant time;
the body's ``timestamp`` (also sent as ``X-Unicron-Timestamp``) lets them refuse replays."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Unicron-Signature"
TIMESTAMP_HEADER = "X-Unicron-Timestamp"
DELIVERY_HEADER = "X-Unicron-Delivery"
EVENT_HEADER = "X-Unicron-Event"
PREFIX = "sha256="


def sign(body: bytes, secret: str) -> str:
    return PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, header: str) -> bool:
    """True when ``header`` is the signature of ``body`` under ``secret``."""
    return hmac.compare_digest(sign(body, secret), header.strip())

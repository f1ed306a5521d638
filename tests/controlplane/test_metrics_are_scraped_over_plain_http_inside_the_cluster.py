"""With the HTTPS redirect on (the default without DEBUG), GET /metrics is still answered over plain
HTTP, like /healthz: Prometheus scrapes the web service inside the cluster, and a redirect would not
protect its bearer token (sent with the first request). Other paths are still redirected."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings


def test_metrics_are_not_redirected_to_https(db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNICRON_METRICS_TOKEN", "in-cluster-token")
    with override_settings(SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=["web"]):
        client = Client(HTTP_HOST="web")
        metrics = client.get("/metrics", HTTP_AUTHORIZATION="Bearer in-cluster-token")
        refused = client.get("/metrics")
        api = client.get("/api/v1/")

    assert metrics.status_code == 200
    assert b"unicron_tasks" in metrics.content
    assert refused.status_code == 401
    assert api.status_code == 301
    assert api["Location"].startswith("https://web/")

from __future__ import annotations

import pytest

from controlplane.apps.notifications.conf import delivery_settings
from controlplane.config.env import ConfigError


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("MAX_ATTEMPTS", "RETRY_BASE_S", "RETRY_MAX_S", "HTTP_TIMEOUT_S"):
        monkeypatch.delenv(f"UNICRON_ALERT_{name}", raising=False)

    s = delivery_settings()

    assert (s.max_attempts, s.retry_base_s, s.retry_max_s, s.http_timeout_s) == (8, 5.0, 600.0, 10.0)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"UNICRON_ALERT_MAX_ATTEMPTS": "many"}, "UNICRON_ALERT_MAX_ATTEMPTS='many' is not an integer"),
        ({"UNICRON_ALERT_MAX_ATTEMPTS": "0"}, "UNICRON_ALERT_MAX_ATTEMPTS=0 must be at least 1"),
        ({"UNICRON_ALERT_HTTP_TIMEOUT_S": "0"}, "UNICRON_ALERT_HTTP_TIMEOUT_S=0.0 must be at least 0.1"),
        (
            {"UNICRON_ALERT_RETRY_BASE_S": "10", "UNICRON_ALERT_RETRY_MAX_S": "5"},
            "UNICRON_ALERT_RETRY_MAX_S=5.0",
        ),
    ],
)
def test_a_bad_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace(".", r"\.")):
        delivery_settings()

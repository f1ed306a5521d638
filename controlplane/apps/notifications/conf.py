"""Delivery settings from the environment (read when used, checked once at start-up by the app config)."""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.config.env import ConfigError, env_float, env_int


@dataclass(frozen=True)
class DeliverySettings:
    max_attempts: int
    retry_base_s: float
    retry_max_s: float
    http_timeout_s: float

    @property
    def claim_lease_s(self) -> float:
        """A claim older than this belongs to a worker that stopped mid-attempt: the sweep releases it."""
        return max(60.0, 3.0 * self.http_timeout_s)


def delivery_settings() -> DeliverySettings:
    s = DeliverySettings(
        max_attempts=env_int("UNICRON_ALERT_MAX_ATTEMPTS", 8, minimum=1),
        retry_base_s=env_float("UNICRON_ALERT_RETRY_BASE_S", 5.0, minimum=0.0),
        retry_max_s=env_float("UNICRON_ALERT_RETRY_MAX_S", 600.0, minimum=0.0),
        http_timeout_s=env_float("UNICRON_ALERT_HTTP_TIMEOUT_S", 10.0, minimum=0.1),
    )
    if s.retry_max_s < s.retry_base_s:
        raise ConfigError(
            f"UNICRON_ALERT_RETRY_MAX_S={s.retry_max_s} must be at least "
            f"UNICRON_ALERT_RETRY_BASE_S={s.retry_base_s}"
        )
    return s

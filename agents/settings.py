"""The node agent's settings: every variable it reads from its environment, through the typed helpers
of :mod:`controlplane.core.env` (a bad value is a ``ConfigError``, also a ``ValueError``, naming its
variable; ``NAME_FILE`` holds a secret's value).

:class:`AgentSettings` is read once when the agent starts (``python -m agents`` refuses a bad value
before anything starts). Workers and warm spares inherit the agent's environment and read the few
variables that concern them (:func:`cpu_bind_mode`, :func:`worker_nice`) through the same helpers; the
per-rank variables the agent sets for a worker are listed in :mod:`agents.training.worker`.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.core.env import env_bool, env_choice, env_int, env_str

ENV_AGENT_TOKEN = "UNICRON_AGENT_TOKEN"
"""The node's agent token (``UNICRON_AGENT_TOKEN_FILE``: a file holding it); ``--token`` overrides."""
ENV_STRAGGLER_RATIO = "UNICRON_STRAGGLER_RATIO"
"""Default of ``--straggler-ratio``."""
ENV_SPARES = "UNICRON_SPARES"
"""Warm spare worker processes per agent (default 1; 0: none)."""
ENV_SPARE_ZYGOTE = "UNICRON_SPARE_ZYGOTE"
"""Fork spares from a zygote that imported torch/Megatron once (default on; off: each spare imports)."""
ENV_SNAPSHOT_MAX_BYTES = "UNICRON_SNAPSHOT_MAX_BYTES"
"""Largest snapshot (all files of one origin) an agent accepts; unset or 0: no cap beyond free space."""
ENV_METRICS_PORT = "UNICRON_AGENT_METRICS_PORT"
"""TCP port of the agent's metrics endpoint (default unset: off; 0: off)."""
ENV_METRICS_ADDR = "UNICRON_AGENT_METRICS_ADDR"
"""Address the metrics endpoint binds (default 127.0.0.1; 0.0.0.0 to let a remote Prometheus scrape)."""
DEFAULT_METRICS_ADDR = "127.0.0.1"
ENV_CPU_BIND = "UNICRON_CPU_BIND"
"""``task``: bind each worker to one core chosen by its task (emulated nodes on one host); ``none``."""
CPU_BIND_MODES = ("none", "task")
ENV_WORKER_NICE = "UNICRON_WORKER_NICE"
"""The nice value (0-19, default 0) the agent starts workers and warm spares with."""


@dataclass(frozen=True)
class MetricsEndpoint:
    host: str
    port: int


def agent_token() -> str | None:
    return env_str(ENV_AGENT_TOKEN)


def spare_count() -> int:
    return env_int(ENV_SPARES, 1, minimum=0)


def spare_zygote() -> bool:
    return env_bool(ENV_SPARE_ZYGOTE, True)


def snapshot_max_bytes() -> int | None:
    """``UNICRON_SNAPSHOT_MAX_BYTES`` in bytes; None: no cap (unset or 0)."""
    return env_int(ENV_SNAPSHOT_MAX_BYTES, 0, minimum=0) or None


def metrics_endpoint() -> MetricsEndpoint | None:
    """Where the agent serves its Prometheus metrics; None: off (port unset or 0)."""
    port = env_int(ENV_METRICS_PORT, 0, minimum=0, maximum=65535)
    if port == 0:
        return None
    return MetricsEndpoint((env_str(ENV_METRICS_ADDR) or DEFAULT_METRICS_ADDR).strip(), port)


def cpu_bind_mode() -> str:
    return env_choice(ENV_CPU_BIND, CPU_BIND_MODES, "none")


def worker_nice() -> int:
    """On a host where the control plane, the agents and the workers share the cores, a positive value
    keeps heartbeats and transitions flowing while the workers saturate the CPU; a spare that becomes
    a rank is never niced differently from its peers."""
    return env_int(ENV_WORKER_NICE, 0, minimum=0, maximum=19)


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent reads from its environment, read (and checked) at once."""

    token: str | None
    spares: int
    spare_zygote: bool
    snapshot_max_bytes: int | None
    metrics: MetricsEndpoint | None
    cpu_bind: str
    worker_nice: int

    @classmethod
    def from_env(cls) -> AgentSettings:
        return cls(
            token=agent_token(),
            spares=spare_count(),
            spare_zygote=spare_zygote(),
            snapshot_max_bytes=snapshot_max_bytes(),
            metrics=metrics_endpoint(),
            cpu_bind=cpu_bind_mode(),
            worker_nice=worker_nice(),
        )

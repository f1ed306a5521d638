"""A rendezvous port range that overlaps this host's ephemeral ports (``ip_local_port_range``, from which
every outgoing connection and gloo pair takes its port) is refused at start, naming both ranges."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _load_settings(base: int, span: int) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ,
        UNICRON_RENDEZVOUS_PORT_BASE=str(base),
        UNICRON_RENDEZVOUS_PORT_SPAN=str(span),
        DJANGO_SETTINGS_MODULE="controlplane.config.settings",
    )
    return subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_range_reaching_into_the_ephemeral_ports_is_refused() -> None:
    low, high = (int(x) for x in EPHEMERAL.read_text().split())
    base = max(1024, low - 100)  # ends 100 ports into the ephemeral range
    result = _load_settings(base, low + 100 - base)
    assert result.returncode != 0
    assert (
        f"rendezvous ports {base}-{low + 99} overlap this host's ephemeral ports {low}-{high}"
        in result.stderr
    ), result.stderr[-2000:]


def test_a_range_just_below_the_ephemeral_ports_is_accepted() -> None:
    low, _ = (int(x) for x in EPHEMERAL.read_text().split())
    base = max(1024, low - 1000)
    result = _load_settings(base, low - base)
    assert result.returncode == 0, result.stderr[-2000:]

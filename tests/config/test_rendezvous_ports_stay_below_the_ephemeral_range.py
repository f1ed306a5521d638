"""Rendezvous ports are drawn from a range that the kernel never hands out as an ephemeral port (every gloo
pair and client socket takes one of those), and a range that runs past port 65535 is refused by name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_range_is_below_the_ephemeral_ports() -> None:
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    first = settings.UNICRON_RENDEZVOUS_PORT_BASE
    last = first + settings.UNICRON_RENDEZVOUS_PORT_SPAN - 1
    assert last < low or first > high, (first, last, low, high)


def test_a_range_past_the_last_port_is_refused() -> None:
    env = dict(
        os.environ,
        UNICRON_RENDEZVOUS_PORT_BASE="60000",
        UNICRON_RENDEZVOUS_PORT_SPAN="10000",
        DJANGO_SETTINGS_MODULE="controlplane.config.settings",
    )
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert (
        "UNICRON_RENDEZVOUS_PORT_BASE + UNICRON_RENDEZVOUS_PORT_SPAN = 70000 runs past port 65535"
        in result.stderr
    )

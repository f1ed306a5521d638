"""Every database's rendezvous port sequence starts at 1: control planes whose workers share hosts (concurrent
test runs, a staging and a production plane) start drawing at different places of the range, fixed by the
database's name, so they do not take the same ports in the same order."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from controlplane.apps.planning.launch import rendezvous_port_of


def _first_ports(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    monkeypatch.setitem(connection.settings_dict, "NAME", name)
    return [rendezvous_port_of(n) for n in range(1, 6)]


def test_two_databases_start_at_different_ports_each_in_range_and_in_sequence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, span = settings.UNICRON_RENDEZVOUS_PORT_BASE, settings.UNICRON_RENDEZVOUS_PORT_SPAN
    ci, bench = _first_ports(monkeypatch, "test_unicron"), _first_ports(monkeypatch, "test_benchquality")
    assert ci != bench
    assert _first_ports(monkeypatch, "test_unicron") == ci  # fixed by the name
    for ports in (ci, bench):
        assert all(base <= p < base + span for p in ports)
        assert len(set(ports)) == len(ports)  # consecutive values: distinct ports until the span wraps

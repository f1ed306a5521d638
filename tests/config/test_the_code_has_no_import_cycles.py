"""No module of ``controlplane`` or ``agents`` imports, directly or through others, a module that imports
it back, and no two Django apps (nor an app and the transport, ``controlplane.live``) import each other:
every import between them goes one way, down the layers the import-linter contract names
(docs/ARCHITECTURE.md §3) — counting every import, function-local ones included
(``tools/architecture.py``)."""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


@cache
def _architecture() -> Any:
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "tools" / "architecture.py")
    assert spec is not None
    assert spec.loader is not None
    architecture = importlib.util.module_from_spec(spec)
    sys.modules["architecture"] = architecture  # dataclasses resolve their module by name
    spec.loader.exec_module(architecture)
    return architecture


@cache
def _figures() -> Any:
    """One measurement of the import graph for both tests (it reads every module)."""
    return _architecture().measure()


def test_the_code_has_no_import_cycles() -> None:
    figures = _figures()
    assert figures.cycles == [], figures.cycles


def test_no_two_apps_import_each_other() -> None:
    figures = _figures()
    assert figures.app_pairs_both_ways == [], figures.app_pairs_both_ways


def test_a_traced_call_up_the_layers_is_told_from_one_down_them() -> None:
    """The crash trace's "against the layers" figure ranks components by the import-linter contract: a call
    from planning into metrics (an app above it) goes up, the reverse and calls into the core go down, and
    the configuration and the agents are outside the layering."""
    against = _architecture().calls_against_the_layers
    calls = [
        ["controlplane.apps.planning.measurements", "controlplane.apps.metrics.selectors", 1],
        ["controlplane.apps.metrics.selectors", "controlplane.apps.planning.models", 2],
        ["controlplane.apps.fleet.outbox", "controlplane.live.agent_link", 3],
        ["controlplane.live.agent_link", "controlplane.apps.incidents.reports", 4],
        ["controlplane.core.planning.planner", "controlplane.apps.training.models", 5],
        ["controlplane.apps.planning.replan", "controlplane.config.store_outage", 6],
        ["agents.supervisor", "controlplane.apps.fleet.models", 7],
    ]
    assert against(calls) == [
        ("controlplane.apps.planning.measurements", "controlplane.apps.metrics.selectors", 1),
        ("controlplane.apps.fleet.outbox", "controlplane.live.agent_link", 3),
        ("controlplane.core.planning.planner", "controlplane.apps.training.models", 5),
    ]

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
def _figures() -> Any:
    """One measurement of the import graph for both tests (it reads every module)."""
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "tools" / "architecture.py")
    assert spec is not None
    assert spec.loader is not None
    architecture = importlib.util.module_from_spec(spec)
    sys.modules["architecture"] = architecture  # dataclasses resolve their module by name
    spec.loader.exec_module(architecture)
    return architecture.measure()


def test_the_code_has_no_import_cycles() -> None:
    figures = _figures()
    assert figures.cycles == [], figures.cycles


def test_no_two_apps_import_each_other() -> None:
    figures = _figures()
    assert figures.app_pairs_both_ways == [], figures.app_pairs_both_ways

"""No module of ``controlplane`` or ``agents`` imports, directly or through others, a module that imports
it back — counting every import, function-local ones included (``tools/architecture.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_code_has_no_import_cycles() -> None:
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "tools" / "architecture.py")
    assert spec is not None
    assert spec.loader is not None
    architecture = importlib.util.module_from_spec(spec)
    sys.modules["architecture"] = architecture  # dataclasses resolve their module by name
    spec.loader.exec_module(architecture)
    figures = architecture.measure()
    assert figures.cycles == [], figures.cycles

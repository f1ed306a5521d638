"""An app's REST layer uses other apps through their selectors and services, never through their API
modules: the alert API renders an alert's deliveries itself, from the notifications selector."""

from __future__ import annotations

import ast
from pathlib import Path

APPS = Path(__file__).resolve().parents[2] / "controlplane" / "apps"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_app_api_module_imports_another_apps_api() -> None:
    wrong = []
    for path in sorted(APPS.glob("*/api/*.py")):
        app = path.parent.parent.name
        for module in _imports(path):
            parts = module.split(".")
            if (
                module.startswith("controlplane.apps.")
                and len(parts) > 3
                and parts[3] == "api"
                and parts[2] != app
            ):
                wrong.append(f"{path.relative_to(APPS)} imports {module}")
    assert wrong == []

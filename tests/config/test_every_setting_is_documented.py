"""Every environment variable the code reads (``UNICRON_*`` named in ``controlplane/`` or ``agents/``) is
listed in docs/CONFIGURATION.md, so an operator finds every setting in one table."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"""["'](UNICRON_[A-Z0-9_]+)["']""")


def variables_in_code() -> set[str]:
    found: set[str] = set()
    for package in ("controlplane", "agents"):
        for path in (ROOT / package).rglob("*.py"):
            found |= set(NAME.findall(path.read_text()))
    return found


def test_every_setting_is_documented() -> None:
    documented = set(re.findall(r"`(UNICRON_[A-Z0-9_]+)`", (ROOT / "docs" / "CONFIGURATION.md").read_text()))
    names = variables_in_code()
    assert len(names) > 40  # the scan works
    missing = sorted(names - documented)
    assert missing == [], f"not in docs/CONFIGURATION.md: {missing}"

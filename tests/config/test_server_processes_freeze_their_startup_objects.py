"""A daphne process and every Celery process that runs tasks freeze the objects they hold from their start
(``controlplane/config/heap.py``): a full garbage collection then no longer traverses them; and they collect
the young generation less often, so that a frame's short-lived objects do not pile up in the old one. Each
is checked in a fresh interpreter, as the server would start it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from controlplane.config.heap import YOUNG_COLLECTION_EVERY

ROOT = Path(__file__).resolve().parents[2]

ASGI = """
import gc
before = gc.get_freeze_count()
import controlplane.config.asgi
print(gc.get_threshold()[0], before, gc.get_freeze_count())
"""

CELERY = """
import gc
from celery.signals import worker_process_init
from controlplane.config.celery import app
app.loader.import_default_modules()
before = gc.get_freeze_count()
worker_process_init.send(sender=None)
print(gc.get_threshold()[0], before, gc.get_freeze_count())
"""


def _frozen(code: str) -> tuple[int, int, int]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.config.settings", "SECRET_KEY": "x" * 50}
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    young, before, after = out.stdout.split()[-3:]
    return int(young), int(before), int(after)


def test_the_asgi_application_freezes_its_startup_objects() -> None:
    young, before, after = _frozen(ASGI)
    assert before == 0
    assert after > 50_000, after
    assert young == YOUNG_COLLECTION_EVERY


def test_a_celery_pool_process_freezes_its_startup_objects() -> None:
    young, before, after = _frozen(CELERY)
    assert before == 0
    assert after > 50_000, after
    assert young == YOUNG_COLLECTION_EVERY

"""The Celery app. Imported by the worker/beat command line and by Django at start-up (config/__init__ stays
empty so pure code never pulls Celery in).

A worker or beat run with ``DATABASE_URL`` / ``REDIS_URL`` unset starts the embedded servers where they do
not run yet (on its own start signal: importing this module starts nothing)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import after_setup_logger, beat_init, worker_init, worker_process_init, worker_ready

from controlplane.config.embedded import start_servers
from controlplane.config.heap import prepare_server_heap
from controlplane.config.store_outage import log_store_outages_as_one_line

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")

app = Celery("unicron")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def _start_embedded_servers(**_: Any) -> None:
    start_servers()


worker_init.connect(_start_embedded_servers, weak=False)
beat_init.connect(_start_embedded_servers, weak=False)


def _prepare_heap(**_: Any) -> None:
    prepare_server_heap()


# the processes that run tasks: a prefork pool's children once forked, the main process once ready (its
# own pool's tasks in a solo or threads pool)
worker_process_init.connect(_prepare_heap, weak=False)
worker_ready.connect(_prepare_heap, weak=False)


def _store_outages_as_one_line(logger: Any = None, **_: Any) -> None:
    log_store_outages_as_one_line(logger)


# a worker or beat replaces the root logger's handlers with its own: they get the filter too
after_setup_logger.connect(_store_outages_as_one_line, weak=False)

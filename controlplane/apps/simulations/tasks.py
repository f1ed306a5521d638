"""Celery wrapper: ids only on the wire, the work is in the service."""

from __future__ import annotations

import contextlib

from celery import shared_task

from controlplane.apps.common.errors import StaleState
from controlplane.apps.simulations.services import RUN_SIMULATION, do_run_simulation


@shared_task(name=RUN_SIMULATION, ignore_result=True)  # type: ignore[misc]
def run_simulation(run_id: int) -> None:
    with contextlib.suppress(StaleState):  # another worker claimed it (a redelivered message)
        do_run_simulation(run_id)

"""Two transactions allocating the same device at the same time: exactly one wins, and it is the
database (a partial unique index on active allocations) that decides, not application code."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from django.db import IntegrityError, connection, transaction

from controlplane.apps.common.errors import AllocationConflict
from controlplane.apps.training.models import Allocation
from controlplane.apps.training.services import Placement, do_allocate_devices
from tests.controlplane.factories import DeviceFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


def _run_in_threads(jobs: list[Callable[[], object]]) -> list[object]:
    """Run ``jobs`` concurrently, each on its own database connection; return results or exceptions."""
    start = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)

    def worker(i: int) -> None:
        try:
            start.wait()
            results[i] = jobs[i]()
        except Exception as exc:
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_the_database_refuses_a_second_active_allocation_of_a_device() -> None:
    device = DeviceFactory()
    first, second = TaskFactory(), TaskFactory()

    def hold_then_commit() -> object:
        with transaction.atomic():
            Allocation.objects.create(task=first, device=device, rank=0)
            time.sleep(0.5)  # the other transaction's INSERT waits on the unique index meanwhile
        return "committed"

    def insert_meanwhile() -> object:
        time.sleep(0.1)
        with transaction.atomic():
            Allocation.objects.create(task=second, device=device, rank=0)
        return "committed"

    results = _run_in_threads([hold_then_commit, insert_meanwhile])

    assert results[0] == "committed"
    assert isinstance(results[1], IntegrityError)
    assert "allocation_one_active_per_device" in str(results[1])
    assert list(Allocation.objects.filter(device=device, active=True).values_list("task_id", flat=True)) == [
        first.pk
    ]


@pytest.mark.parametrize("contenders", [2, 4])
def test_concurrent_allocations_of_one_device_have_exactly_one_winner(contenders: int) -> None:
    device = DeviceFactory()
    tasks = [TaskFactory() for _ in range(contenders)]
    jobs: list[Callable[[], object]] = [
        (lambda t=t: do_allocate_devices(t, [Placement(device_id=device.pk, rank=0)])) for t in tasks
    ]

    results = _run_in_threads(jobs)

    winners = [r for r in results if isinstance(r, list)]
    losers = [r for r in results if isinstance(r, AllocationConflict)]
    assert len(winners) == 1, results
    assert len(losers) == contenders - 1, results
    assert Allocation.objects.filter(device=device, active=True).count() == 1
    assert Allocation.objects.count() == 1  # the losers' transactions left nothing behind


def test_a_released_device_can_be_allocated_again() -> None:
    device = DeviceFactory()
    first, second = TaskFactory(), TaskFactory()
    do_allocate_devices(first, [Placement(device_id=device.pk, rank=0)])
    Allocation.objects.filter(task=first).update(active=False)

    do_allocate_devices(second, [Placement(device_id=device.pk, rank=0)])

    assert Allocation.objects.get(device=device, active=True).task_id == second.pk

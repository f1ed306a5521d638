"""Submitting a task: field errors shown at the field; the new task appears and is seen to start live."""

from __future__ import annotations

from typing import Any

from tests.browser.conftest import assert_not_reloaded, mark_page, services


def test_submit_shows_field_errors_then_task_starts_live(cluster: Any, new_page: Any, live_url: str) -> None:
    from controlplane.apps.fleet.models import Device
    from controlplane.apps.training.choices import TaskState
    from controlplane.apps.training.models import TrainingTask
    from controlplane.apps.training.services import Placement, do_allocate_devices, do_set_task_state

    page = new_page("operator")
    page.goto(f"{live_url}/tasks/")
    page.wait_for_selector("[data-testid=task-row]")
    mark_page(page)
    page.click("[data-testid=show-submit]")
    page.select_option("#preset", "gpt-350m")
    page.fill("input[name=name]", "browser-test-task")
    page.fill("input[name=min_workers]", "4")
    page.fill("input[name=max_workers]", "2")
    page.click("[data-testid=submit-task]")
    # the server's field error is shown next to the field, and nothing was created
    error = page.wait_for_selector("[data-field-error=max_workers]")
    assert "min_workers" in error.text_content()
    assert page.get_attribute("input[name=max_workers]", "aria-invalid") == "true"
    assert not TrainingTask.objects.filter(name="browser-test-task").exists()

    page.fill("input[name=max_workers]", "4")
    page.click("[data-testid=submit-task]")
    row = page.wait_for_selector("[data-testid=task-row]:has-text('browser-test-task')")
    assert "pending" in row.text_content()
    task = TrainingTask.objects.get(name="browser-test-task")
    assert task.owner is not None
    assert task.owner.get_username() == "operator"

    # the planner (here: the same services it uses) gives it the two free devices and starts it
    free = Device.objects.filter(allocations__isnull=True).order_by("node__name", "index")[:2]
    services(do_allocate_devices, task, [Placement(device_id=d.pk, rank=r) for r, d in enumerate(free)])
    services(do_set_task_state, task, TaskState.RUNNING)
    page.wait_for_selector(f"[data-task-row='{task.pk}'] [data-testid=task-state]:has-text('running')")
    assert page.text_content(f"[data-task-row='{task.pk}'] [data-testid=task-workers]").startswith("2")
    assert_not_reloaded(page)

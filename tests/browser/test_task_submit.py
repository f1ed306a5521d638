"""Submitting a task: field errors shown at the field; the new task appears, the workload manager
plans it in, and it is seen to start (state, devices in the grid) without a reload."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import assert_not_reloaded, mark_page, services


def test_submit_shows_field_errors_then_task_starts_live(cluster: Any, new_page: Any, live_url: str) -> None:
    from controlplane.apps.planning.tasks import replan_task
    from controlplane.apps.training.models import Allocation, TrainingTask

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
    page.fill("input[name=weight]", "50")  # worth more than any running task: the plan must make room
    page.click("[data-testid=submit-task]")
    row = page.wait_for_selector("[data-testid=task-row]:has-text('browser-test-task')")
    assert "pending" in row.text_content()
    task = TrainingTask.objects.get(name="browser-test-task")
    assert task.owner is not None
    assert task.owner.get_username() == "operator"

    # the workload manager (planning.replan, run here as the Celery worker would) plans it in: devices
    # are allocated, a launch transition starts and the task is running; both pages follow live
    overview = new_page("operator")
    overview.wait_for_selector("[data-testid=device-cell]")
    mark_page(overview)
    decision = services(replan_task, "task_submitted")
    task.refresh_from_db()
    assert task.state == "running", decision
    workers = Allocation.objects.filter(task=task, active=True).count()
    assert workers >= 4
    page.wait_for_selector(f"[data-task-row='{task.pk}'] [data-testid=task-state]:has-text('running')")
    assert page.text_content(f"[data-task-row='{task.pk}'] [data-testid=task-workers]").startswith(
        str(workers)
    )
    cells = f"[data-testid=device-cell][data-task='{task.pk}']"
    expect(overview.locator(cells)).to_have_count(workers)  # no JavaScript string: the CSP refuses eval
    assert_not_reloaded(page)
    assert_not_reloaded(overview)

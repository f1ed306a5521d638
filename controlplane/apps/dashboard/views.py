"""Page views: each renders a shell (layout, role, CSRF token); its JS module fetches /api/v1/ and
listens on ws/live/. Every page requires login; operator controls are rendered only for operators and
the API refuses them for anyone else (the page is never the only guard)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.contrib.auth.mixins import LoginRequiredMixin
from django.urls import reverse_lazy
from django.views.generic import TemplateView

from controlplane.apps.accounts.roles import Role, get_user_role, has_role


class DashboardPage(LoginRequiredMixin, TemplateView):
    """A logged-in page of the dashboard. ``page`` names the nav entry and the page's JS module."""

    login_url = reverse_lazy("dashboard:login")
    page: ClassVar[str] = ""
    title: ClassVar[str] = ""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        role = get_user_role(self.request.user)
        context.update(
            page=self.page,
            title=self.title,
            role=role.value if role is not None else "none",
            can_operate=has_role(self.request.user, Role.OPERATOR),
        )
        return context


class OverviewPage(DashboardPage):
    template_name = "dashboard/overview.html"
    page = "overview"
    title = "Cluster overview"


class TasksPage(DashboardPage):
    template_name = "dashboard/tasks.html"
    page = "tasks"
    title = "Training tasks"


class TaskDetailPage(DashboardPage):
    template_name = "dashboard/task_detail.html"
    page = "task_detail"
    title = "Task"

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["task_id"] = int(self.kwargs["pk"])
        return context


class HistoryPage(DashboardPage):
    template_name = "dashboard/history.html"
    page = "history"
    title = "Reconfiguration history"


class AlertsPage(DashboardPage):
    template_name = "dashboard/alerts.html"
    page = "alerts"
    title = "Alerts"


class NodesPage(DashboardPage):
    template_name = "dashboard/nodes.html"
    page = "nodes"
    title = "Nodes"

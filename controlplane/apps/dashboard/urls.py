"""Dashboard routes, mounted at the site root: ``path("", include("controlplane.apps.dashboard.urls"))``."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from controlplane.apps.dashboard import views

app_name = "dashboard"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="dashboard/login.html", redirect_authenticated_user=True, next_page="/"
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="/login/"), name="logout"),
    path("", views.OverviewPage.as_view(), name="overview"),
    path("tasks/", views.TasksPage.as_view(), name="tasks"),
    path("tasks/<int:pk>/", views.TaskDetailPage.as_view(), name="task-detail"),
    path("history/", views.HistoryPage.as_view(), name="history"),
    path("alerts/", views.AlertsPage.as_view(), name="alerts"),
    path("nodes/", views.NodesPage.as_view(), name="nodes"),
]

from __future__ import annotations

from django.urls import URLPattern, path
from rest_framework.routers import BaseRouter

from controlplane.apps.accounts.api.views import AuditEntryViewSet, MeView, MyTokenView

urlpatterns: list[URLPattern] = [
    path("me/", MeView.as_view(), name="me"),
    path("me/token/", MyTokenView.as_view(), name="me-token"),
]


def register(router: BaseRouter) -> None:
    router.register("audit", AuditEntryViewSet, basename="audit")

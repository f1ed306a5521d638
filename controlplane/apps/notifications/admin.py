"""Routes are edited here and audited like every admin edit, with the secret left out and the URL
(which may carry tokens or a password) reduced to its scheme and web host plus a digest."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.contrib import admin
from django.db.models.query import QuerySet
from django.forms import BaseModelForm
from django.http import HttpRequest

from controlplane.apps.accounts.audited_admin import AuditedModelAdmin, field_values
from controlplane.apps.accounts.services import do_record_audit
from controlplane.apps.notifications.models import AlertDelivery, AlertRoute, DeliveryAttempt
from controlplane.apps.notifications.rules import severities_matched


def redacted_url(url: str) -> str:
    """``https://host/…`` for a web URL, ``slack://…`` for other schemes (their host is often a token),
    with a digest so that a change still shows."""
    parts = urlsplit(url)
    shown = (
        f"{parts.scheme}://{parts.hostname}/…" if parts.scheme in ("http", "https") else f"{parts.scheme}://…"
    )
    return f"{shown} (sha256 {hashlib.sha256(url.encode()).hexdigest()[:12]})"


def route_audit_values(route: AlertRoute, names: Iterable[str] | None = None) -> dict[str, Any]:
    values = field_values(route, names)  # leaves out the secret
    if "url" in values:
        values["url"] = redacted_url(route.url)
    return values


class AlertRouteForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = AlertRoute
        fields = ["name", "enabled", "min_severity", "severities", "kinds", "destination", "url", "secret"]
        widgets = {"secret": forms.PasswordInput(render_value=True)}


@admin.register(AlertRoute)
class AlertRouteAdmin(AuditedModelAdmin):
    form = AlertRouteForm
    list_display = ["name", "enabled", "destination", "takes", "kinds_taken", "updated_at"]
    list_filter = ["enabled", "destination"]
    search_fields = ["name"]

    @admin.display(description="severities")
    def takes(self, route: AlertRoute) -> str:
        return ", ".join(severities_matched(route.min_severity, route.severities))

    @admin.display(description="kinds")
    def kinds_taken(self, route: AlertRoute) -> str:
        return ", ".join(route.kinds) or "any"

    def save_model(self, request: HttpRequest, obj: Any, form: BaseModelForm[Any], change: bool) -> None:
        changed = list(form.changed_data)
        stored = AlertRoute.objects.filter(pk=obj.pk).first() if change else None
        before = route_audit_values(stored, changed) if stored is not None else {}
        admin.ModelAdmin.save_model(self, request, obj, form, change)
        after = route_audit_values(obj, changed if change else None)
        do_record_audit(request.user, "admin_change" if change else "admin_add", obj, before, after)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        do_record_audit(request.user, "admin_delete", obj, route_audit_values(obj), {})
        admin.ModelAdmin.delete_model(self, request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            do_record_audit(request.user, "admin_delete", obj, route_audit_values(obj), {})
        admin.ModelAdmin.delete_queryset(self, request, queryset)


class DeliveryAttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    readonly_fields = ["number", "started_at", "finished_at", "outcome", "status_code", "error"]

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(AuditedModelAdmin):
    list_display = [
        "created_at",
        "alert",
        "route_name",
        "event",
        "state",
        "attempts",
        "last_error",
        "sent_at",
    ]
    list_filter = ["state", "event", "route_name"]
    search_fields = ["route_name", "alert__message", "last_error"]
    readonly_fields = [
        "alert",
        "route",
        "route_name",
        "event",
        "state",
        "attempts",
        "last_error",
        "created_at",
        "next_attempt_at",
        "claimed_at",
        "sent_at",
        "failed_at",
    ]
    inlines = [DeliveryAttemptInline]

    def has_add_permission(self, request: object) -> bool:
        return False

from __future__ import annotations

from django import forms
from django.contrib import admin

from controlplane.apps.notifications.models import AlertDelivery, AlertRoute, DeliveryAttempt
from controlplane.apps.notifications.rules import severities_matched


class AlertRouteForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = AlertRoute
        fields = ["name", "enabled", "min_severity", "severities", "kinds", "destination", "url", "secret"]
        widgets = {"secret": forms.PasswordInput(render_value=True)}


@admin.register(AlertRoute)
class AlertRouteAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
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


class DeliveryAttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    readonly_fields = ["number", "started_at", "finished_at", "outcome", "status_code", "error"]

    def has_add_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
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

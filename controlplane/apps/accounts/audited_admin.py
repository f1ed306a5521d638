"""Admin edits are audited like API actions: ``AuditedModelAdmin`` records one ``AuditEntry`` per add,
change and delete made in the admin (inline rows included), with the changed fields before and after.
Secrets (passwords, token hashes) are never copied into the trail."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models.query import QuerySet
from django.forms import BaseModelForm
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

from controlplane.apps.accounts.services import do_record_audit

SECRET_FIELD_MARKERS = ("password", "token", "secret", "key_hash")


def _is_secret(name: str) -> bool:
    return any(marker in name for marker in SECRET_FIELD_MARKERS)


def field_values(obj: models.Model, names: Iterable[str] | None = None) -> dict[str, Any]:
    """JSON-safe values of ``obj``'s concrete fields (or of ``names`` among them), secrets left out."""
    wanted = set(names) if names is not None else None
    values = {
        field.name: field.value_from_object(obj)
        for field in obj._meta.concrete_fields
        if (wanted is None or field.name in wanted) and not _is_secret(field.name)
    }
    loaded: dict[str, Any] = json.loads(json.dumps(values, cls=DjangoJSONEncoder, default=str))
    return loaded


class AuditedModelAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A ``ModelAdmin`` whose saves and deletes write audit rows in the same transaction."""

    def save_model(self, request: HttpRequest, obj: Any, form: BaseModelForm[Any], change: bool) -> None:
        changed = list(form.changed_data)
        many = [f.name for f in obj._meta.many_to_many if f.name in changed and not _is_secret(f.name)]
        before: dict[str, Any] = {}
        if change:
            stored = type(obj)._default_manager.filter(pk=obj.pk).first()
            if stored is not None:
                before = field_values(stored, changed)
                before.update({name: sorted(str(o) for o in getattr(stored, name).all()) for name in many})
        super().save_model(request, obj, form, change)
        after = field_values(obj, changed if change else None)
        after.update({name: sorted(str(o) for o in form.cleaned_data.get(name) or []) for name in many})
        do_record_audit(request.user, "admin_change" if change else "admin_add", obj, before, after)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        do_record_audit(request.user, "admin_delete", obj, field_values(obj), {})
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        for obj in queryset:
            do_record_audit(request.user, "admin_delete", obj, field_values(obj), {})
        super().delete_queryset(request, queryset)

    def save_formset(
        self,
        request: HttpRequest,
        form: BaseModelForm[Any],
        formset: BaseInlineFormSet[Any, Any, Any],
        change: bool,
    ) -> None:
        super().save_formset(request, form, formset, change)
        for obj in formset.new_objects:
            do_record_audit(request.user, "admin_add", obj, {}, field_values(obj))
        for obj, names in formset.changed_objects:
            do_record_audit(request.user, "admin_change", obj, {}, field_values(obj, names))
        for obj in formset.deleted_objects:
            do_record_audit(request.user, "admin_delete", obj, field_values(obj), {})

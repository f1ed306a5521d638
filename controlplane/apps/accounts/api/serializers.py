from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.apps.accounts.models import ApiToken, AuditEntry
from controlplane.apps.accounts.roles import Role


class MeSerializer(serializers.Serializer[Any]):
    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.choices, allow_null=True)


class AuditEntrySerializer(serializers.ModelSerializer[AuditEntry]):
    class Meta:
        model = AuditEntry
        fields = ["id", "at", "actor", "actor_label", "verb", "object_type", "object_id", "before", "after"]


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["prefix", "created_at", "expires_at", "last_used_at"]


class IssuedApiTokenSerializer(serializers.Serializer[Any]):
    token = serializers.CharField(
        help_text="The key for `Authorization: Token <key>`. Shown once; store it now."
    )
    prefix = serializers.CharField()
    expires_at = serializers.DateTimeField()

"""Serializer helpers shared by the apps' API packages."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class StrictInputSerializer(serializers.Serializer[Any]):
    """An input serializer that refuses fields it does not know (or cannot write) with a 400."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            writable = {name for name, f in self.fields.items() if not f.read_only}
            unknown = sorted(set(data) - writable)
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class CommentSerializer(StrictInputSerializer):
    comment = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class RequiredCommentSerializer(StrictInputSerializer):
    comment = serializers.CharField(required=True, allow_blank=False, max_length=2000)

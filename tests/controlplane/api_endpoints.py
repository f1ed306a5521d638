"""The API's endpoints, enumerated from the OpenAPI schema and cross-checked against the URLconf."""

from __future__ import annotations

import re

from django.urls import URLPattern, URLResolver, get_resolver
from drf_spectacular.generators import SchemaGenerator

API_PREFIX = "/api/v1/"
METHODS = ("get", "post", "put", "patch", "delete")


def schema_operations() -> dict[tuple[str, str], int]:
    """Every (METHOD, path template) the OpenAPI schema documents under /api/v1/, with the success
    status it documents (the lowest 2xx response)."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return {
        (method.upper(), path): min(int(code) for code in operation["responses"] if code.startswith("2"))
        for path, item in schema["paths"].items()
        if path.startswith(API_PREFIX)
        for method, operation in item.items()
        if method in METHODS
    }


def _walk(patterns: list[URLPattern | URLResolver], prefix: str) -> list[tuple[str, URLPattern]]:
    out: list[tuple[str, URLPattern]] = []
    for p in patterns:
        if isinstance(p, URLResolver):
            out.extend(_walk(p.url_patterns, prefix + str(p.pattern)))
        else:
            out.append((prefix + str(p.pattern), p))
    return out


def _template(route: str) -> str:
    route = route.replace("^", "").replace("$", "")
    route = re.sub(r"\(\?P<pk>[^)]*\)", "{id}", route)
    route = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", route)
    route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
    return "/" + route


def urlconf_paths() -> set[str]:
    """Every route under /api/v1/ in the URLconf (format-suffix variants and the browsable root left out)."""
    paths = set()
    for route, pattern in _walk(get_resolver().url_patterns, ""):
        template = _template(route)
        if not template.startswith(API_PREFIX) or "{format}" in template:
            continue
        if getattr(pattern.callback, "cls", None).__name__ == "APIRootView":  # type: ignore[union-attr]
            continue
        paths.add(template)
    return paths

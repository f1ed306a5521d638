"""With DEBUG off and no SECRET_KEY the ASGI server refuses to start, naming the variable (it used to
sign with a predictable key); the production defaults are HTTPS-only, and ``testserver`` is not an
allowed host."""

from __future__ import annotations

import json

from tests.security.production import production_env, run_python


def test_the_asgi_application_refuses_to_load_without_a_secret_key() -> None:
    result = run_python("import controlplane.config.asgi", production_env(SECRET_KEY=""))

    assert result.returncode != 0
    assert "SECRET_KEY must be set (or SECRET_KEY_FILE" in result.stderr
    assert "ConfigError" in result.stderr


def test_django_never_signs_with_a_fallback_key() -> None:
    code = "import django; django.setup(); from django.core import signing; signing.dumps('x')"
    result = run_python(code, production_env(SECRET_KEY=""))

    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


SHOWN = [
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "ALLOWED_HOSTS",
    "SECURE_PROXY_SSL_HEADER",
]
SHOW = (
    "import django, json; django.setup(); from django.conf import settings as s; "
    f"print(json.dumps({{n: getattr(s, n) for n in {SHOWN!r}}}))"
)


def test_without_debug_the_defaults_are_https_only() -> None:
    result = run_python(
        SHOW, production_env(ALLOWED_HOSTS="", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto=https")
    )

    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout.strip().splitlines()[-1])
    assert shown["SECURE_SSL_REDIRECT"] is True
    assert shown["SECURE_HSTS_SECONDS"] >= 31_536_000
    assert shown["SESSION_COOKIE_SECURE"] is shown["CSRF_COOKIE_SECURE"] is True
    assert "testserver" not in shown["ALLOWED_HOSTS"]
    assert shown["SECURE_PROXY_SSL_HEADER"] == ["HTTP_X_FORWARDED_PROTO", "https"]


def test_plain_http_is_an_explicit_switch() -> None:
    result = run_python(SHOW, production_env(UNICRON_INSECURE_HTTP="1"))

    shown = json.loads(result.stdout.strip().splitlines()[-1])
    assert (shown["SECURE_SSL_REDIRECT"], shown["SECURE_HSTS_SECONDS"], shown["SESSION_COOKIE_SECURE"]) == (
        False,
        0,
        False,
    )


def test_a_malformed_proxy_header_names_the_variable() -> None:
    result = run_python("import django; django.setup()", production_env(SECURE_PROXY_SSL_HEADER="https"))

    assert result.returncode != 0
    assert "SECURE_PROXY_SSL_HEADER='https' must look like X-Forwarded-Proto=https" in result.stderr

"""The test run's security settings: plain HTTP on localhost and a test-only SECRET_KEY.

pytest-django loads the settings before any conftest runs, so the variables are set twice: in
``os.environ`` (for every server, worker and agent a test starts, which read them at start-up) and on
the already-loaded settings (the values ``UNICRON_INSECURE_HTTP=1`` gives). Production defaults are
untouched: this runs only under pytest.
"""

from __future__ import annotations

import os
import sys

TEST_SECRET_KEY = "unicron-tests-only-2f8c1b0e7d4a4c9bb3e6a1f05d7c92e4-not-for-production"
TEST_THROTTLE_RATES = {"user": "100000/min", "token": "100000/min"}
"""The API tests send thousands of requests a minute from one address; the throttle tests set their own."""


def use_test_security_settings() -> None:
    os.environ.setdefault("SECRET_KEY", TEST_SECRET_KEY)
    os.environ.setdefault("UNICRON_INSECURE_HTTP", "1")
    if "django" not in sys.modules:
        return
    from django.conf import settings

    if not settings.configured:
        return
    if not settings.DEBUG:
        if not settings._wrapped.SECRET_KEY:  # read without Django's empty-key refusal
            settings.SECRET_KEY = os.environ["SECRET_KEY"]
        if os.environ["UNICRON_INSECURE_HTTP"] == "1":
            settings.UNICRON_INSECURE_HTTP = True
            settings.SECURE_SSL_REDIRECT = False
            settings.SECURE_HSTS_SECONDS = 0
            settings.SESSION_COOKIE_SECURE = False
            settings.CSRF_COOKIE_SECURE = False
    settings.UNICRON_THROTTLE_RATES = dict(TEST_THROTTLE_RATES)

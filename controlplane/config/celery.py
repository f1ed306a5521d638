"""The Celery app. Imported by the worker/beat command line and by Django at start-up (config/__init__ stays
empty so pure code never pulls Celery in)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")

app = Celery("unicron")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

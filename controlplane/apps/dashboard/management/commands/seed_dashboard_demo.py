"""Seed an empty database with realistic dashboard data (users admin/operator/viewer, password
``unicron-demo``)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from controlplane.apps.dashboard.demo import DEMO_PASSWORD, seed_demo
from controlplane.apps.fleet.models import Node


class Command(BaseCommand):
    help = "Seed demo nodes, tasks, metrics, failures, alerts and plans for the dashboard."

    def handle(self, *args: Any, **options: Any) -> None:
        if Node.objects.exists():
            raise CommandError("The database already has nodes; seed an empty one.")
        seed_demo()
        self.stdout.write(f"Seeded. Log in as admin / operator / viewer with password {DEMO_PASSWORD!r}.")

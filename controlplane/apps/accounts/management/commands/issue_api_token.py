"""``manage.py issue_api_token USERNAME [--ttl-days N]``: give a user a new REST API token (their
previous tokens stop working) and print it once; only its hash is stored."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.apps.accounts.services import do_rotate_api_token


class Command(BaseCommand):
    help = "Issue (rotate) a user's REST API token and print it once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--ttl-days", type=int, default=None, help="default: UNICRON_API_TOKEN_TTL_DAYS")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: options["username"]})
        except user_model.DoesNotExist as exc:
            raise CommandError(f"no user named {options['username']!r}") from exc
        ttl_days = options["ttl_days"]
        if ttl_days is not None and ttl_days < 1:
            raise CommandError(f"--ttl-days={ttl_days} must be at least 1")
        token, key = do_rotate_api_token(None, user, ttl_days)
        self.stderr.write(f"token for {user.get_username()}, expires {token.expires_at.isoformat()}:")
        self.stdout.write(key)

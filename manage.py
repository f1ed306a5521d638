#!/usr/bin/env python
"""Django's command-line utility.

With ``DATABASE_URL`` / ``REDIS_URL`` unset, the command runs against the embedded PostgreSQL and Redis,
started here (or shared where they already run) and stopped when the command ends."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.config.settings")
    from django.core.management import execute_from_command_line

    from controlplane.config.embedded import start_servers, stop_servers

    start_servers()
    try:
        execute_from_command_line(sys.argv)
    finally:
        stop_servers()


if __name__ == "__main__":
    main()

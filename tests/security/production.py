"""Run Django in a subprocess with production settings: DEBUG off, a strong SECRET_KEY, HTTPS on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_SECRET_KEY = "p7Qm2vXc9LrT4sWy8NzB3kHd6FgJ1aEu5oIq0UxZtRnCbVwYeMl-_prod-like-test-key"


def production_env(**overrides: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in {"UNICRON_INSECURE_HTTP", "DEBUG", "SECRET_KEY_FILE"}
    }
    env.update(
        DEBUG="0",
        SECRET_KEY=PRODUCTION_SECRET_KEY,
        ALLOWED_HOSTS="unicron.example.org",
        DJANGO_SETTINGS_MODULE="controlplane.config.settings",
    )
    env.setdefault("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
    for name, value in overrides.items():
        if value == "":
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )

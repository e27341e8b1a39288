"""Bench settings: the product settings plus the bench-only machines (like config.settings_test does
for tests.kernel_app). The database and the Celery queue come from the harness (bench/db.py)."""

import os

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "bench.bench_app"]
ROOT_URLCONF = "bench.urls"
DEBUG = False
# Production behaviour: a committed outbox item is pushed to the broker at once.
OUTBOX_ENQUEUE_ON_COMMIT = os.environ.get("OUTBOX_ENQUEUE_ON_COMMIT", "1") == "1"
# A queue of its own per run, so a bench never feeds (or drains) anyone else's workers.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("BENCH_QUEUE", "bench")
BENCH_WEBHOOK_SECRET = "whsec_bench"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "ERROR"},
}

"""Test settings: the real settings plus a small machine used to exercise the kernel itself."""

from .settings import *  # noqa: F403
from .settings import INSTALLED_APPS, env_bool

INSTALLED_APPS = [*INSTALLED_APPS, "tests.kernel_app"]
# Tests drive delivery explicitly (deliver_one / sweep / a real worker); no stray broker messages.
OUTBOX_ENQUEUE_ON_COMMIT = env_bool("OUTBOX_ENQUEUE_ON_COMMIT", False)
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
ROOT_URLCONF = "tests.kernel_app.urls"
# Live-server threads must not keep connections open past a test (the test database is dropped at the end).
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405

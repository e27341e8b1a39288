"""Printing settings, each overridable in Django settings (tests use ``settings`` fixtures)."""

from django.conf import settings

# Defaults: the seed's numbers where it has them, otherwise what a warehouse would expect.
DEFAULTS = {
    "PRINT_JOB_EXPIRES_MIN_SECONDS": 10,
    "PRINT_JOB_EXPIRES_MAX_SECONDS": 86_400,
    "PRINT_JOB_EXPIRES_DEFAULT_SECONDS": 3_600,
    "PRINT_JOB_MAX_CONTENT_BYTES": 10 * 1024 * 1024,
    "PRINT_JOB_MAX_COPIES": 100,
    # How long a station holds a claimed job before it must confirm receipt (else back to pending).
    "PRINT_LEASE_SECONDS": 30,
    # Silence after receipt / after hand-off to the OS before a job is declared unknown.
    "PRINT_SENT_SILENCE_SECONDS": 600,
    "PRINT_PRINTING_SILENCE_SECONDS": 3_600,
    # Content is deleted this long after a job reaches a terminal state (the record stays).
    "PRINT_CONTENT_RETENTION_SECONDS": 7 * 86_400,
    # Connection status from the last time a station was heard from.
    "PRINT_STATION_HEARTBEAT_SECONDS": 15,
    "PRINT_STATION_CONNECTED_SECONDS": 45,
    "PRINT_STATION_DISCONNECTED_SECONDS": 300,
    # Long polls are bounded.
    "PRINT_CLAIM_MAX_WAIT_SECONDS": 30,
    "PRINT_WAIT_MAX_TIMEOUT_SECONDS": 60,
    "PRINT_LONG_POLL_INTERVAL_SECONDS": 0.25,
    "PRINT_WEBHOOK_TIMEOUT_SECONDS": 10,
}


def get(name: str):
    return getattr(settings, name, DEFAULTS[name])


def expires_min() -> int:
    return int(get("PRINT_JOB_EXPIRES_MIN_SECONDS"))


def expires_max() -> int:
    return int(get("PRINT_JOB_EXPIRES_MAX_SECONDS"))


def expires_default() -> int:
    return int(get("PRINT_JOB_EXPIRES_DEFAULT_SECONDS"))


def lease_seconds() -> int:
    return int(get("PRINT_LEASE_SECONDS"))


def sent_silence_seconds() -> int:
    return int(get("PRINT_SENT_SILENCE_SECONDS"))


def printing_silence_seconds() -> int:
    return int(get("PRINT_PRINTING_SILENCE_SECONDS"))


def content_retention_seconds() -> int:
    return int(get("PRINT_CONTENT_RETENTION_SECONDS"))


def station_connected_seconds() -> int:
    return int(get("PRINT_STATION_CONNECTED_SECONDS"))


def station_disconnected_seconds() -> int:
    return int(get("PRINT_STATION_DISCONNECTED_SECONDS"))

"""Case 7, print claims: claims per second with 50 stations polling at once, and proof that no job is
leased twice. Not yet: the printing app (print jobs, the lease/claim service) is not on main. When it
lands, this case generates queued jobs with COPY, runs 50 threads calling the claim service (or the
station poll endpoint over gunicorn, like case 4), and checks every (job, fencing token) is unique."""

from __future__ import annotations

from django.apps import apps


def printing_available() -> bool:
    try:
        config = apps.get_app_config("printing")
    except LookupError:
        return False
    return any(m.__name__ == "PrintJob" for m in config.get_models())


def run() -> str:
    if not printing_available():
        return (
            "7 print claims: not yet -- printing.PrintJob and its claim service are not on main; "
            "the case is skipped (see bench/cases/printing.py for what it will measure)"
        )
    return (
        "7 print claims: not yet -- printing landed but this case has not been written against it; "
        "see bench/cases/printing.py"
    )

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cups_queue() -> dict:
    """The real CUPS test queue (file device). ``make test`` sets it up; this makes sure, and never skips."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure_cups_queue.sh")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"CUPS test queue could not be set up: {done.stderr or done.stdout}"
    queue = os.environ.get("LEDGERFLOW_CUPS_QUEUE", "ledgerflow-test")
    out_dir = Path(os.environ.get("LEDGERFLOW_CUPS_DIR", "/var/tmp/ledgerflow-cups"))
    return {"queue": queue, "device_file": out_dir / f"{queue}.out"}

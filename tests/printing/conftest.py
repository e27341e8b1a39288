import base64
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from printing.services import station_create

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


# --- API helpers ------------------------------------------------------------------------------------

class StationHandle:
    """A station as its program sees it: an id, a token and an HTTP client using that token."""

    def __init__(self, name: str) -> None:
        self.station, self.token = station_create(name=name)
        self.id = self.station.pk
        self.client = APIClient()
        self.client.credentials(HTTP_AUTHORIZATION=f"Bearer {self.token}")

    def heartbeat(self, **info):
        return self.client.post("/api/v1/station/heartbeat", info, format="json")

    def claim(self, wait_seconds: float = 0):
        response = self.client.post("/api/v1/station/claim", {"wait_seconds": wait_seconds}, format="json")
        assert response.status_code == 200, response.content
        return response.json()["job"]

    def report(self, job_id: int, kind: str, lease_token: str, *, event_id: str | None = None, **extra):
        body = {"event_id": event_id or str(uuid.uuid4()), "lease_token": lease_token, "kind": kind, **extra}
        return self.client.post(f"/api/v1/station/jobs/{job_id}/report", body, format="json")


@pytest.fixture
def make_station(db):
    return StationHandle


@pytest.fixture
def station(make_station):
    return make_station("station-a")


def job_body(station_id: int, content: bytes = b"hello printer\n", **extra) -> dict:
    body = {"station_id": station_id, "content_base64": base64.b64encode(content).decode(), "content_type": "text",
            "title": "Packing slip 1842", "business_object": {"type": "order", "id": "1842"}}
    body.update(extra)
    return body


@pytest.fixture
def submit(api_client):
    """POST a job for a station; returns the created job's JSON (asserting 201)."""

    def do(station_id: int, content: bytes = b"hello printer\n", **extra) -> dict:
        response = api_client.post("/api/v1/print-jobs", job_body(station_id, content, **extra), format="json")
        assert response.status_code == 201, response.content
        return response.json()

    return do

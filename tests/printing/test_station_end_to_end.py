"""The station program (a real process) against the real server (live HTTP) and the real OS print path.

* into a folder (the development printer);
* through a real CUPS queue with ``lp``, followed with ``lpstat`` to completion;
* killed after CUPS accepted the job: the server gives up (``unknown``), the restarted station's
  ledger settles it, and the document was printed exactly once.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from printing.models import PrintJob, UsageRecord
from printing.services import station_create
from printing.station import ipp
from printing.station.ledger import Ledger
from workflow import clock, timers
from workflow.auth import create_api_key

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


class Integrator:
    def __init__(self, base: str) -> None:
        _, key = create_api_key(name="e2e", scopes=["*"])
        self.base = base
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def submit(self, station_id: int, content: bytes, **extra) -> dict:
        body = {"station_id": station_id, "content_base64": base64.b64encode(content).decode(),
                "content_type": "text", "title": "e2e", **extra}
        response = self.session.post(f"{self.base}/api/v1/print-jobs", json=body, timeout=30)
        assert response.status_code == 201, response.text
        return response.json()

    def get(self, job_id: int) -> dict:
        return self.session.get(f"{self.base}/api/v1/print-jobs/{job_id}", timeout=30).json()


def station_cmd(base: str, token: str, ledger: Path, output: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "printing.station", "--api", base, "--token", token, "--ledger", str(ledger),
            "--output", output, "--poll-wait", "0.5", "--heartbeat-seconds", "1", *extra]


def run_until_idle(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    done = subprocess.run([*cmd, "--until-idle"], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False)
    assert done.returncode == 0, done.stderr
    return done


def wait_for(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def integrator(live_server):
    return Integrator(live_server.url)


def test_a_station_prints_a_job_into_a_folder(live_server, integrator, tmp_path):
    # given a station and a job for it
    station, token = station_create(name="folder-station")
    job = integrator.submit(station.pk, b"packing slip\n", business_object={"type": "order", "id": "7"})

    # when the station program runs until it has nothing left to do
    run_until_idle(station_cmd(live_server.url, token, tmp_path / "ledger.sqlite3", f"dir:{tmp_path / 'out'}"))

    # then the document is in the folder and the server saw every step, with the station connected
    assert (tmp_path / "out" / f"ledgerflow-job-{job['id']}.txt").read_bytes() == b"packing slip\n"
    body = integrator.get(job["id"])
    assert body["state"] == "completed" and body["billable"] is True
    assert [e["to"] for e in body["timeline"]] == ["pending", "dispatching", "sent", "printing", "completed"]
    assert body["station"]["connection_status"] == "connected"


@pytest.mark.cups
def test_a_station_prints_through_a_real_cups_queue(live_server, integrator, tmp_path, cups_queue):
    device = cups_queue["device_file"]
    device.unlink(missing_ok=True)
    station, token = station_create(name="cups-station")
    job = integrator.submit(station.pk, b"^XA^FO20,20^FDthrough lp^FS^XZ\n", content_type="raw-zpl")

    run_until_idle(station_cmd(live_server.url, token, tmp_path / "ledger.sqlite3", f"cups:{cups_queue['queue']}"))

    body = integrator.get(job["id"])
    assert body["state"] == "completed", body
    assert body["os_job_id"].startswith(f"{cups_queue['queue']}-")
    assert device.read_bytes() == b"^XA^FO20,20^FDthrough lp^FS^XZ\n"
    number = int(body["os_job_id"].rsplit("-", 1)[1])
    assert ipp.job_attributes(number)["job-state"] == "completed"


@pytest.mark.cups
def test_a_station_killed_after_cups_accepted_the_job_settles_unknown_from_its_ledger(live_server, integrator,
                                                                                      tmp_path, cups_queue):
    queue, device = cups_queue["queue"], cups_queue["device_file"]
    device.unlink(missing_ok=True)
    station, token = station_create(name="crashing-station")
    ledger_path = tmp_path / "ledger.sqlite3"
    job = integrator.submit(station.pk, b"print me once\n")
    cmd = station_cmd(live_server.url, token, ledger_path, f"cups:{queue}", "--follow-seconds", "600")

    # given a stopped printer queue: CUPS accepts the job and holds it
    subprocess.run(["cupsdisable", queue], check=True)
    try:
        process = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   start_new_session=True)
        try:
            # when the station has handed the job to CUPS (the server knows it is printing) and is killed
            printing = wait_for(lambda: integrator.get(job["id"])["state"] == "printing", what="printing")
            assert printing
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        os_job_id = PrintJob.objects.get(pk=job["id"]).os_job_id
        assert os_job_id.startswith(f"{queue}-")
        assert not device.exists()  # nothing printed yet

        # and the server hears nothing until the job's deadline: it is unknown, never retried
        with clock.travel(3601):
            timers.fire_due()
        assert integrator.get(job["id"])["state"] == "unknown"
    finally:
        # the printer comes back and CUPS prints what it accepted
        subprocess.run(["cupsenable", queue], check=True)

    # when the station is restarted on the same ledger
    run_until_idle(cmd)

    # then its ledger settled the unknown job by the late acknowledgement
    body = integrator.get(job["id"])
    assert (body["state"], body["settled_by"], body["os_job_id"]) == ("completed", "station", os_job_id)
    assert [e["to"] for e in body["timeline"] if e["result"] == "applied"][-2:] == ["unknown", "completed"]
    assert UsageRecord.objects.filter(job_id=job["id"]).count() == 1
    # and it was printed exactly once: one CUPS job carries its marker, and the ledger handed it off once
    ours = [j for j in ipp.find_jobs(queue) if str(j.get("job-name", "")).startswith(f"ledgerflow-job-{job['id']}-")]
    ledger = Ledger(ledger_path)
    entry = ledger.get(str(job["id"]))
    assert [f"{queue}-{j['job-id']}" for j in ours if entry.nonce in j["job-name"]] == [os_job_id]
    assert [r.kind for r in ledger.reports_for(str(job["id"]))].count("printing") == 1
    assert device.read_bytes() == b"print me once\n"

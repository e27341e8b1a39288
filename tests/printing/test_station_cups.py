"""The station's OS print path against a real CUPS scheduler and queue (file device), through ``lp``.

The queue is set up by scripts/ensure_cups_queue.sh (``make test`` runs it; the fixture makes sure).
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from printing.station.client import StationClient
from printing.station.ledger import COMPLETED, Ledger
from printing.station.outputs import CupsOutput, OutputError
from printing.station.runner import Station

from .fake_station_server import FakeStationServer

pytestmark = pytest.mark.cups


def wait_until_done(output: CupsOutput, os_job_id: str, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while True:
        status = output.status(os_job_id)
        if status.status != "pending" or time.monotonic() > deadline:
            return status
        time.sleep(0.1)


def test_lp_prints_into_the_queue_and_the_job_is_followed_to_completed(cups_queue, tmp_path):
    # given a spooled ZPL label and the real queue
    device = cups_queue["device_file"]
    device.unlink(missing_ok=True)
    spool = tmp_path / "label.zpl"
    spool.write_bytes(b"^XA^FO50,50^ADN,36,20^FDLedgerflow^FS^XZ\n")
    output = CupsOutput(cups_queue["queue"], lp_options=[])
    job_id = f"cups-{uuid.uuid4().hex[:8]}"

    # when it is handed to CUPS and followed
    os_job_id = output.submit(
        job_id=job_id, spool_path=spool, title="label", copies=1, content_type="raw-zpl"
    )
    status = wait_until_done(output, os_job_id)

    # then CUPS reports it completed and the device received the bytes unchanged
    assert os_job_id.startswith(f"{cups_queue['queue']}-")
    assert status.status == "completed", status
    assert device.read_bytes() == spool.read_bytes()
    # and the job can be found again by its marker (what a station does after a crash mid hand-off)
    assert output.find(job_id) == os_job_id
    assert output.find("never-submitted") is None


def test_a_job_canceled_in_cups_is_failed_with_the_schedulers_words(cups_queue, tmp_path):
    # given a stopped queue, so the job waits in CUPS
    queue = cups_queue["queue"]
    subprocess.run(["cupsdisable", queue], check=True)
    try:
        spool = tmp_path / "doc.txt"
        spool.write_text("never printed\n")
        output = CupsOutput(queue, lp_options=[])
        os_job_id = output.submit(
            job_id="cups-2", spool_path=spool, title="doc", copies=1, content_type="text"
        )
        assert output.status(os_job_id).status == "pending"

        # when somebody cancels it at the printer's computer
        subprocess.run(["cancel", os_job_id], check=True)
        status = wait_until_done(output, os_job_id)
    finally:
        subprocess.run(["cupsenable", queue], check=True)

    # then it is failed, and the reason says what CUPS said
    assert status.status == "failed"
    assert status.reason.startswith(f"CUPS job {os_job_id} canceled")


def test_lp_refusing_the_job_is_a_failure_with_lps_reason_verbatim(tmp_path):
    spool = tmp_path / "doc.txt"
    spool.write_text("x")
    output = CupsOutput("no-such-queue-ledgerflow", lp_options=[])
    with pytest.raises(OutputError) as refused:
        output.submit(job_id="cups-3", spool_path=spool, title="doc", copies=1, content_type="text")
    assert "lp:" in str(refused.value)


def test_the_station_prints_a_job_through_cups_end_to_end(cups_queue, tmp_path):
    # given a server offering a text job and a station on the real queue
    device = cups_queue["device_file"]
    device.unlink(missing_ok=True)
    with FakeStationServer() as server:
        server.offer(21, b"through lp\n", lease="lease-1")
        ledger = Ledger(tmp_path / "ledger.sqlite3")
        station = Station(
            StationClient(server.url, server.token, timeout=5),
            ledger,
            CupsOutput(cups_queue["queue"], lp_options=[]),
            spool_dir=tmp_path / "spool",
            poll_wait=0.2,
            follow_seconds=30,
            follow_interval=0.1,
        )

        # when it runs until idle
        assert station.run(until_idle=True) == 0

    # then the job went through lp, was followed to completion, and reported with the CUPS job id
    assert ledger.get("21").phase == COMPLETED
    assert device.read_bytes() == b"through lp\n"
    assert server.kinds(21) == ["received", "printing", "completed"]
    printing = [b for _, b in server.reports if b["kind"] == "printing"][0]
    assert printing["os_job_id"].startswith(f"{cups_queue['queue']}-")

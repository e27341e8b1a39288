"""The station program on its own: ledger before report, never twice, recovery after a crash.

These drive ``printing.station`` against a scripted fake server (tests/printing/fake_station_server.py)
so each protocol situation can be produced exactly; the real server is used in the end-to-end tests.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from printing.station.client import StationClient
from printing.station.ledger import COMPLETED, HANDED_OFF, HANDING_OFF, INTERRUPTED, RECEIVED, Ledger
from printing.station.outputs import DirOutput, JobStatus, OutputError
from printing.station.runner import Station

from .fake_station_server import FakeStationServer, ledger_phase

REPO = Path(__file__).resolve().parents[2]
PHASE_ORDER = [RECEIVED, HANDING_OFF, HANDED_OFF, COMPLETED]


class CountingDirOutput(DirOutput):
    """A folder printer that counts hand-offs, and can pretend the OS is still busy."""

    def __init__(self, folder: Path, *, busy: bool = False, find_answer=None) -> None:
        super().__init__(folder)
        self.submits: list[str] = []
        self.busy = busy
        self.find_answer = find_answer

    def submit(self, **kwargs) -> str:
        self.submits.append(kwargs["job_id"])
        return super().submit(**kwargs)

    def status(self, os_job_id: str) -> JobStatus:
        return JobStatus("pending") if self.busy else super().status(os_job_id)

    def find(self, job_id: str, nonce: str = ""):
        if self.find_answer is None:
            return super().find(job_id, nonce)
        if isinstance(self.find_answer, Exception):
            raise self.find_answer
        return self.find_answer


def make_station(server: FakeStationServer, tmp_path: Path, output: DirOutput) -> tuple[Station, Ledger]:
    ledger = Ledger(tmp_path / "ledger.sqlite3")
    client = StationClient(server.url, server.token, timeout=5)
    station = Station(
        client,
        ledger,
        output,
        spool_dir=tmp_path / "spool",
        poll_wait=0.2,
        heartbeat_every=0.1,
        follow_seconds=1,
        follow_interval=0.05,
    )
    return station, ledger


def test_a_job_is_printed_and_every_report_follows_its_ledger_write(tmp_path):
    # given a server offering one plain-text job, and a check of the ledger at each report's arrival
    with FakeStationServer() as server:
        server.offer(7, b"hello printer\n", lease="lease-1")
        ledger_path = str(tmp_path / "ledger.sqlite3")
        seen_phases = []

        def check(job_id, body):
            seen_phases.append((body["kind"], ledger_phase(ledger_path, job_id)))

        server.on_report = check
        output = CountingDirOutput(tmp_path / "out")
        station, ledger = make_station(server, tmp_path, output)

        # when the station runs until it has nothing left to do
        assert station.run(until_idle=True) == 0

    # then the content is in the folder, once, and the reports came in order, each after its ledger write
    assert (tmp_path / "out" / "ledgerflow-job-7.txt").read_bytes() == b"hello printer\n"
    assert output.submits == ["7"]
    assert server.kinds(7) == ["received", "printing", "completed"]
    for kind, phase in seen_phases:
        wanted = {"received": RECEIVED, "printing": HANDED_OFF, "completed": COMPLETED}[kind]
        assert PHASE_ORDER.index(phase) >= PHASE_ORDER.index(wanted), (kind, phase)
    printing_report = [b for j, b in server.reports if b["kind"] == "printing"][0]
    assert printing_report["os_job_id"] == "ledgerflow-job-7.txt"
    assert {b["lease_token"] for _, b in server.reports} == {"lease-1"}
    assert server.heartbeats and server.heartbeats[0]["output"].startswith("dir:")


def test_a_job_offered_again_is_not_printed_again_and_its_outcome_is_reported_under_the_new_lease(tmp_path):
    # given a job the station already printed
    with FakeStationServer() as server:
        server.offer(8, b"once", lease="lease-1")
        output = CountingDirOutput(tmp_path / "out")
        station, ledger = make_station(server, tmp_path, output)
        station.run(until_idle=True)

        # when the server offers it again under a new lease (its first lease ran out before it heard back)
        server.offer(8, b"once", lease="lease-2")
        station.run(until_idle=True)

    # then it was handed to the OS once, and the outcome went back under the new lease
    assert output.submits == ["8"]
    assert server.kinds(8) == ["received", "printing", "completed", "completed"]
    assert server.reports[-1][1]["lease_token"] == "lease-2"
    assert ledger.get("8").offers == 2


def test_a_receipt_the_server_did_not_hear_is_retried_and_printing_waits_for_it(tmp_path):
    # given a server that is unavailable for the first two reports
    with FakeStationServer() as server:
        server.offer(12, b"patience", lease="lease-1")
        server.fail_next_reports = 2
        output = CountingDirOutput(tmp_path / "out")
        station, ledger = make_station(server, tmp_path, output)

        # when the station claims the job while reports fail
        station.step()
        # then nothing is printed yet, and the receipt waits in the ledger
        assert output.submits == []
        assert [r.kind for r in ledger.unacked_reports()] == ["received"]

        # and once the server answers again, the same receipt goes through and the job prints
        station.run(until_idle=True)

    assert output.submits == ["12"]
    assert server.kinds(12) == ["received", "printing", "completed"]
    assert len({b["event_id"] for j, b in server.reports if b["kind"] == "received"}) == 1


def test_a_job_offered_again_while_the_os_still_has_it_is_followed_not_resubmitted(tmp_path):
    # given a job handed to the OS that is still busy with it
    with FakeStationServer() as server:
        server.offer(13, b"busy", lease="lease-1")
        output = CountingDirOutput(tmp_path / "out", busy=True)
        station, ledger = make_station(server, tmp_path, output)
        station.step()
        assert ledger.get("13").phase == HANDED_OFF

        # when the server offers it again (it never heard the receipt in time) and the OS then finishes
        server.offer(13, b"busy", lease="lease-2")
        station.step()
        output.busy = False
        station.run(until_idle=True)

    # then the station told the server what it knows under the new lease, and handed it off only once
    assert output.submits == ["13"]
    under_new_lease = [b["kind"] for _, b in server.reports if b["lease_token"] == "lease-2"]
    assert under_new_lease == ["received", "printing", "completed"]


def test_a_job_received_long_ago_is_not_printed_after_an_outage(tmp_path):
    # given a job received (and confirmed) long before the station could print it
    with FakeStationServer() as server:
        output = CountingDirOutput(tmp_path / "out")
        station, ledger = make_station(server, tmp_path, output)
        station.max_print_delay = 60
        spool = tmp_path / "spool" / "job-14"
        spool.write_bytes(b"yesterday")
        ledger.record_received(job_id="14", title="t", content_type="text", copies=1, content_sha256="",
                               spool_path=str(spool), lease_token="lease-1")
        ledger.ack(ledger.unacked_reports()[0].event_id, result="applied", server_state="sent")
        ledger.db.execute("UPDATE jobs SET received_at = '2020-01-01T00:00:00+00:00' WHERE job_id = '14'")

        # when the station runs
        station.run(until_idle=True)

    # then it does not print yesterday's label; it reports failed with the reason
    assert output.submits == []
    assert ledger.get("14").phase == "failed"
    assert server.kinds(14) == ["failed"]
    assert "not printed" in server.reports[-1][1]["reason"]


def test_a_receipt_answered_stale_is_not_permission_to_print(tmp_path):
    # given a server that answers the receipt under the first lease with stale (that lease ran out)
    with FakeStationServer() as server:
        server.offer(9, b"late", lease="lease-1")

        def answer(job_id, body):
            if body["lease_token"] == "lease-1":
                return {"result": "stale", "state": "pending", "detail": "older lease"}
            return None

        server.on_report = answer
        output = CountingDirOutput(tmp_path / "out")
        station, ledger = make_station(server, tmp_path, output)

        # when the station runs: nothing is printed under the stale lease
        station.run(until_idle=True)
        assert output.submits == []
        assert ledger.get("9").phase == RECEIVED

        # and when the job is offered again under a fresh lease, it is printed then, once
        server.offer(9, b"late", lease="lease-2")
        station.run(until_idle=True)

    assert output.submits == ["9"]
    assert [b["lease_token"] for _, b in server.reports if b["kind"] == "completed"] == ["lease-2"]


def test_after_a_restart_the_ledger_replays_the_outcome_of_a_job_the_os_finished_meanwhile(tmp_path):
    # given a station that handed a job to the OS and stopped while the OS was still busy with it
    with FakeStationServer() as server:
        server.offer(10, b"slow", lease="lease-1")
        busy = CountingDirOutput(tmp_path / "out", busy=True)
        station, ledger = make_station(server, tmp_path, busy)
        station.step()  # heartbeat, claim, receive, hand off; the OS job is still running
        assert ledger.get("10").phase == HANDED_OFF
        assert server.kinds(10) == ["received", "printing"]
        ledger.close()

        # when a new station process starts on the same ledger after the OS finished the job
        done = CountingDirOutput(tmp_path / "out")
        station2, ledger2 = make_station(server, tmp_path, done)
        station2.run(until_idle=True)

    # then the outcome is replayed through /station/ledger, and nothing was printed a second time
    assert busy.submits == ["10"] and done.submits == []
    assert ledger2.get("10").phase == COMPLETED
    replayed = [e for batch in server.ledger_replays for e in batch]
    assert [(e["job_id"], e["kind"], e["lease_token"]) for e in replayed] == [("10", "completed", "lease-1")]


@pytest.mark.parametrize(
    ("os_answer", "expected_phase", "expected_submits"),
    [
        ("ledgerflow-job-11.txt", COMPLETED, []),  # the OS had it: adopt, do not print again
        (None, COMPLETED, ["11"]),  # the OS certainly never got it: print it
        (OutputError("CUPS unreachable"), INTERRUPTED, []),  # nobody can tell: never guess, report it
    ],
)
def test_a_crash_while_handing_off_is_resolved_by_asking_the_os(
    tmp_path, os_answer, expected_phase, expected_submits
):
    # given a ledger whose job was confirmed and then caught mid hand-off by a crash
    with FakeStationServer() as server:
        out = tmp_path / "out"
        output = CountingDirOutput(out, find_answer=os_answer)
        station, ledger = make_station(server, tmp_path, output)
        spool = tmp_path / "spool" / "job-11"
        spool.write_bytes(b"mid")
        ledger.record_received(
            job_id="11",
            title="t",
            content_type="text",
            copies=1,
            content_sha256="",
            spool_path=str(spool),
            lease_token="lease-1",
        )
        ledger.ack(ledger.unacked_reports()[0].event_id, result="applied", server_state="sent")
        ledger.set_phase("11", HANDING_OFF)
        if isinstance(os_answer, str):
            (out / os_answer).write_bytes(b"mid")

        # when the station starts again
        station.run(until_idle=True)

    # then the ledger settles by what the OS says, and prints only when the OS certainly has nothing
    assert ledger.get("11").phase == expected_phase
    assert output.submits == expected_submits
    assert server.kinds(11)[-1] == expected_phase  # reported as soon as the station is back
    replayed = [e["kind"] for batch in server.ledger_replays for e in batch]
    # an outcome settled during recovery is also in the ledger replay (answered already_applied there);
    # a job printed after the replay is simply reported
    assert replayed == ([] if expected_submits else [expected_phase])
    if expected_phase == INTERRUPTED:
        assert "CUPS unreachable" in server.reports[-1][1]["reason"]


def test_the_command_line_refuses_a_bad_token_with_exit_code_2(tmp_path):
    with FakeStationServer() as server:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "printing.station",
                "--api",
                server.url,
                "--token",
                "st_wrong",
                "--ledger",
                str(tmp_path / "l.sqlite3"),
                "--output",
                f"dir:{tmp_path / 'out'}",
                "--poll-wait",
                "0.2",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2, done.stderr
    assert "refused" in done.stderr


def test_the_station_package_does_not_import_django():
    code = (
        "import sys, printing.station.cli, printing.station.runner; "
        "sys.exit(1 if any(m == 'django' or m.startswith('django.') for m in sys.modules) else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=60).returncode == 0

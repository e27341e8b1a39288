"""The station protocol over HTTP: claims under leases, fencing, reports, isolation, heartbeats, ledger."""

from __future__ import annotations

import base64
import io
import json
import threading

import pytest
from django.core.management import call_command
from django.db import connection
from rest_framework.test import APIClient

from printing.models import PrintJob, Station
from printing.services import print_job_claim
from workflow import clock, timers

pytestmark = pytest.mark.django_db


def state_of(job_id: int) -> str:
    return PrintJob.objects.get(pk=job_id).state


def test_a_claim_takes_the_oldest_due_job_under_a_fresh_lease(station, submit):
    # given two jobs for the station, the older first
    first = submit(station.id, b"first\n")
    second = submit(station.id, b"second\n")

    # when the station claims twice, then a third time
    one, two, none = station.claim(), station.claim(), station.claim()

    # then it got the oldest first, each under its own lease, with the document, and nothing more
    assert (one["id"], two["id"], none) == (first["id"], second["id"], None)
    assert base64.b64decode(one["content_base64"]) == b"first\n"
    assert one["lease_token"] and one["lease_token"] != two["lease_token"]
    assert one["fencing_token"] == 1
    assert state_of(first["id"]) == "dispatching"


def test_reports_walk_the_job_to_completed_and_a_repeat_is_already_applied(station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]

    received = station.report(job["id"], "received", lease, event_id="e-1")
    printing = station.report(job["id"], "printing", lease, event_id="e-2", os_job_id="ledgerflow-test-7")
    completed = station.report(job["id"], "completed", lease, event_id="e-3", os_job_id="ledgerflow-test-7")
    repeat = station.report(job["id"], "completed", lease, event_id="e-3", os_job_id="ledgerflow-test-7")

    assert [r.json()["state"] for r in (received, printing, completed)] == ["sent", "printing", "completed"]
    assert {r.json()["result"] for r in (received, printing, completed)} == {"applied"}
    assert (repeat.json()["result"], repeat.json()["replayed"]) == ("already_applied", True)
    assert repeat.json()["transition_id"] == completed.json()["transition_id"]
    assert PrintJob.objects.get(pk=job["id"]).os_job_id == "ledgerflow-test-7"


def test_the_same_event_id_with_different_content_is_a_conflict(station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "received", lease, event_id="e-1")
    clash = station.report(job["id"], "printing", lease, event_id="e-1", os_job_id="q-1")
    assert clash.json()["result"] == "conflict"
    assert state_of(job["id"]) == "sent"


@pytest.mark.parametrize("kind", ["printing", "completed", "failed"])
def test_an_outcome_may_arrive_before_sent_is_recorded(station, submit, kind):
    # given a job just claimed (dispatching): the receipt report got lost
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    # when the station's next report arrives first, then the wide edge out of dispatching takes it
    answer = station.report(job["id"], kind, lease, reason="paper out" if kind == "failed" else None,
                            os_job_id="q-1")
    assert (answer.json()["result"], answer.json()["state"]) == ("applied", kind)


def test_a_failure_reason_is_kept_verbatim(station, submit, api_client):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    reason = "CUPS job q-9 aborted: Unable to open device \"file:///dev/lp0\": Permission denied\n  (errno 13) ✗"
    station.report(job["id"], "failed", lease, reason=reason)
    body = api_client.get(f"/api/v1/print-jobs/{job['id']}").json()
    assert (body["state"], body["failure_reason"]) == ("failed", reason)


def test_a_failed_report_without_a_reason_is_refused_and_changes_nothing(station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    answer = station.report(job["id"], "failed", lease)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "E_VALIDATION"
    assert state_of(job["id"]) == "dispatching"


def test_an_expired_lease_returns_the_job_to_pending_and_the_old_lease_is_stale(station, submit):
    # given a job claimed under a 30 s lease whose station went quiet
    job = submit(station.id)
    first = station.claim()

    with clock.travel(31):
        # when the lease is past due: a late receipt under it is stale even before the timer runs
        early_late = station.report(job["id"], "received", first["lease_token"])
        assert (early_late.json()["result"], early_late.json()["state"]) == ("stale", "dispatching")
        # and the lease timer returns the job to pending
        timers.fire_due()
        assert state_of(job["id"]) == "pending"

        # then a second claim gets it, under a new lease with a higher fencing token
        second = station.claim()
        assert second["id"] == job["id"]
        assert second["fencing_token"] == first["fencing_token"] + 1
        assert second["lease_token"] != first["lease_token"]

        # and a report under the old lease is stale and moves nothing, while the new lease works
        late = station.report(job["id"], "received", first["lease_token"])
        assert (late.json()["result"], late.json()["state"]) == ("stale", "dispatching")
        current = station.report(job["id"], "received", second["lease_token"])
        assert (current.json()["result"], current.json()["state"]) == ("applied", "sent")


def test_a_job_that_returned_to_pending_still_expires(station, submit):
    # given a job (expires in 60 s) whose lease lapsed once
    job = submit(station.id, expires_in_seconds=60)
    station.claim()
    with clock.travel(31):
        timers.fire_due()
        assert state_of(job["id"]) == "pending"
    # when its deadline passes with no new claim, then it is expired
    with clock.travel(61):
        timers.fire_due()
        assert state_of(job["id"]) == "expired"
        assert station.claim() is None


def test_silence_after_receipt_ends_in_unknown_which_is_never_retried(station, submit, settings):
    settings.PRINT_SENT_SILENCE_SECONDS = 120
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "received", lease)

    with clock.travel(121):
        timers.fire_due()
        assert state_of(job["id"]) == "unknown"
        # nothing offers it again: unknown is terminal
        assert station.claim() is None
    detail = PrintJob.objects.get(pk=job["id"])
    assert "no report from the station" in detail.unknown_reason


def test_silence_while_printing_ends_in_unknown(station, submit, settings):
    settings.PRINT_PRINTING_SILENCE_SECONDS = 300
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "printing", lease, os_job_id="q-1")
    with clock.travel(301):
        timers.fire_due()
    assert state_of(job["id"]) == "unknown"


def test_the_ledger_replay_settles_unknown_and_answers_each_entry(station, make_station, submit):
    # given a job the server had to mark unknown after the station went silent mid print
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "printing", lease, os_job_id="q-1")
    with clock.travel(3601):
        timers.fire_due()
    assert state_of(job["id"]) == "unknown"
    other = make_station("station-b")
    foreign = submit(other.id)

    # when the restarted station replays its ledger (its outcome, plus entries that cannot apply)
    answer = station.client.post("/api/v1/station/ledger", {"entries": [
        {"job_id": job["id"], "event_id": "led-1", "lease_token": lease, "kind": "completed", "os_job_id": "q-1"},
        {"job_id": foreign["id"], "event_id": "led-2", "lease_token": "x", "kind": "completed"},
        {"job_id": job["id"], "event_id": "led-3", "lease_token": lease, "kind": "exploded"},
    ]}, format="json")

    # then the unknown job is settled by the late acknowledgement, and every entry has its answer
    results = answer.json()["results"]
    assert (results[0]["result"], results[0]["state"]) == ("applied", "completed")
    assert results[1]["error"]["code"] == "E_NOT_FOUND"
    assert results[2]["error"]["code"] == "E_VALIDATION"
    assert PrintJob.objects.get(pk=job["id"]).settled_by == "station"
    # and replaying the same ledger again changes nothing
    again = station.client.post("/api/v1/station/ledger", {"entries": [
        {"job_id": job["id"], "event_id": "led-1", "lease_token": lease, "kind": "completed", "os_job_id": "q-1"},
    ]}, format="json")
    assert again.json()["results"][0]["result"] == "already_applied"


def test_a_station_sees_claims_and_reports_only_its_own_jobs(station, make_station, submit):
    # given a job of station A, claimed by A
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    b = make_station("station-b")
    submit(station.id)  # another pending job of A

    # then B cannot claim it, read it, report on it or replay it
    assert b.claim() is None
    read = b.client.get(f"/api/v1/station/jobs/{job['id']}")
    report = b.report(job["id"], "completed", lease)
    ledger = b.client.post("/api/v1/station/ledger", {"entries": [
        {"job_id": job["id"], "event_id": "x", "lease_token": lease, "kind": "completed"}]}, format="json")
    assert read.status_code == 404 and read.json()["error"]["code"] == "E_NOT_FOUND"
    assert report.status_code == 404 and report.json()["error"]["code"] == "E_NOT_FOUND"
    assert ledger.json()["results"][0]["error"]["code"] == "E_NOT_FOUND"
    assert state_of(job["id"]) == "dispatching"
    # while A reads its own
    assert station.client.get(f"/api/v1/station/jobs/{job['id']}").json()["state"] == "dispatching"


def test_tokens_do_not_cross_over(station, api_client):
    # a station token on the integrator API, an API key on the station API, and a forged token
    as_integrator = station.client.get("/api/v1/print-jobs/1")
    api_client_on_station = api_client.post("/api/v1/station/claim", {}, format="json")
    station.client.credentials(HTTP_AUTHORIZATION=f"Bearer {station.token[:-2]}xx")
    forged = station.client.post("/api/v1/station/heartbeat", {}, format="json")
    assert as_integrator.status_code == 401
    assert api_client_on_station.status_code == 401
    assert forged.status_code == 401
    assert forged.json()["error"]["code"] == "E_UNAUTHENTICATED"


def test_heartbeats_make_the_connection_status(station, submit, api_client):
    job = submit(station.id)

    def status() -> str:
        return api_client.get(f"/api/v1/print-jobs/{job['id']}").json()["station"]["connection_status"]

    assert status() == "disconnected"  # never heard from
    answer = station.heartbeat(station_version="1.0", output="dir:/tmp/x")
    assert answer.json()["connection_status"] == "connected"
    assert status() == "connected"
    with clock.travel(60):
        assert status() == "stale"
    with clock.travel(301):
        assert status() == "disconnected"
    assert PrintJob.objects.get(pk=job["id"]).station.last_heartbeat["output"] == "dir:/tmp/x"


def test_a_long_poll_claim_returns_empty_after_its_wait(station):
    assert station.claim(wait_seconds=0.3) is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_never_take_the_same_job(station, submit):
    # given twelve pending jobs and four claimers racing for them (SELECT … FOR UPDATE SKIP LOCKED)
    jobs = [submit(station.id, f"job {i}\n".encode())["id"] for i in range(12)]
    taken: list[int] = []
    lock = threading.Lock()

    def claimer():
        try:
            while (job := print_job_claim(station=station.station, wait_seconds=0)) is not None:
                with lock:
                    taken.append(job.pk)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    # then every job was claimed exactly once, each under its first lease
    assert sorted(taken) == sorted(jobs)
    assert set(PrintJob.objects.values_list("lease_generation", flat=True)) == {1}
    assert set(PrintJob.objects.values_list("state", flat=True)) == {"dispatching"}


def test_create_station_prints_its_id_and_a_token_that_works_once_stored_hashed():
    out = io.StringIO()
    call_command("create_station", "--name", "Warehouse 1", stdout=out)
    printed = json.loads(out.getvalue())
    assert set(printed) == {"station_id", "token"}
    stored = Station.objects.get(pk=printed["station_id"])
    assert stored.name == "Warehouse 1" and printed["token"].split("_", 2)[2] not in stored.secret_hash
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {printed['token']}")
    assert client.post("/api/v1/station/heartbeat", {}, format="json").json()["station_id"] == stored.pk

"""The integrator's print-job API: submit (with its bounds), dry run, read, cancel, wait; purge; billing."""

from __future__ import annotations

import base64
import threading
import time

import pytest
from django.db import connection

from printing.models import PrintJob, UsageRecord
from printing.selectors import print_job_search
from printing.services import print_job_purge_content
from workflow import clock, timers

from .conftest import job_body

pytestmark = pytest.mark.django_db


# --- expires_in_seconds at its bounds ----------------------------------------------------------------
@pytest.mark.parametrize(("expires", "status"), [(9, 400), (10, 201), (86_400, 201), (86_401, 400)])
def test_expires_in_seconds_is_bounded_10_to_86400(api_client, station, expires, status):
    response = api_client.post("/api/v1/print-jobs", job_body(station.id, expires_in_seconds=expires), format="json")
    assert response.status_code == status, response.content
    if status == 400:
        body = response.json()["error"]
        assert body["code"] == "E_VALIDATION"
        assert body["details"]["errors"][0]["field"] == "expires_in_seconds"
        assert not PrintJob.objects.exists()
    else:
        job = response.json()
        assert job["expires_in_seconds"] == expires
        assert job["state"] == "pending"


def test_expires_in_seconds_defaults_to_3600(api_client, station):
    before = clock.now()
    job = api_client.post("/api/v1/print-jobs", job_body(station.id), format="json").json()
    assert job["expires_in_seconds"] == 3600
    stored = PrintJob.objects.get(pk=job["id"])
    assert 3600 <= (stored.expires_at - before).total_seconds() < 3610


def test_a_job_not_dispatched_by_its_deadline_expires(api_client, station, submit):
    job = submit(station.id, expires_in_seconds=10)
    with clock.travel(9):
        timers.fire_due()
        assert api_client.get(f"/api/v1/print-jobs/{job['id']}").json()["state"] == "pending"
    with clock.travel(10):
        timers.fire_due()
        body = api_client.get(f"/api/v1/print-jobs/{job['id']}").json()
        assert body["state"] == "expired"
        assert station.claim() is None  # an expired job is never printed


@pytest.mark.parametrize(("change", "field"), [
    ({"content_type": "postscript"}, "content_type"),
    ({"content_base64": "not base64!"}, "content_base64"),
    ({"content_type": "pdf"}, "content_base64"),  # text bytes declared as PDF
    ({"copies": 0}, "copies"),
    ({"station_id": 999_999}, "station_id"),
    ({"title": "x" * 201}, "title"),
    ({"colour": "red"}, "colour"),
])
def test_bad_submissions_are_400_and_write_nothing(api_client, station, change, field):
    response = api_client.post("/api/v1/print-jobs", {**job_body(station.id), **change}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["errors"][0]["field"] == field
    assert not PrintJob.objects.exists()


def test_the_same_idempotency_key_creates_one_job(api_client, station):
    body = job_body(station.id)
    first = api_client.post("/api/v1/print-jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = api_client.post("/api/v1/print-jobs", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    other = api_client.post("/api/v1/print-jobs", {**body, "title": "other"}, format="json",
                            HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert first.json()["id"] == again.json()["id"]
    assert other.status_code == 409 and other.json()["error"]["code"] == "E_IDEMPOTENCY_CONFLICT"
    assert PrintJob.objects.count() == 1


def test_a_pdf_and_a_zpl_label_are_accepted(api_client, station):
    pdf = api_client.post("/api/v1/print-jobs", job_body(station.id, b"%PDF-1.4\n%%EOF\n", content_type="pdf"),
                          format="json")
    zpl = api_client.post("/api/v1/print-jobs", job_body(station.id, b"^XA^FDhi^FS^XZ", content_type="raw-zpl"),
                          format="json")
    assert (pdf.status_code, zpl.status_code) == (201, 201)


# --- dry run ---------------------------------------------------------------------------------------------
def test_validate_says_why_a_job_would_be_refused_and_writes_nothing(api_client, station):
    refused = api_client.post("/api/v1/print-jobs/validate",
                              job_body(station.id, expires_in_seconds=9, copies=0), format="json").json()
    accepted = api_client.post("/api/v1/print-jobs/validate", job_body(station.id), format="json").json()

    assert refused["accepted"] is False
    assert {e["field"] for e in refused["errors"]} == {"expires_in_seconds", "copies"}
    assert accepted["accepted"] is True and accepted["errors"] == []
    assert accepted["would_create"]["state"] == "pending"
    # the station has never been heard from: accepted, with a warning that it may expire unprinted
    assert "disconnected" in accepted["warnings"][0]
    assert not PrintJob.objects.exists()


# --- reading: the support view --------------------------------------------------------------------------
def test_reading_a_job_answers_did_it_print(api_client, station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.heartbeat()
    station.report(job["id"], "received", lease)
    station.report(job["id"], "printing", lease, os_job_id="ledgerflow-test-12")
    station.report(job["id"], "completed", lease, os_job_id="ledgerflow-test-12")

    body = api_client.get(f"/api/v1/print-jobs/{job['id']}").json()

    assert body["state"] == "completed"
    assert set(body["state_times"]) == {"pending", "dispatching", "sent", "printing", "completed"}
    assert [e["to"] for e in body["timeline"]] == ["pending", "dispatching", "sent", "printing", "completed"]
    assert body["station"] == {"id": station.id, "name": "station-a", "connection_status": "connected",
                               "last_seen_at": body["station"]["last_seen_at"]}
    assert body["business_object"] == {"type": "order", "id": "1842"}
    assert body["os_job_id"] == "ledgerflow-test-12"
    assert body["state_meaning"]["does_not_prove"] == "that paper emerged, or is readable"
    assert body["billable"] is True and body["content_purged_at"] is None


def test_an_unknown_job_reads_as_unknown_not_as_failed_or_done(api_client, station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "printing", lease, os_job_id="q-1")
    with clock.travel(3601):
        timers.fire_due()
    body = api_client.get(f"/api/v1/print-jobs/{job['id']}").json()
    assert (body["state"], body["terminal"], body["billable"]) == ("unknown", True, False)
    assert "inspect the printer" in body["state_meaning"]["does_not_prove"]
    assert body["allowed_events"] == ["operator_settled", "station_completed", "station_failed"]


def test_an_unknown_job_id_is_404(api_client):
    response = api_client.get("/api/v1/print-jobs/424242")
    assert response.status_code == 404 and response.json()["error"]["code"] == "E_NOT_FOUND"


# --- cancel ------------------------------------------------------------------------------------------------
def test_cancel_a_pending_job(api_client, station, submit):
    job = submit(station.id)
    first = api_client.post(f"/api/v1/print-jobs/{job['id']}/cancel")
    again = api_client.post(f"/api/v1/print-jobs/{job['id']}/cancel")
    assert (first.status_code, first.json()["result"], first.json()["state"]) == (200, "applied", "canceled")
    assert (again.status_code, again.json()["result"]) == (200, "already_applied")
    assert station.claim() is None


def test_cancel_a_sent_job_is_409_with_the_current_state(api_client, station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "received", lease)
    response = api_client.post(f"/api/v1/print-jobs/{job['id']}/cancel")
    assert response.status_code == 409
    error = response.json()["error"]
    assert (error["code"], error["details"]["state"]) == ("E_STATE_TRANSITION", "sent")
    assert PrintJob.objects.get(pk=job["id"]).state == "sent"


def test_a_cancel_refused_while_dispatching_does_not_stick_once_the_job_is_pending_again(api_client, station,
                                                                                          submit):
    job = submit(station.id)
    station.claim()
    assert api_client.post(f"/api/v1/print-jobs/{job['id']}/cancel").status_code == 409
    with clock.travel(31):
        timers.fire_due()
        assert api_client.post(f"/api/v1/print-jobs/{job['id']}/cancel").json()["state"] == "canceled"


# --- wait ----------------------------------------------------------------------------------------------------
def test_wait_times_out_with_reached_false(api_client, station, submit):
    job = submit(station.id)
    started = time.monotonic()
    body = api_client.get(f"/api/v1/print-jobs/{job['id']}/wait?until=terminal&timeout=0.3").json()
    assert body["reached"] is False and body["job"]["state"] == "pending"
    assert time.monotonic() - started < 10


def test_wait_is_bounded_and_validated(api_client, station, submit):
    job = submit(station.id)
    too_long = api_client.get(f"/api/v1/print-jobs/{job['id']}/wait?timeout=61")
    bad_state = api_client.get(f"/api/v1/print-jobs/{job['id']}/wait?until=printed")
    assert too_long.status_code == 400 and bad_state.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_wait_answers_as_soon_as_the_job_is_terminal(api_client, station, submit):
    # given a waiter, and a station that completes the job while it waits
    job = submit(station.id)
    lease = station.claim()["lease_token"]

    def station_finishes():
        time.sleep(0.5)
        station.report(job["id"], "completed", lease)
        connection.close()

    worker = threading.Thread(target=station_finishes)
    worker.start()
    body = api_client.get(f"/api/v1/print-jobs/{job['id']}/wait?until=terminal&timeout=20").json()
    worker.join()
    assert body["reached"] is True and body["job"]["state"] == "completed"


# --- retention and billing ------------------------------------------------------------------------------------
def test_content_is_purged_seven_days_after_a_terminal_state_and_the_record_stays(api_client, station, submit):
    job = submit(station.id, b"secret label")
    lease = station.claim()["lease_token"]
    station.report(job["id"], "completed", lease)

    with clock.travel(7 * 86_400 - 60):
        assert print_job_purge_content() == 0
    with clock.travel(7 * 86_400 + 1):
        assert print_job_purge_content() == 1
        assert print_job_purge_content() == 0

    stored = PrintJob.objects.get(pk=job["id"])
    assert stored.content is None and stored.content_purged_at is not None
    body = api_client.get(f"/api/v1/print-jobs/{job['id']}").json()
    assert body["content_purged_at"] is not None
    assert (body["state"], body["billable"], body["content_sha256"]) == ("completed", True, job["content_sha256"])
    assert len(body["timeline"]) == 3


def test_content_of_pending_jobs_is_kept(station, submit):
    submit(station.id, expires_in_seconds=86_400)
    with clock.travel(8 * 86_400):
        assert print_job_purge_content() == 0


def test_only_completed_jobs_are_billed(api_client, station, submit):
    done, failed, canceled, unknown, expired = (submit(station.id, expires_in_seconds=60) for _ in range(5))
    api_client.post(f"/api/v1/print-jobs/{canceled['id']}/cancel")
    leases = {}
    for _ in (done, failed, unknown):  # claims come oldest first: done, failed, then unknown
        claimed = station.claim()
        leases[claimed["id"]] = claimed["lease_token"]
    station.report(done["id"], "completed", leases[done["id"]])
    station.report(failed["id"], "failed", leases[failed["id"]], reason="out of labels")
    station.report(unknown["id"], "interrupted", leases[unknown["id"]], reason="lp did not answer")
    with clock.travel(61):
        timers.fire_due()  # the last one expires

    states = {j["id"]: PrintJob.objects.get(pk=j["id"]).state for j in (done, failed, canceled, unknown, expired)}
    assert sorted(states.values()) == ["canceled", "completed", "expired", "failed", "unknown"]
    assert list(UsageRecord.objects.values_list("job_id", flat=True)) == [done["id"]]
    billable = {j["id"]: api_client.get(f"/api/v1/print-jobs/{j['id']}").json()["billable"]
                for j in (done, failed, canceled, unknown, expired)}
    assert billable == {done["id"]: True, failed["id"]: False, canceled["id"]: False, unknown["id"]: False,
                        expired["id"]: False}


def test_a_settled_unknown_is_billed_once_it_is_completed(station, submit):
    job = submit(station.id)
    lease = station.claim()["lease_token"]
    station.report(job["id"], "interrupted", lease, reason="stopped mid hand-off")
    assert not UsageRecord.objects.exists()
    station.report(job["id"], "completed", lease)
    assert UsageRecord.objects.get().job_id == job["id"]


def test_the_station_receives_the_exact_bytes(station, submit):
    content = bytes(range(256)) * 4
    job = submit(station.id, content, content_type="raw-zpl")
    claimed = station.claim()
    assert base64.b64decode(claimed["content_base64"]) == content
    assert claimed["id"] == job["id"] and claimed["content_type"] == "raw-zpl"


def test_jobs_are_found_by_id_or_by_the_business_object_they_came_from(station, submit):
    first = submit(station.id, business_object={"type": "order", "id": "1842"})
    second = submit(station.id, business_object={"type": "shipment", "id": "1842"})
    other = submit(station.id, business_object={"type": "order", "id": "7"})

    assert [j.pk for j in print_job_search(query="order:1842")] == [first["id"]]
    assert {j.pk for j in print_job_search(query="1842")} == {first["id"], second["id"]}
    assert [j.pk for j in print_job_search(query=str(other["id"]))][0] == other["id"]
    assert print_job_search(query="") == []

"""Print-job REST API (integrators), the station protocol (stations) and webhook endpoints.

One view per operation; input and output shapes are declared for the OpenAPI document; the work is in
``services`` (writes) and ``selectors`` (reads). State meanings are served with every job
(``state_meaning``) and described in the schema.
"""

from __future__ import annotations

from datetime import timedelta

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from workflow import clock
from workflow.auth import actor_for
from workflow.errors import ValidationFailed
from workflow.idempotency import run_idempotent
from workflow.inputs import StrictFloatField, StrictInput, require_no_body

from . import conf, selectors, services
from .auth import IsStation, StationTokenAuthentication
from .models import STATE_MEANING, ContentType

STATES_DOC = "\n".join(f"* `{state}` — observed: {m['observed']}; proves: {m['proves']}; does not prove: "
                       f"{m['does_not_prove']}." for state, m in STATE_MEANING.items())
JOB_DOC = ("A print job. Its `state` records what somebody observed, never a guess:\n\n" + STATES_DOC
           + "\n\nTerminal: completed, failed, canceled, expired, unknown (`unknown` may still be settled by a "
             "late station acknowledgement). Only `completed` jobs are billable.")


class BusinessObjectIn(serializers.Serializer):
    type = serializers.CharField(max_length=64)
    id = serializers.CharField(max_length=128)


class PrintJobIn(serializers.Serializer):
    station_id = serializers.IntegerField()
    content_base64 = serializers.CharField(help_text="the document, base64")
    content_type = serializers.ChoiceField(choices=ContentType.values)
    title = serializers.CharField(max_length=200, required=False)
    copies = serializers.IntegerField(min_value=1, max_value=100, default=1)
    expires_in_seconds = serializers.IntegerField(min_value=10, max_value=86_400, default=3_600,
                                                  help_text="not dispatched within this → expired")
    business_object = BusinessObjectIn(required=False, help_text="what the job came from, e.g. an order")


class StationOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    connection_status = serializers.ChoiceField(choices=["connected", "stale", "disconnected"])
    last_seen_at = serializers.DateTimeField(allow_null=True)


class TimelineEntryOut(serializers.Serializer):
    at = serializers.DateTimeField()
    event = serializers.CharField()
    to = serializers.CharField()
    result = serializers.CharField()
    actor = serializers.CharField()
    detail = serializers.CharField(allow_blank=True)

    def get_fields(self):
        fields = super().get_fields()
        fields["from"] = serializers.CharField(allow_blank=True)  # a keyword in Python
        return fields


class MeaningOut(serializers.Serializer):
    observed = serializers.CharField()
    proves = serializers.CharField()
    does_not_prove = serializers.CharField()


class UsageOut(serializers.Serializer):
    copies = serializers.IntegerField()
    content_bytes = serializers.IntegerField()
    recorded_at = serializers.DateTimeField()


class PrintJobOut(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.ChoiceField(choices=list(STATE_MEANING))
    state_meaning = MeaningOut()
    terminal = serializers.BooleanField()
    version = serializers.IntegerField()
    entered_state_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    state_times = serializers.DictField(child=serializers.DateTimeField(),
                                        help_text="state → when the job last entered it")
    timeline = TimelineEntryOut(many=True, help_text="every classified event, rejected reports included")
    station = StationOut()
    title = serializers.CharField(allow_blank=True)
    copies = serializers.IntegerField()
    content_type = serializers.CharField()
    content_size = serializers.IntegerField()
    content_sha256 = serializers.CharField()
    content_purged_at = serializers.DateTimeField(allow_null=True)
    expires_in_seconds = serializers.IntegerField()
    expires_at = serializers.DateTimeField()
    business_object = BusinessObjectIn(allow_null=True)
    submitted_by = serializers.CharField(allow_blank=True)
    os_job_id = serializers.CharField(allow_null=True)
    failure_reason = serializers.CharField(allow_null=True, help_text="verbatim, as the station reported it")
    unknown_reason = serializers.CharField(allow_null=True)
    settled_by = serializers.CharField(allow_null=True)
    fencing_token = serializers.IntegerField()
    billable = serializers.BooleanField(help_text="true only for completed jobs (a usage record exists)")
    usage = UsageOut(allow_null=True)
    allowed_events = serializers.ListField(child=serializers.CharField())


JOB_OUT = PrintJobOut


def job_out(job) -> dict:
    """The job as documented: the selector's answer rendered through PrintJobOut."""
    return PrintJobOut(selectors.print_job_representation(job)).data


class PrintJobCreateApi(APIView):
    required_scopes = "print_jobs:write"

    @extend_schema(request=PrintJobIn, responses={201: JOB_OUT}, description=JOB_DOC,
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)])
    def post(self, request):
        def command():
            job = services.print_job_submit(data=request.data, actor=actor_for(request))
            return Response(job_out(job), status=201)

        return run_idempotent(request, scope="print_jobs.create", command=command)


class PrintJobValidateApi(APIView):
    required_scopes = "print_jobs:write"

    @extend_schema(request=PrintJobIn, responses={200: inline_serializer("PrintJobValidation", {
        "accepted": serializers.BooleanField(), "errors": serializers.ListField(child=serializers.DictField()),
        "warnings": serializers.ListField(child=serializers.CharField()),
        "would_create": serializers.DictField(allow_null=True)})},
        description="Dry run: would this job be accepted, and if not, why not. Writes nothing.")
    def post(self, request):
        submission, problems = services.print_job_check(data=request.data)
        if problems:
            return Response({"accepted": False, "errors": [p.as_dict() for p in problems], "warnings": [],
                             "would_create": None})
        now = clock.now()
        station = selectors.station_summary(submission.station, now)
        warnings = []
        if station["connection_status"] != "connected":
            warnings.append(f"station {station['id']} is {station['connection_status']}; the job expires unless "
                            f"it claims it within {submission.expires_in_seconds} s")
        expires_at = now + timedelta(seconds=submission.expires_in_seconds)
        return Response({"accepted": True, "errors": [], "warnings": warnings, "would_create": {
            "state": "pending", "station": station, "content_type": submission.content_type,
            "content_size": len(submission.content), "copies": submission.copies, "title": submission.title,
            "expires_in_seconds": submission.expires_in_seconds, "expires_at": expires_at.isoformat()}})


class PrintJobDetailApi(APIView):
    required_scopes = "print_jobs:read"

    @extend_schema(responses={200: JOB_OUT}, description=JOB_DOC)
    def get(self, request, job_id: int):
        return Response(job_out(selectors.print_job_get(job_id=job_id)))


class PrintJobCancelApi(APIView):
    required_scopes = "print_jobs:write"

    @extend_schema(request=None, responses={200: inline_serializer("PrintJobCancelOut", {
        "result": serializers.CharField(), "state": serializers.CharField(), "version": serializers.IntegerField(),
        "transition_id": serializers.IntegerField(), "replayed": serializers.BooleanField(),
        "detail": serializers.CharField(), "job": PrintJobOut()})},
                   description="Cancel a pending job. Any other state answers 409 E_STATE_TRANSITION with the "
                               "current state: a job already handed to a station cannot be recalled.",
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)])
    def post(self, request, job_id: int):
        require_no_body(request)

        def command():
            outcome = services.print_job_cancel(job_id=job_id, actor=actor_for(request))
            job = selectors.print_job_get(job_id=job_id)
            return Response({**outcome.as_dict(), "job": job_out(job)})

        return run_idempotent(request, scope=f"print_jobs.cancel.{job_id}", command=command)


class PrintJobWaitApi(APIView):
    required_scopes = "print_jobs:read"

    @extend_schema(
        parameters=[OpenApiParameter("until", str, description="'terminal' (default) or comma-separated states"),
                    OpenApiParameter("timeout", float, description="seconds, 0..60, default 30")],
        responses={200: inline_serializer("PrintJobWaitOut", {"reached": serializers.BooleanField(),
                                                              "job": PrintJobOut()})},
        description="Long poll: answers as soon as the job is in one of the states, or at the timeout "
                    "(`reached: false`). Bounded; poll again to keep waiting.")
    def get(self, request, job_id: int):
        selectors.print_job_get(job_id=job_id)  # 404 before waiting
        job, reached = selectors.print_job_wait(job_id=job_id, until=request.query_params.get("until"),
                                                timeout=request.query_params.get("timeout"))
        return Response({"reached": reached, "job": job_out(job)})


# --- the station protocol --------------------------------------------------------------------------
class StationApi(APIView):
    authentication_classes = [StationTokenAuthentication]
    permission_classes = [IsStation]


class HeartbeatIn(StrictInput):
    station_version = serializers.CharField(max_length=100, required=False, allow_blank=True)
    output = serializers.CharField(max_length=500, required=False, allow_blank=True)
    open_jobs = serializers.IntegerField(min_value=0, max_value=1_000_000, required=False)
    ledger_jobs = serializers.IntegerField(min_value=0, max_value=1_000_000_000, required=False)


class ClaimIn(StrictInput):
    wait_seconds = StrictFloatField(min_value=0, max_value=30, required=False, default=0)


class StationHeartbeatApi(StationApi):
    @extend_schema(request=HeartbeatIn, responses={200: OpenApiTypes.OBJECT},
                   description="A sign of life; answers the station's connection status as the server sees it.")
    def post(self, request):
        data = HeartbeatIn(data=request.data)
        data.is_valid(raise_exception=True)
        station = services.station_heartbeat(station=request.user, info=data.validated_data)
        return Response({**selectors.station_summary(station), "station_id": station.pk,
                         "server_time": clock.now().isoformat(),
                         "heartbeat_interval_seconds": int(conf.get("PRINT_STATION_HEARTBEAT_SECONDS"))})


class StationClaimApi(StationApi):
    @extend_schema(request=ClaimIn,
                   responses={200: OpenApiTypes.OBJECT},
                   description="Long poll for the station's oldest due job; `{\"job\": null}` when none came "
                               "within wait_seconds (≤ 30). The job comes under a lease: report `received` "
                               "with its lease_token before lease_expires_at, or it returns to pending.")
    def post(self, request):
        data = ClaimIn(data=request.data)
        data.is_valid(raise_exception=True)
        job = services.print_job_claim(station=request.user, wait_seconds=data.validated_data["wait_seconds"])
        return Response({"job": selectors.claim_representation(job) if job else None})


class StationJobDetailApi(StationApi):
    @extend_schema(responses={200: OpenApiTypes.OBJECT},
                   description="One of this station's own jobs (another station's job is 404).")
    def get(self, request, job_id: int):
        job = selectors.print_job_get(job_id=job_id, station=request.user)
        return Response({"id": job.pk, "state": job.state, "version": job.state_version,
                         "fencing_token": job.lease_generation, "expires_at": job.expires_at.isoformat(),
                         "os_job_id": job.os_job_id or None})


class ReportIn(serializers.Serializer):
    event_id = serializers.CharField(max_length=200)
    lease_token = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=list(services.REPORT_EVENTS))
    reason = serializers.CharField(required=False, max_length=services.MAX_REASON_CHARS,
                                   help_text="required for failed/interrupted; kept verbatim")
    os_job_id = serializers.CharField(required=False, max_length=200)
    occurred_at = serializers.CharField(required=False, max_length=64)


class StationReportApi(StationApi):
    @extend_schema(request=ReportIn, responses={200: OpenApiTypes.OBJECT},
                   description="One report about one of this station's jobs → the kernel's outcome "
                               "(applied / already_applied / stale / illegal / conflict). Another "
                               "station's job is 404.")
    def post(self, request, job_id: int):
        outcome = services.print_job_report(station=request.user, job_id=job_id, report=request.data)
        return Response(outcome.as_dict())


class StationLedgerApi(StationApi):
    @extend_schema(request=inline_serializer("LedgerIn", {"entries": serializers.ListField(
        child=serializers.DictField())}), responses={200: OpenApiTypes.OBJECT},
        description="A restarted station replays its ledger: each entry is a report with its job_id; the "
                    "answer holds one outcome (or error) per entry. Settles `unknown` jobs.")
    def post(self, request):
        data = request.data
        if not isinstance(data, dict) or set(data) - {"entries"}:
            raise ValidationFailed("the body must be {\"entries\": [...]}", details={"field": "entries"})
        results = services.station_ledger_replay(station=request.user, entries=data.get("entries"))
        return Response({"results": results})


# --- webhook endpoints -----------------------------------------------------------------------------
class WebhookEndpointIn(StrictInput):
    url = serializers.URLField(max_length=500)
    event_types = serializers.ListField(child=serializers.CharField(max_length=64), required=False, max_length=50)
    description = serializers.CharField(max_length=200, required=False)


class WebhookEndpointCreateApi(APIView):
    required_scopes = "webhooks:write"

    @extend_schema(request=WebhookEndpointIn, responses={201: OpenApiTypes.OBJECT},
                   description="Subscribe a URL to print-job events (print_job.<state> or print_job.*). The "
                               "signing secret is in this answer only. Each delivery carries "
                               "`Ledgerflow-Signature: t=<unix>,v1=<hex HMAC-SHA256(secret, \"t.body\")>`.")
    def post(self, request):
        data = WebhookEndpointIn(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        endpoint, secret = services.webhook_endpoint_create(url=v["url"], event_types=v.get("event_types"),
                                                            description=v.get("description", ""),
                                                            actor=actor_for(request))
        return Response({"id": endpoint.pk, "url": endpoint.url, "event_types": endpoint.event_types,
                         "secret": secret, "created_at": endpoint.created_at.isoformat()}, status=201)

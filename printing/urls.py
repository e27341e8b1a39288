from django.urls import path

from . import api

urlpatterns = [
    path("print-jobs", api.PrintJobCreateApi.as_view(), name="print-job-create"),
    path("print-jobs/validate", api.PrintJobValidateApi.as_view(), name="print-job-validate"),
    path("print-jobs/<id:job_id>", api.PrintJobDetailApi.as_view(), name="print-job-detail"),
    path("print-jobs/<id:job_id>/cancel", api.PrintJobCancelApi.as_view(), name="print-job-cancel"),
    path("print-jobs/<id:job_id>/wait", api.PrintJobWaitApi.as_view(), name="print-job-wait"),
    path("station/heartbeat", api.StationHeartbeatApi.as_view(), name="station-heartbeat"),
    path("station/claim", api.StationClaimApi.as_view(), name="station-claim"),
    path("station/jobs/<id:job_id>", api.StationJobDetailApi.as_view(), name="station-job-detail"),
    path("station/jobs/<id:job_id>/report", api.StationReportApi.as_view(), name="station-report"),
    path("station/ledger", api.StationLedgerApi.as_view(), name="station-ledger"),
    path("webhook-endpoints", api.WebhookEndpointCreateApi.as_view(), name="webhook-endpoint-create"),
]

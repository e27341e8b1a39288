"""Test-only endpoints that put the kernel behind HTTP (idempotency claims, outcome bodies, errors)."""

import threading

from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from workflow import kernel
from workflow.auth import actor_for
from workflow.idempotency import run_idempotent

from .models import Parcel

# A test may clear this to hold a request inside its command (to observe "still running").
RELEASE = threading.Event()
RELEASE.set()
ENTERED = threading.Event()


class ParcelIn(serializers.Serializer):
    address = serializers.CharField(max_length=200)
    hold = serializers.BooleanField(default=False)


class ParcelCreateApi(APIView):
    required_scopes = "parcels:write"

    def post(self, request):
        def command():
            data = ParcelIn(data=request.data)
            data.is_valid(raise_exception=True)
            if data.validated_data["hold"]:
                ENTERED.set()
                RELEASE.wait(20)
            parcel = kernel.create(Parcel, actor=actor_for(request), address=data.validated_data["address"])
            return Response({"id": parcel.pk, "state": parcel.state}, status=201)

        return run_idempotent(request, scope="parcels.create", command=command)


class EventIn(serializers.Serializer):
    type = serializers.CharField(max_length=64)
    identity = serializers.CharField(max_length=255)
    payload = serializers.DictField(required=False, default=dict)
    dry_run = serializers.BooleanField(default=False)


class ParcelEventApi(APIView):
    required_scopes = "parcels:write"

    def post(self, request, parcel_id: int):
        data = EventIn(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        outcome = kernel.apply((Parcel, parcel_id), v["type"], v["identity"], v["payload"],
                               actor=actor_for(request), dry_run=v["dry_run"])
        return Response(outcome.as_dict())

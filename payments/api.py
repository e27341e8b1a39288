"""HTTP face of payments: the provider webhook inbox, and reads of attempts and refunds."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from workflow.access import SIGNED_WEBHOOK, declare_access

from . import selectors, webhooks


class WebhookAnswerSerializer(serializers.Serializer):
    result = serializers.CharField(
        help_text="applied | already_applied | stale | illegal | conflict | "
        "needs_review | ignored (not about a local attempt or refund)"
    )
    state = serializers.CharField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    transition_id = serializers.IntegerField(allow_null=True)
    replayed = serializers.BooleanField()
    detail = serializers.CharField(allow_blank=True)
    event_id = serializers.CharField()
    aggregate_type = serializers.CharField(allow_blank=True)
    aggregate_id = serializers.IntegerField(allow_null=True)
    related = serializers.ListField(
        child=serializers.DictField(), help_text="what subscribers (orders) answered"
    )


@declare_access(SIGNED_WEBHOOK, why="the provider signs the raw body; no API key")
class ProviderWebhookApi(APIView):
    """Provider webhooks: signed with ``Stripe-Signature`` over the raw body; 200 with the classification."""

    authentication_classes: list = []  # authenticated by the signature, not an API key
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="payments_webhook_receive",
        request=inline_serializer(
            "ProviderEvent",
            {"id": serializers.CharField(), "type": serializers.CharField(), "data": serializers.DictField()},
        ),
        responses={
            200: WebhookAnswerSerializer,
            400: OpenApiResponse(description="E_VALIDATION: malformed"),
            401: OpenApiResponse(description="E_SIGNATURE: bad, missing or expired signature"),
        },
    )
    def post(self, request, provider: str):
        # Read the raw body before anything parses it: the signature covers the exact bytes.
        raw = request.body
        answer = webhooks.provider_event_receive(
            provider=provider, raw_body=raw, signature_header=request.headers.get("Stripe-Signature")
        )
        return Response(WebhookAnswerSerializer(answer).data, status=200)


class PaymentAttemptOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    public_id = serializers.UUIDField()
    owner_type = serializers.CharField()
    owner_id = serializers.CharField()
    sequence = serializers.IntegerField()
    is_current = serializers.BooleanField()
    state = serializers.CharField()
    version = serializers.IntegerField(source="state_version")
    entered_state_at = serializers.DateTimeField()
    amount = serializers.IntegerField()
    currency = serializers.CharField()
    provider = serializers.CharField()
    provider_intent_id = serializers.CharField()
    provider_status = serializers.CharField()
    pending_operation = serializers.CharField()
    captured_amount = serializers.IntegerField(allow_null=True)
    decline_code = serializers.CharField()
    allowed_events = serializers.ListField(child=serializers.CharField())


class RefundOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    public_id = serializers.UUIDField()
    attempt_id = serializers.IntegerField()
    refund_key = serializers.CharField()
    state = serializers.CharField()
    version = serializers.IntegerField(source="state_version")
    entered_state_at = serializers.DateTimeField()
    amount = serializers.IntegerField()
    currency = serializers.CharField()
    tries = serializers.IntegerField()
    provider_refund_id = serializers.CharField()
    provider_status = serializers.CharField()
    failure_reason = serializers.CharField()


class PaymentAttemptDetailApi(APIView):
    required_scopes = "payments:read"

    @extend_schema(operation_id="payment_attempt_read", responses={200: PaymentAttemptOutputSerializer})
    def get(self, request, attempt_id: int):
        return Response(
            PaymentAttemptOutputSerializer(selectors.payment_attempt_get(attempt_id=attempt_id)).data
        )


class RefundDetailApi(APIView):
    required_scopes = "payments:read"

    @extend_schema(operation_id="refund_read", responses={200: RefundOutputSerializer})
    def get(self, request, refund_id: int):
        return Response(RefundOutputSerializer(selectors.refund_get(refund_id=refund_id)).data)

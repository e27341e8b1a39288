from django.urls import path

from . import api

urlpatterns = [
    path("webhooks/payments/<str:provider>", api.ProviderWebhookApi.as_view(), name="payments-webhook"),
    path("payment-attempts/<id:attempt_id>", api.PaymentAttemptDetailApi.as_view(), name="payment-attempt"),
    path("refunds/<id:refund_id>", api.RefundDetailApi.as_view(), name="refund"),
]

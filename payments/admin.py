"""Read-only admin views: state changes go through services (and the console's repairs), never forms."""

from django.contrib import admin

from .models import Discrepancy, PaymentAttempt, ProviderEvent, Refund


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PaymentAttempt)
class PaymentAttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "owner_type", "owner_id", "sequence", "is_current", "state", "amount", "currency",
                    "provider_intent_id", "entered_state_at")
    list_filter = ("state", "is_current")
    search_fields = ("provider_intent_id", "owner_id", "public_id")


@admin.register(Refund)
class RefundAdmin(ReadOnlyAdmin):
    list_display = ("id", "attempt", "refund_key", "state", "amount", "currency", "tries", "provider_refund_id")
    list_filter = ("state",)
    search_fields = ("refund_key", "provider_refund_id")


@admin.register(ProviderEvent)
class ProviderEventAdmin(ReadOnlyAdmin):
    list_display = ("id", "provider", "event_id", "event_type", "result", "deliveries", "received_at")
    list_filter = ("provider", "event_type", "result")
    search_fields = ("event_id",)


@admin.register(Discrepancy)
class DiscrepancyAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "state", "attempt", "refund", "provider_object_id", "proposed_repair",
                    "last_seen_at")
    list_filter = ("state", "kind")

"""Read-only admin views: state moves only through the services (the console's repairs), never here."""

from django.contrib import admin

from .models import PrintJob, Station, UsageRecord, WebhookEndpoint


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(PrintJob)
class PrintJobAdmin(ReadOnly):
    list_display = ("id", "state", "station", "title", "content_type", "created_at", "entered_state_at")
    list_filter = ("state", "content_type")
    exclude = ("content",)


@admin.register(Station)
class StationAdmin(ReadOnly):
    list_display = ("id", "name", "active", "last_seen_at")
    exclude = ("secret_hash",)


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnly):
    list_display = ("job", "station", "copies", "content_bytes", "recorded_at")


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ReadOnly):
    list_display = ("id", "url", "active", "created_at")
    exclude = ("secret",)

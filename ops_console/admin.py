"""Django admin for the kernel's tables and every machine: read-only where state lives.

States change only through ``workflow.kernel.apply`` (console repairs, services); the admin never
offers a form that could write a state, a version or an append-only record.
"""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from workflow.machine import machines
from workflow.models import ApiKey, IdempotencyClaim, OutboxAttempt, OutboxItem, Timer, Transition


class ReadOnlyAdmin(admin.ModelAdmin):
    """View-only: no add, change or delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class StateMachineAdmin(ReadOnlyAdmin):
    """Base admin for a machine: read-only, with a link to its console page (where repairs live).
    Apps may subclass it; ``register_unregistered_machines`` uses it for every machine left unregistered."""

    list_display = ("id", "state", "state_version", "entered_state_at", "console_link")
    list_filter = ("state",)
    ordering = ("-id",)

    @admin.display(description="console")
    def console_link(self, obj):
        url = reverse("console:detail", args=[obj.aggregate_label(), obj.pk])
        return format_html('<a href="{}">open in console</a>', url)


@admin.register(OutboxItem)
class OutboxItemAdmin(StateMachineAdmin):
    list_display = (
        "id",
        "effect_type",
        "state",
        "attempts",
        "max_attempts",
        "next_attempt_at",
        "aggregate_type",
        "aggregate_id",
        "console_link",
    )
    list_filter = ("state", "effect_type")
    search_fields = ("effect_key", "effect_type")


@admin.register(OutboxAttempt)
class OutboxAttemptAdmin(ReadOnlyAdmin):
    list_display = ("id", "item", "number", "succeeded", "retryable", "started_at", "worker")
    list_filter = ("succeeded", "retryable")


@admin.register(Transition)
class TransitionAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "aggregate_type",
        "aggregate_id",
        "event_type",
        "from_state",
        "to_state",
        "result",
        "actor",
        "created_at",
    )
    list_filter = ("result", "aggregate_type", "event_type")
    search_fields = ("event_identity", "actor", "reason")


@admin.register(Timer)
class TimerAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "aggregate_type",
        "aggregate_id",
        "timer_type",
        "scheduled_at",
        "armed_state",
        "status",
        "result",
    )
    list_filter = ("status", "timer_type")


@admin.register(IdempotencyClaim)
class IdempotencyClaimAdmin(ReadOnlyAdmin):
    list_display = ("id", "scope", "key", "status", "response_status", "created_at")
    list_filter = ("status",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Keys are minted with ``manage.py create_api_key`` (the secret is shown once); here they can be
    renamed or deactivated, never given a new secret."""

    list_display = ("name", "prefix", "scopes", "active", "created_at", "last_used_at")
    readonly_fields = ("prefix", "secret_hash", "created_at", "last_used_at")
    fields = ("name", "prefix", "scopes", "active", "secret_hash", "created_at", "last_used_at")

    def has_add_permission(self, request, obj=None):
        return False


def register_unregistered_machines() -> None:
    """Every machine gets a read-only admin even if its app registered none."""
    for model in machines():
        if not admin.site.is_registered(model):
            admin.site.register(model, StateMachineAdmin)

"""Read-only admin: state changes go through services and the kernel, never through admin forms."""

from django.contrib import admin

from .models import Cart, Order, Product, Reservation


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Product)
class ProductAdmin(ReadOnlyAdmin):
    list_display = ("sku", "name", "unit_price", "currency", "stock_on_hand")
    search_fields = ("sku", "name")


@admin.register(Cart)
class CartAdmin(ReadOnlyAdmin):
    list_display = ("id", "state", "state_version", "entered_state_at", "order_id")
    list_filter = ("state",)


@admin.register(Reservation)
class ReservationAdmin(ReadOnlyAdmin):
    list_display = ("id", "product", "quantity", "state", "expires_at", "order_id")
    list_filter = ("state",)


@admin.register(Order)
class OrderAdmin(ReadOnlyAdmin):
    list_display = ("id", "state", "state_version", "entered_state_at", "total_amount", "currency",
                    "current_attempt_ref")
    list_filter = ("state",)

from .carts import cart_add_item, cart_create
from .catalog import product_create
from .checkout import Step, StepRegistry, checkout_place, default_steps
from .orders import (
                     order_apply_warehouse_event,
                     order_cancel,
                     order_resolve_review,
                     order_retry_refund,
                     order_start_payment_attempt,
)
from .reservations import reservations_commit, reservations_fulfill, reservations_hold, reservations_release

__all__ = [
    "Step", "StepRegistry", "cart_add_item", "cart_create", "checkout_place", "default_steps",
    "order_apply_warehouse_event", "order_cancel", "order_resolve_review", "order_retry_refund",
    "order_start_payment_attempt", "product_create", "reservations_commit", "reservations_fulfill",
    "reservations_hold", "reservations_release",
]

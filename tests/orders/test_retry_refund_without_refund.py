"""Retrying the refund of an order whose refund never reached payments answers a clean rejection.

`make run`'s demo data has such an order (refund_pending, refund key, no payments Refund yet); the
console's "Retry the refund" preview on it crashed with Refund.DoesNotExist (HTTP 500).
"""

from __future__ import annotations

import pytest

from orders.services import order_retry_refund
from tests.orders.samples import build_order
from workflow.errors import StateTransitionRejected
from workflow.models import Transition

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("dry_run", [True, False])
def test_no_refund_at_payments_is_rejected_and_nothing_is_written(settings, dry_run):
    # given an order waiting for a refund that payments never recorded
    settings.ORDERS_PAYMENT_PORT = "orders.payments_adapter.PaymentsAppPort"
    order = build_order("refund_pending")
    transitions = Transition.objects.count()

    # when an operator retries it (preview or submit)
    with pytest.raises(StateTransitionRejected) as rejected:
        order_retry_refund(order_id=order.pk, actor="user:olga", reason="customer chased us", dry_run=dry_run)

    # then the answer says why, and nothing was written
    assert order.refund_key in str(rejected.value) and rejected.value.details == {"refund_key": order.refund_key}
    assert Transition.objects.count() == transitions
    order.refresh_from_db()
    assert order.state == "refund_pending"

import pytest
from django.core.management import call_command

from orders.models import Order
from orders.selectors import invariant_violations

pytestmark = pytest.mark.django_db


def test_seed_demo_has_an_order_in_every_waiting_state_and_is_idempotent():
    call_command("seed_demo")
    call_command("seed_demo")

    states = set(Order.objects.values_list("state", flat=True))
    waiting = set(Order.WAIT_POLICIES)
    assert waiting <= states
    assert Order.objects.count() == 11
    assert invariant_violations() == []

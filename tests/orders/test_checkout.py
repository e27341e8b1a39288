"""The checkout saga over HTTP: happy path, out of stock, compensation at each step, the step
registry, Idempotency-Key behaviour, and 50 concurrent buyers for the last 10 units."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from orders.models import Cart, Order, Product, Reservation
from orders.services import checkout as checkout_module
from orders.services.checkout import Step, default_steps
from tests.orders.conftest import drain

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(make_api_client):
    client = make_api_client("catalog:write", "catalog:read", "carts:write", "checkout:write", "orders:read")
    r = client.post("/api/v1/products", {"sku": "LAMP-1", "name": "Lamp", "unit_price": 4200, "currency": "EUR",
                                         "stock_on_hand": 10}, format="json")
    assert r.status_code == 201, r.content
    return client


def new_cart(client, quantity=1, sku="LAMP-1") -> int:
    cart = client.post("/api/v1/carts", format="json").json()
    r = client.post(f"/api/v1/carts/{cart['id']}/items", {"sku": sku, "quantity": quantity}, format="json")
    assert r.status_code == 201, r.content
    return cart["id"]


def stock(sku="LAMP-1") -> int:
    return Product.objects.get(sku=sku).stock_on_hand


# --- catalog and carts ------------------------------------------------------------------------------
def test_product_create_and_read(shop):
    r = shop.get("/api/v1/products/LAMP-1")
    assert r.json() == {"sku": "LAMP-1", "name": "Lamp", "unit_price": 4200, "currency": "eur", "stock_on_hand": 10}
    assert shop.get("/api/v1/products/NOPE").json()["error"]["code"] == "E_NOT_FOUND"


def test_product_bad_input_writes_nothing(shop):
    for body in ({"sku": "X", "name": "X", "unit_price": 0, "currency": "eur", "stock_on_hand": 1},
                 {"sku": "X", "name": "X", "unit_price": 1, "currency": "eur", "stock_on_hand": -1},
                 {"sku": "LAMP-1", "name": "dup", "unit_price": 1, "currency": "eur", "stock_on_hand": 1}):
        r = shop.post("/api/v1/products", body, format="json")
        assert r.status_code == 400 and r.json()["error"]["code"] == "E_VALIDATION"
    assert Product.objects.count() == 1


def test_stock_cannot_go_negative_even_bypassing_the_guard(shop):
    from django.db import IntegrityError, transaction

    assert Product.take_stock(product_id=Product.objects.get().pk, quantity=11, now=None) is False
    with pytest.raises(IntegrityError), transaction.atomic():
        Product.objects.filter(sku="LAMP-1").update(stock_on_hand=-1)
    assert stock() == 10


def test_cart_items_add_up_and_are_refused_once_checked_out(shop):
    cart_id = new_cart(shop, 1)
    r = shop.post(f"/api/v1/carts/{cart_id}/items", {"sku": "LAMP-1", "quantity": 2}, format="json")
    assert r.json()["items"] == [{"sku": "LAMP-1", "quantity": 3, "unit_price": 4200}]
    assert shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json").status_code == 201

    r = shop.post(f"/api/v1/carts/{cart_id}/items", {"sku": "LAMP-1", "quantity": 1}, format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "E_STATE_TRANSITION"


# --- the saga ---------------------------------------------------------------------------------------
def test_checkout_places_order_holds_stock_and_starts_payment(shop):
    cart_id = new_cart(shop, 3)

    r = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")

    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["state"], body["version"]) == ("payment_pending", 2)
    assert (body["total_amount"], body["currency"]) == (12600, "eur")
    assert body["current_attempt"]["provider_ref"].startswith("pi_sim_")
    assert "cancel" in body["allowed_events"] and "payment_captured" in body["allowed_events"]
    assert [(x["quantity"], x["state"]) for x in body["reservations"]] == [(3, "held")]
    assert stock() == 7
    cart = Cart.objects.get(pk=cart_id)
    assert (cart.state, cart.order_id) == ("converted", body["id"])


def test_checkout_reprices_from_the_catalog(shop):
    cart_id = new_cart(shop, 2)
    Product.objects.filter(sku="LAMP-1").update(unit_price=5000)

    body = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json").json()

    assert body["total_amount"] == 10000 and body["lines"][0]["unit_price"] == 5000


def test_out_of_stock_is_409_and_nothing_is_held(shop):
    cart_id = new_cart(shop, 11)

    r = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")

    assert r.status_code == 409
    error = r.json()["error"]
    assert error["code"] == "E_OUT_OF_STOCK" and error["details"]["available"] == 10
    assert [c["step"] for c in error["details"]["compensation"]] == ["reserve_inventory", "lock_cart"]
    assert stock() == 10
    assert not Reservation.objects.exists() and not Order.objects.exists()
    assert Cart.objects.get(pk=cart_id).state == "active"


def _failing(step: Step) -> Step:
    def run(ctx):
        step.run(ctx)  # the step did its work (acquired its resource) and then the process "failed"
        raise RuntimeError(f"injected fault after {step.name}")

    return Step(step.name, run, step.compensate)


EXPECTED_COMPENSATION = {
    "validate_and_reprice": [],
    "lock_cart": ["lock_cart"],
    "reserve_inventory": ["reserve_inventory", "lock_cart"],
    "create_order": ["create_order", "reserve_inventory", "lock_cart"],
    "start_payment": ["start_payment", "create_order", "reserve_inventory", "lock_cart"],
    "finalize": ["start_payment", "create_order", "reserve_inventory", "lock_cart"],  # finalize undoes nothing
}


@pytest.mark.parametrize("failing_step", list(EXPECTED_COMPENSATION))
def test_compensation_at_each_step(shop, monkeypatch, port, failing_step):
    steps = default_steps()
    original = {s.name: s for s in steps}[failing_step]
    monkeypatch.setattr(checkout_module, "default_steps",
                        lambda: default_steps().replace(failing_step, _failing(original)))
    cart_id = new_cart(shop, 2)

    r = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")

    assert r.status_code == 422, r.content
    error = r.json()["error"]
    assert error["code"] == "E_WORKFLOW_FAILED"
    details = error["details"]
    assert details["failed_step"] == failing_step and "injected fault" in details["error"]
    assert [c["step"] for c in details["compensation"]] == EXPECTED_COMPENSATION[failing_step]
    assert all(c["ok"] for c in details["compensation"])
    drain()  # promised releases/voids of the unwound order
    assert stock() == 10
    assert not Reservation.objects.filter(state__in=Reservation.LIVE_STATES).exists()
    cart = Cart.objects.get(pk=cart_id)
    assert cart.state == ("converted" if failing_step == "finalize" else "active")
    orders = list(Order.objects.all())
    if failing_step in ("create_order", "start_payment", "finalize"):
        assert [o.state for o in orders] == ["checkout_failed"]
        assert orders[0].failure_report is not None
    else:
        assert orders == []
    if failing_step in ("start_payment", "finalize"):
        assert [a["status"] for a in port.attempts.values()] == ["voided"]


def test_step_registry_operations():
    names = default_steps().names()
    assert names == ["validate_and_reprice", "lock_cart", "reserve_inventory", "create_order", "start_payment",
                     "finalize"]
    noop = Step("audit_log", lambda ctx: None)
    assert default_steps().insert_before("lock_cart", noop).names()[1] == "audit_log"
    assert default_steps().insert_after("finalize", noop).names()[-1] == "audit_log"
    assert "start_payment" not in default_steps().remove("start_payment").names()
    assert default_steps().replace("finalize", Step("finalize", lambda ctx: None)).names() == names
    with pytest.raises(KeyError):
        default_steps().remove("nope")
    with pytest.raises(ValueError):
        default_steps().insert_after("finalize", Step("lock_cart", lambda ctx: None))


def test_an_added_step_runs_in_place_and_is_compensated(shop, monkeypatch):
    """A custom 'gift_wrap' step after reserve_inventory sees the held stock; when a later step fails,
    its own compensation runs in reverse order with the others."""
    seen = []

    def gift_wrap(ctx):
        seen.append(("wrap", [r.quantity for r in ctx.reservations], ctx.order))
        ctx.extra["wrapped"] = True

    def unwrap(ctx):
        seen.append(("unwrap",))
        return "gift wrap cancelled"

    def boom(ctx):
        raise RuntimeError("provider down")

    def steps():
        return (default_steps().insert_after("reserve_inventory", Step("gift_wrap", gift_wrap, unwrap))
                .replace("start_payment", Step("start_payment", boom)))

    monkeypatch.setattr(checkout_module, "default_steps", steps)
    cart_id = new_cart(shop, 1)

    r = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")

    assert r.status_code == 422
    assert [c["step"] for c in r.json()["error"]["details"]["compensation"]] == [
        "create_order", "gift_wrap", "reserve_inventory", "lock_cart"]
    assert seen == [("wrap", [1], None), ("unwrap",)]


# --- idempotency --------------------------------------------------------------------------------------
def test_same_key_same_body_returns_the_stored_order(shop):
    cart_id = new_cart(shop, 1)
    headers = {"HTTP_IDEMPOTENCY_KEY": "k-1"}

    first = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json", **headers)
    second = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json", **headers)

    assert first.status_code == second.status_code == 201
    assert second.json()["id"] == first.json()["id"] and second["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1 and stock() == 9


def test_same_key_different_body_is_a_conflict(shop):
    cart_a, cart_b = new_cart(shop, 1), new_cart(shop, 1)
    shop.post("/api/v1/checkout", {"cart_id": cart_a}, format="json", HTTP_IDEMPOTENCY_KEY="k-2")

    r = shop.post("/api/v1/checkout", {"cart_id": cart_b}, format="json", HTTP_IDEMPOTENCY_KEY="k-2")

    assert r.status_code == 409 and r.json()["error"]["code"] == "E_IDEMPOTENCY_CONFLICT"
    assert Order.objects.count() == 1 and Cart.objects.get(pk=cart_b).state == "active"


def test_no_key_derives_one_from_the_cart(shop):
    cart_id = new_cart(shop, 1)

    first = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")
    second = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")

    assert second.json()["id"] == first.json()["id"] and second["Idempotent-Replayed"] == "true"
    assert Order.objects.count() == 1


def test_retry_after_an_unwound_checkout_runs_again(shop):
    cart_id = new_cart(shop, 11)
    assert shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json").status_code == 409
    Product.objects.filter(sku="LAMP-1").update(stock_on_hand=20)  # restocked

    r = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")

    assert r.status_code == 201 and stock() == 9


@pytest.mark.django_db(transaction=True)
def test_concurrent_same_key_gets_retry_later(shop, monkeypatch, make_api_client):
    entered, release = threading.Event(), threading.Event()

    def hold(ctx):
        entered.set()
        release.wait(20)

    monkeypatch.setattr(checkout_module, "default_steps",
                        lambda: default_steps().insert_after("lock_cart", Step("slow", hold)))
    cart_id = new_cart(shop, 1)
    results = {}

    def first():
        try:
            results["first"] = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json",
                                         HTTP_IDEMPOTENCY_KEY="k-3")
        finally:
            connection.close()

    t = threading.Thread(target=first)
    t.start()
    assert entered.wait(20)
    second = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json", HTTP_IDEMPOTENCY_KEY="k-3")
    release.set()
    t.join()

    assert second.status_code == 409
    assert second.json()["error"]["code"] == "E_IDEMPOTENCY_IN_PROGRESS" and second["Retry-After"]
    assert results["first"].status_code == 201
    third = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json", HTTP_IDEMPOTENCY_KEY="k-3")
    assert third.json()["id"] == results["first"].json()["id"]
    assert Order.objects.count() == 1


# --- the last 10 units ---------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_checkouts_for_the_last_ten_units(shop):
    carts = [new_cart(shop, 1) for _ in range(50)]
    barrier = threading.Barrier(50)
    statuses: list[tuple[int, str]] = []
    lock = threading.Lock()

    def buy(cart_id):
        try:
            barrier.wait()
            r = shop.post("/api/v1/checkout", {"cart_id": cart_id}, format="json")
            code = r.json().get("error", {}).get("code", "") if r.status_code != 201 else ""
            with lock:
                statuses.append((r.status_code, code))
        finally:
            connection.close()

    threads = [threading.Thread(target=buy, args=(c,)) for c in carts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert sorted(statuses) == [(201, "")] * 10 + [(409, "E_OUT_OF_STOCK")] * 40
    assert Order.objects.count() == 10 and stock() == 0
    assert Reservation.objects.filter(state="held").count() == 10
    assert Cart.objects.filter(state="converted").count() == 10 and Cart.objects.filter(state="active").count() == 40

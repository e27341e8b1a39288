"""REST endpoints for catalog, carts, checkout and orders: input/output serializers, one service call."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from workflow.auth import actor_for
from workflow.errors import NotFound
from workflow.idempotency import run_idempotent
from workflow.inputs import MAX_ID, MAX_INT32, StrictBooleanField, StrictInput, require_no_body

from . import selectors
from .models import Cart
from .payment_port import get_port
from .services import (
    cart_add_item,
    cart_create,
    checkout_place,
    order_apply_warehouse_event,
    order_cancel,
    order_start_payment_attempt,
    product_create,
)


# --- catalog -------------------------------------------------------------------------------------
class ProductOut(serializers.Serializer):
    sku = serializers.CharField()
    name = serializers.CharField()
    unit_price = serializers.IntegerField()
    currency = serializers.CharField()
    stock_on_hand = serializers.IntegerField()


class ProductCreateApi(APIView):
    required_scopes = "catalog:write"

    @extend_schema_serializer(component_name="ProductCreateInput")
    class InputSerializer(StrictInput):
        sku = serializers.RegexField(r"^[A-Za-z0-9._-]{1,64}$")
        name = serializers.CharField(max_length=200)
        unit_price = serializers.IntegerField(min_value=1, max_value=10**15)
        currency = serializers.RegexField(r"^[A-Za-z]{3}$")
        stock_on_hand = serializers.IntegerField(min_value=0, max_value=MAX_INT32)

    @extend_schema(request=InputSerializer, responses={201: ProductOut})
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        product = product_create(**data.validated_data)
        return Response(ProductOut(product).data, status=201)


class ProductDetailApi(APIView):
    required_scopes = "catalog:read"

    @extend_schema(responses={200: ProductOut})
    def get(self, request, sku: str):
        product = selectors.product_get(sku=sku)
        if product is None:
            raise NotFound(f"product {sku!r} not found")
        return Response(ProductOut(product).data)


# --- carts ---------------------------------------------------------------------------------------
class CartOut(serializers.Serializer):
    id = serializers.IntegerField()
    state = serializers.CharField()
    version = serializers.IntegerField(source="state_version")
    currency = serializers.CharField()
    order_id = serializers.IntegerField(allow_null=True)
    items = serializers.SerializerMethodField()

    def get_items(self, cart) -> list[dict]:
        return [{"sku": i.product.sku, "quantity": i.quantity, "unit_price": i.product.unit_price}
                for i in cart.items.select_related("product").order_by("id")]


class CartCreateApi(APIView):
    required_scopes = "carts:write"

    @extend_schema(request=None, responses={201: CartOut})
    def post(self, request):
        require_no_body(request)
        cart = cart_create(actor=actor_for(request))
        return Response(CartOut(cart).data, status=201)


class CartItemAddApi(APIView):
    required_scopes = "carts:write"

    @extend_schema_serializer(component_name="CartItemAddInput")
    class InputSerializer(StrictInput):
        sku = serializers.CharField(max_length=64)
        quantity = serializers.IntegerField(min_value=1, max_value=10_000)

    @extend_schema(request=InputSerializer, responses={201: CartOut})
    def post(self, request, cart_id: int):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        cart = cart_add_item(cart_id=cart_id, actor=actor_for(request), **data.validated_data)
        cart = Cart.objects.get(pk=cart.pk)  # not refresh_from_db: django-fsm's refresh is not thread-safe
        return Response(CartOut(cart).data, status=201)


# --- orders --------------------------------------------------------------------------------------
class OutcomeOut(serializers.Serializer):
    result = serializers.CharField()
    state = serializers.CharField()
    version = serializers.IntegerField()
    transition_id = serializers.IntegerField(allow_null=True)
    replayed = serializers.BooleanField()
    detail = serializers.CharField(allow_blank=True)


def _current_attempt(order) -> dict | None:
    if not order.current_attempt_ref:
        return None
    body = {"id": order.current_attempt_id, "ref": order.current_attempt_ref,
            "provider_ref": order.current_provider_ref or None, "number": order.attempt_count, "state": None}
    port = get_port()
    if hasattr(port, "describe"):  # the payments app knows the provider's reference once the intent exists
        live = port.describe(attempt_ref=order.current_attempt_ref)
        body.update(provider_ref=live.get("provider_ref") or body["provider_ref"], state=live.get("state"))
    return body


def order_body(order) -> dict:
    reservations = selectors.order_reservations(order)
    return {
        "id": order.pk,
        "state": order.state,
        "version": order.state_version,
        "entered_state_at": order.entered_state_at.isoformat(),
        "created_at": order.created_at.isoformat(),
        "currency": order.currency,
        "total_amount": order.total_amount,
        "lines": order.lines,
        "current_attempt": _current_attempt(order),
        "capture": None if not order.capture_ref else {
            "ref": order.capture_ref, "amount": order.captured_amount, "attempt_ref": order.captured_attempt_ref},
        "refund": None if not order.refund_key else {
            "key": order.refund_key, "ref": order.refund_ref, "amount": order.refunded_amount},
        "allowed_events": order.allowed_events(),
        "owed_work": [{"effect_type": i.effect_type, "effect_key": i.effect_key, "state": i.state,
                       "attempts": i.attempts, "max_attempts": i.max_attempts,
                       "next_attempt_at": i.next_attempt_at.isoformat(), "last_error": i.last_error}
                      for i in selectors.order_owed_work(order)],
        "timers": [{"type": t.timer_type, "scheduled_at": t.scheduled_at.isoformat()}
                   for t in selectors.order_pending_timers(order)],
        "reservations": [{"id": r.pk, "sku": r.product.sku, "quantity": r.quantity, "state": r.state,
                          "expires_at": r.expires_at.isoformat()} for r in reservations],
        "review_reason": order.review_reason,
        "attention": order.attention,
        "failure_report": order.failure_report,
        "tracking_ref": order.tracking_ref,
    }


class CheckoutApi(APIView):
    required_scopes = "checkout:write"

    @extend_schema_serializer(component_name="CheckoutInput")
    class InputSerializer(StrictInput):
        cart_id = serializers.IntegerField(min_value=1, max_value=MAX_ID)

    @extend_schema(request=InputSerializer, responses={201: dict})
    def post(self, request):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        cart_id = data.validated_data["cart_id"]
        cart = Cart.objects.filter(pk=cart_id).first()
        if cart is None:
            raise NotFound(f"cart {cart_id} not found")
        default_key = cart.default_checkout_key()

        def command() -> Response:
            key = request.headers.get("Idempotency-Key") or default_key
            order = checkout_place(cart_id=cart_id, checkout_key=f"{actor_for(request)}|{key}"[:255],
                                   actor=actor_for(request))
            order = type(order).objects.get(pk=order.pk)  # a fresh read (refresh_from_db is not thread-safe)
            return Response(order_body(order), status=201, headers={"Location": f"/api/v1/orders/{order.pk}"})

        return run_idempotent(request, scope="orders.checkout", command=command, default_key=default_key)


def _order_or_404(order_id: int):
    order = selectors.order_get(order_id=order_id)
    if order is None:
        raise NotFound(f"order {order_id} not found")
    return order


class OrderDetailApi(APIView):
    required_scopes = "orders:read"

    @extend_schema(responses={200: dict})
    def get(self, request, order_id: int):
        return Response(order_body(_order_or_404(order_id)))


class OrderHistoryApi(APIView):
    required_scopes = "orders:read"

    @extend_schema(responses={200: dict})
    def get(self, request, order_id: int):
        order = _order_or_404(order_id)
        return Response({"order_id": order.pk, "transitions": [
            {"id": t.pk, "event_type": t.event_type, "identity": t.event_identity, "result": t.result,
             "from_state": t.from_state, "to_state": t.to_state, "from_version": t.from_version,
             "to_version": t.to_version, "detail": t.detail, "actor": t.actor, "reason": t.reason,
             "payload": t.payload, "created_at": t.created_at.isoformat()}
            for t in selectors.order_history(order)]})


def _outcome_response(outcome, *, success_status: int = 200) -> Response:
    from workflow.errors import StateTransitionRejected

    if not outcome.accepted and outcome.result != "needs_review":
        raise StateTransitionRejected(f"{outcome.result}: {outcome.detail}", details={"outcome": outcome.as_dict()})
    return Response(outcome.as_dict(), status=success_status)


class OrderCancelApi(APIView):
    required_scopes = "orders:write"

    @extend_schema_serializer(component_name="OrderCancelInput")
    class InputSerializer(StrictInput):
        reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")

    @extend_schema(request=InputSerializer, responses={200: OutcomeOut})
    def post(self, request, order_id: int):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)  # before the idempotency claim: bad input leaves no trace

        def command() -> Response:
            _order_or_404(order_id)
            outcome = order_cancel(order_id=order_id, actor=actor_for(request),
                                   reason=data.validated_data["reason"])
            return _outcome_response(outcome)

        return run_idempotent(request, scope="orders.cancel", command=command)


class OrderPaymentAttemptApi(APIView):
    required_scopes = "orders:write"

    @extend_schema(request=None, responses={201: dict})
    def post(self, request, order_id: int):
        require_no_body(request)

        def command() -> Response:
            _order_or_404(order_id)
            key = request.headers.get("Idempotency-Key") or "no-key"
            outcome = order_start_payment_attempt(order_id=order_id, idempotency_key=key, actor=actor_for(request))
            if not outcome.accepted:
                return _outcome_response(outcome)
            order = _order_or_404(order_id)
            return Response({"outcome": outcome.as_dict(), "order": order_body(order)}, status=201)

        return run_idempotent(request, scope="orders.payment_attempts", command=command)


class OrderEventApi(APIView):
    required_scopes = "orders:events"

    @extend_schema_serializer(component_name="OrderEventInput")
    class InputSerializer(StrictInput):
        type = serializers.CharField(max_length=64)
        identity = serializers.CharField(max_length=255)
        payload = serializers.DictField(required=False, default=dict)
        dry_run = StrictBooleanField(default=False)

    @extend_schema(request=InputSerializer, responses={200: OutcomeOut})
    def post(self, request, order_id: int):
        data = self.InputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        outcome = order_apply_warehouse_event(order_id=order_id, event_type=v["type"], identity=v["identity"],
                                              payload=v["payload"], actor=actor_for(request), dry_run=v["dry_run"])
        # Every classified event is an answer (the contract's outcome body), including rejections.
        return Response(outcome.as_dict())



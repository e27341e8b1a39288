from django.urls import path

from . import api

urlpatterns = [
    path("products", api.ProductCreateApi.as_view(), name="product-create"),
    path("products/<str:sku>", api.ProductDetailApi.as_view(), name="product-detail"),
    path("carts", api.CartCreateApi.as_view(), name="cart-create"),
    path("carts/<id:cart_id>/items", api.CartItemAddApi.as_view(), name="cart-item-add"),
    path("checkout", api.CheckoutApi.as_view(), name="checkout"),
    path("orders/<id:order_id>", api.OrderDetailApi.as_view(), name="order-detail"),
    path("orders/<id:order_id>/history", api.OrderHistoryApi.as_view(), name="order-history"),
    path("orders/<id:order_id>/cancel", api.OrderCancelApi.as_view(), name="order-cancel"),
    path("orders/<id:order_id>/payment-attempts", api.OrderPaymentAttemptApi.as_view(), name="order-payment-attempts"),
    path("orders/<id:order_id>/events", api.OrderEventApi.as_view(), name="order-events"),
]

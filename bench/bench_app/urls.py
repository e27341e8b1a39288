from django.urls import path

from . import views

urlpatterns = [
    path("bench-webhooks/orders", views.BenchOrderWebhookApi.as_view()),
]

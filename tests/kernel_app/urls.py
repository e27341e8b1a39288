from django.urls import include, path

from . import views

urlpatterns = [
    path("api/v1/test-parcels", views.ParcelCreateApi.as_view()),
    path("api/v1/test-parcels/<id:parcel_id>/events", views.ParcelEventApi.as_view()),
    path("", include("config.urls")),
]

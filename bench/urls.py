from django.urls import include, path

urlpatterns = [
    path("api/v1/", include("bench.bench_app.urls")),
    path("", include("config.urls")),
]

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from workflow import api as workflow_api

handler404 = "workflow.http.json_not_found"
handler500 = "workflow.http.json_server_error"

api_v1 = [
    path("schema", SpectacularAPIView.as_view(), name="schema"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("", include("orders.urls")),
]

urlpatterns = [
    path("healthz", workflow_api.healthz, name="healthz"),
    path("readyz", workflow_api.readyz, name="readyz"),
    path("api/v1/", include(api_v1)),
    path("api/v1/", include("payments.urls")),
    path("api/v1/", include("printing.urls")),
    path("admin/", admin.site.urls),
    path("console/", include("ops_console.urls")),
]

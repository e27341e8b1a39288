from django.contrib.auth import views as auth_views
from django.urls import path

from . import views

app_name = "console"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="ops_console/login.html", redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="console:login"), name="logout"),
    path("", views.dashboard, name="dashboard"),
    path("waiting/", views.waiting, name="waiting"),
    path("search/", views.search, name="search"),
    path("diagrams/", views.diagram_list, name="diagrams"),
    path("diagrams/<str:label>.svg", views.diagram_svg, name="diagram-svg"),
    path("outbox/dead/", views.dead_letters, name="dead-letters"),
    path("outbox/dead/requeue/", views.bulk_requeue, name="bulk-requeue"),
    path("pages/<slug:slug>/", views.plugin_page, name="page"),
    path("did-it-print/", views.plugin_page, {"slug": "did-it-print"}, name="did-it-print"),
    path("<str:label>/<id:pk>/", views.detail, name="detail"),
    path("<str:label>/<id:pk>/repair/<slug:key>/", views.repair, name="repair"),
]

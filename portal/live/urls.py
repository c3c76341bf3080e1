from django.urls import path

from portal.live import views

app_name = "live"

urlpatterns = [
    path("fleet/state/", views.fleet_state, name="fleet_state"),
]

from django.urls import path

from portal.wear import views

app_name = "wear"

urlpatterns = [path("", views.FleetWearView.as_view(), name="fleet")]

from django.urls import path

from portal.jobs import views

app_name = "jobs"

urlpatterns = [
    path("", views.JobListView.as_view(), name="list"),
    path("<path:key>/", views.JobView.as_view(), name="job"),
]

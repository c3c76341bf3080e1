from django.urls import path

from portal.remote_write import views

app_name = "remote_write"

urlpatterns = [
    path("", views.SourcesView.as_view(), name="sources"),
    path("<int:pk>/revoke/", views.RevokeView.as_view(), name="revoke"),
]

from django.urls import path

from portal.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("hosts/<str:hostname>/tokens/new/", views.HostTokenCreateView.as_view(), name="token_create"),
    path("hosts/<str:hostname>/tokens/<int:pk>/revoke/", views.HostTokenRevokeView.as_view(), name="token_revoke"),
]

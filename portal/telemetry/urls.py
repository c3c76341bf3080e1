from django.urls import path

import portal.core.converters  # noqa: F401 - registers <segment:…>
from portal.telemetry import views

app_name = "telemetry"

urlpatterns = [
    path("hosts/<segment:hostname>/tokens/new/", views.HostTokenCreateView.as_view(), name="token_create"),
    path("hosts/<segment:hostname>/tokens/<int:pk>/revoke/", views.HostTokenRevokeView.as_view(), name="token_revoke"),
]

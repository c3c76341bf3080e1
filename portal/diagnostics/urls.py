from django.urls import path

import portal.core.converters  # noqa: F401 - registers <segment:…>
from portal.diagnostics import views

app_name = "diagnostics"

urlpatterns = [
    path("hosts/<segment:hostname>/request", views.DiagnosticRequestView.as_view(), name="request"),
]

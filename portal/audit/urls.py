from django.urls import path

from portal.audit import views

app_name = "audit"

urlpatterns = [path("", views.AuditLogView.as_view(), name="log")]

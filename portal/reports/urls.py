from django.urls import path

from portal.reports import views

app_name = "reports"

urlpatterns = [
    path("reliability", views.ReliabilityView.as_view(), name="reliability"),
    path("usage", views.UsageView.as_view(), name="usage"),
    path("gpus/<segment:uuid>/repairs", views.GpuRepairHistoryView.as_view(), name="gpu_repairs"),
    path("gpus/<segment:uuid>/rma.json", views.RmaJsonView.as_view(), name="rma_json"),
    path("gpus/<segment:uuid>/rma.pdf", views.RmaPdfView.as_view(), name="rma_pdf"),
]

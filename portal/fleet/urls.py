from django.urls import path

import portal.core.converters  # noqa: F401 - registers <segment:…>
from portal.fleet import records_views, views

app_name = "fleet"

urlpatterns = [
    path("", views.FleetView.as_view(), name="fleet"),
    path("search/", views.SearchView.as_view(), name="search"),
    path("hosts/new/", views.HostCreateView.as_view(), name="host_create"),
    path("hosts/<segment:hostname>/", views.HostDetailView.as_view(), name="host"),
    path("hosts/<segment:hostname>/gpus/", views.HostGpusView.as_view(), name="host_gpus"),
    path("hosts/<segment:hostname>/edit/", views.HostEditView.as_view(), name="host_edit"),
    path("hosts/<segment:hostname>/delete/", views.HostDeleteView.as_view(), name="host_delete"),
    path("hosts/<segment:hostname>/records/new/", views.RecordCreateView.as_view(), name="host_record_create"),
    path("gpus/new/", views.GpuCreateView.as_view(), name="gpu_create"),
    path("gpus/<segment:uuid>/", views.GpuDetailView.as_view(), name="gpu"),
    path("gpus/<segment:uuid>/edit/", views.GpuEditView.as_view(), name="gpu_edit"),
    path("gpus/<segment:uuid>/delete/", views.GpuDeleteView.as_view(), name="gpu_delete"),
    path("gpus/<segment:uuid>/records/new/", views.RecordCreateView.as_view(), name="gpu_record_create"),
    path("records/", records_views.RecordListView.as_view(), name="records"),
    path("records/import/", records_views.RecordImportView.as_view(), name="records_import"),
    path("records/<int:pk>/", views.RecordDetailView.as_view(), name="record"),
    path("records/<int:pk>/edit/", views.RecordEditView.as_view(), name="record_edit"),
    path("records/<int:pk>/delete/", views.RecordDeleteView.as_view(), name="record_delete"),
    path("attachments/<int:pk>/", views.AttachmentDownloadView.as_view(), name="attachment"),
]

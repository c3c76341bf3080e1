from django.contrib import admin

from portal.fleet.models import Attachment, Gpu, Host, MaintenanceRecord


class GpuInline(admin.TabularInline):
    model = Gpu
    fields = ("index", "uuid", "model_name", "serial", "status")
    extra = 0
    show_change_link = True


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("hostname", "location", "rack", "owner", "status", "driver_version", "dropped_batches")
    list_filter = ("status", "location")
    search_fields = ("hostname", "location", "owner")
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("uuid", "host", "index", "model_name", "serial", "status", "warranty_end")
    list_filter = ("status", "model_name")
    search_fields = ("uuid", "serial", "host__hostname")
    list_select_related = ("host",)


class AttachmentInline(admin.TabularInline):
    model = Attachment
    fields = ("original_name", "content_type", "size_bytes", "uploaded_by", "uploaded_at")
    readonly_fields = fields
    extra = 0


@admin.register(MaintenanceRecord)
class MaintenanceRecordAdmin(admin.ModelAdmin):
    list_display = ("performed_at", "kind", "host", "gpu", "performed_by")
    list_filter = ("kind",)
    search_fields = ("host__hostname", "gpu__uuid", "gpu__serial", "notes", "rma_number")
    list_select_related = ("host", "gpu")
    date_hierarchy = "performed_at"
    inlines = [AttachmentInline]

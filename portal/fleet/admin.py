from django.contrib import admin

from portal.fleet.models import Attachment, Gpu, Host, MaintenanceRecord
from portal.fleet.services import host_inventory_changed


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

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        if formset.model is Gpu:
            host_inventory_changed(host_ids=[form.instance.pk])


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("uuid", "host", "index", "model_name", "serial", "status", "warranty_end")
    list_filter = ("status", "model_name")
    search_fields = ("uuid", "serial", "host__hostname")
    list_select_related = ("host",)

    # The admin writes GPUs without the services: tell ingest's cache (old and new host).
    def save_model(self, request, obj, form, change):
        old_host_id = Gpu.objects.filter(pk=obj.pk).values_list("host_id", flat=True).first() if change else None
        super().save_model(request, obj, form, change)
        host_inventory_changed(host_ids={obj.host_id, old_host_id} - {None})

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        host_inventory_changed(host_ids=[obj.host_id])

    def delete_queryset(self, request, queryset):
        host_ids = set(queryset.values_list("host_id", flat=True))
        super().delete_queryset(request, queryset)
        host_inventory_changed(host_ids=host_ids)


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

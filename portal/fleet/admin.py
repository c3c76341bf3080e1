from django import forms
from django.contrib import admin

from portal.core.errors import ApplicationError
from portal.fleet import hooks
from portal.fleet.models import Attachment, Gpu, GpuStatusChange, GpuSwap, Host, MaintenanceRecord
from portal.fleet.services import (
    gpu_status_change_check,
    gpu_status_history_start,
    gpu_status_refusal_keep,
    gpu_status_set,
    host_inventory_changed,
)


class GpuInline(admin.StackedInline):  # a tabular inline leaves its inputs without labels (WCAG 1.3.1)
    model = Gpu
    fields = ("index", "uuid", "model_name", "serial", "status")
    # A status change goes through gpu_status_set (its history); change it on the GPU's own page.
    readonly_fields = ("status",)
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
            for gpu in formset.new_objects:
                gpu_status_history_start(gpu=gpu, user=request.user, source=GpuStatusChange.Source.ADMIN)
            host_inventory_changed(host_ids=[form.instance.pk])


class GpuAdminForm(forms.ModelForm):
    """A status change here follows the same rules as elsewhere (gpu_status_change_check: a return
    to service needs a passed diagnostic, leaving `retired` an admin; forcing a return is the GPU
    page's edit form or the API's `force`): refused on the form, and the refusal kept in the audit
    trail (the admin's own transaction commits a form shown again with its errors)."""

    class Meta:
        model = Gpu
        fields = "__all__"  # noqa: DJ007 - the admin shows what ModelAdmin.fields/fieldsets say

    request_user = None  # GpuAdmin.get_form sets who is asking

    def clean_status(self):
        status = self.cleaned_data.get("status")
        stored = Gpu.objects.filter(pk=self.instance.pk).first()
        if stored is None or status == stored.status:
            return status
        try:
            gpu_status_change_check(
                gpu=stored, status=status, user=self.request_user, source=GpuStatusChange.Source.ADMIN
            )
        except ApplicationError as refused:
            gpu_status_refusal_keep(error=refused)
            raise forms.ValidationError(refused.message) from None
        return status


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    form = GpuAdminForm
    list_display = ("uuid", "host", "index", "model_name", "serial", "status", "warranty_end")
    list_filter = ("status", "model_name")
    search_fields = ("uuid", "serial", "host__hostname")
    list_select_related = ("host",)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"request_user": request.user})

    # The admin writes GPUs without the services: tell ingest's cache (old and new host), and
    # send a status change through gpu_status_set so the GPU's history keeps it.
    def save_model(self, request, obj, form, change):
        old = Gpu.objects.filter(pk=obj.pk).values("host_id", "status").first() if change else None
        new_status = obj.status
        if old is not None:
            obj.status = old["status"]
        super().save_model(request, obj, form, change)
        if old is None:
            gpu_status_history_start(gpu=obj, user=request.user, source=GpuStatusChange.Source.ADMIN)
        elif new_status != old["status"]:
            gpu_status_set(gpu=obj, status=new_status, user=request.user, source=GpuStatusChange.Source.ADMIN)
        host_inventory_changed(host_ids={obj.host_id, old and old["host_id"]} - {None})

    def delete_model(self, request, obj):
        super().delete_model(request, obj)
        host_inventory_changed(host_ids=[obj.host_id])

    def delete_queryset(self, request, queryset):
        host_ids = set(queryset.values_list("host_id", flat=True))
        super().delete_queryset(request, queryset)
        host_inventory_changed(host_ids=host_ids)


class GpuStatusChangeInline(admin.TabularInline):
    model = GpuStatusChange
    fields = ("changed_at", "from_status", "to_status", "changed_by", "source", "override", "reason")
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


GpuAdmin.inlines = [GpuStatusChangeInline]


class AttachmentInline(admin.StackedInline):  # labelled, as GpuInline
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

    # The admin writes records without the services: tell the apps that react to a saved record.
    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        hooks.record_saved.call(record=obj)


@admin.register(GpuSwap)
class GpuSwapAdmin(admin.ModelAdmin):
    """Read-only: ingest records swaps (fleet.swaps), which also retire the old GPU."""

    list_display = ("swapped_at", "host", "pci_bus_id", "old_gpu", "new_gpu", "repair")
    search_fields = ("host__hostname", "pci_bus_id", "old_gpu__serial", "new_gpu__serial", "old_gpu__uuid")
    list_select_related = ("host", "old_gpu__host", "new_gpu__host", "repair__host", "repair__gpu")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

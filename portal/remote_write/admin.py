from django.contrib import admin, messages
from django.utils.translation import gettext as _

from portal.remote_write.models import IngestSource
from portal.remote_write.services.sources import ingest_source_issue, ingest_source_revoke


@admin.register(IngestSource)
class IngestSourceAdmin(admin.ModelAdmin):
    list_display = ("name", "hosts", "prefix", "last_write_at", "samples_stored", "samples_skipped",
                    "samples_dropped", "revoked_at")  # fmt: skip
    fields = ("name", "hosts")
    readonly_fields = ("prefix", "last_write_at", "samples_stored", "samples_skipped", "samples_dropped", "revoked_at")
    actions = ["revoke"]

    def get_fields(self, request, obj=None):
        return ("name", "hosts") if obj is None else ("name", "hosts", *self.readonly_fields)

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        # A new source goes through the service: the token is made there and shown here once.
        issued = ingest_source_issue(name=obj.name, hosts=obj.hosts, created_by=request.user)
        obj.pk = issued.record.pk
        obj.refresh_from_db()
        messages.warning(request, _("The source's token, shown once: %(token)s") % {"token": issued.token})

    @admin.action(description="Revoke the selected sources' tokens")
    def revoke(self, request, queryset):
        for source in queryset:
            ingest_source_revoke(source=source)

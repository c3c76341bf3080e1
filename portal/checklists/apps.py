from django.apps import AppConfig


class ChecklistsConfig(AppConfig):
    name = "portal.checklists"
    label = "checklists"
    verbose_name = "Checklists"

    def ready(self):
        from auditlog.registry import auditlog

        from portal.checklists import messages, panels  # noqa: F401 - messages and panels register themselves
        from portal.checklists.models import (
            ChecklistAnswer,
            ChecklistPhoto,
            ChecklistRun,
            ChecklistTemplate,
            TemplateItem,
        )

        def own_fields(model, exclude=()):
            return [f.name for f in model._meta.concrete_fields if f.name not in exclude]

        # Every run in the audit trail: who started, answered, signed or abandoned it, and when.
        auditlog.register(ChecklistRun, include_fields=own_fields(ChecklistRun, exclude=["items"]))
        # The answer's name says which item it is (its label, ChecklistAnswer.__str__): no key row.
        auditlog.register(ChecklistAnswer, include_fields=own_fields(ChecklistAnswer, exclude=["item_key"]))
        auditlog.register(ChecklistPhoto, include_fields=own_fields(ChecklistPhoto, exclude=["file"]))
        auditlog.register(ChecklistTemplate, include_fields=own_fields(ChecklistTemplate))
        auditlog.register(TemplateItem, include_fields=own_fields(TemplateItem))

"""What the people and agents of the browser tests' portal typed: host names, GPU models and
serials, notes, user names, comments … Runs inside that portal's database (`manage.py shell`,
see `print_data`). The Chinese page walk (test_chinese_pages.py) does not count such text as
untranslated interface text, wherever a page shows it.

Listed model by model, on purpose: interface text the portal stores (ticket titles, checklist
template names and labels) is not data and must be translated, so a new model or field is data
only once it is named here."""

import json

DATA_FIELDS = {
    "auth.User": ["username", "first_name", "last_name", "email"],
    "accounts.ApiToken": ["label", "prefix"],
    "telemetry.HostToken": ["label", "prefix"],
    "fleet.Host": ["hostname", "location", "rack", "owner", "contact", "notes", "slurm_node", "agent_version",
                   "driver_version", "cuda_driver_version", "nvml_version"],
    "fleet.Gpu": ["uuid", "serial", "model_name", "pci_bus_id", "vbios_version", "notes"],
    "fleet.GpuStatusChange": ["reason"],
    "fleet.MaintenanceRecord": ["performed_by", "notes", "part_used", "from_version", "to_version", "vendor",
                                "rma_number", "parts", "destination"],
    "fleet.Attachment": ["original_name"],
    "maintenance.Ticket": ["fingerprint", "rule"],
    "maintenance.TicketComment": ["body"],
    "maintenance.Silence": ["comment"],
    "maintenance.Subscription": ["target"],
    "checklists.ChecklistRun": ["signature", "abandoned_reason"],
    "checklists.ChecklistAnswer": ["note", "value"],
    "checklists.ChecklistPhoto": ["original_name"],
    "scheduler.SchedulerAction": ["node", "last_error"],
    "enrolment.EnrolmentCode": ["prefix", "hostname"],
    "enrolment.EnrolmentAttempt": ["address", "hostname"],
}  # fmt: skip


def data_strings() -> list[str]:
    from django.apps import apps

    found: set[str] = set()
    for label, fields in DATA_FIELDS.items():
        try:
            model = apps.get_model(label)
        except LookupError:
            continue
        present = [f for f in fields if any(field.name == f for field in model._meta.get_fields())]
        for row in model.objects.values_list(*present):
            for value in row:
                if isinstance(value, str):
                    found.update(line.strip() for line in value.splitlines() if line.strip())
    return sorted(found)


def print_data() -> None:
    print("DATA " + json.dumps(data_strings()))

"""The checklists shipped with the portal, from the practices of the article the portal grew
from (shared/seed/gpu-wear-and-maintenance): keep cooling clean and airflow good, keep drivers
current and connections seated, watch temperature and load, back up data and checkpoints, rest
the cards between long runs, get repairs done properly, overclock only with care.

The data is written out here (not imported from the app) so that this migration means the same
thing forever; admins edit the templates afterwards in the portal. Photo items are optional.
"""

from django.db import migrations

PF, CHECK, NUM, CHOICE, TEXT, PHOTO, AUTO = "pass_fail", "check", "number", "choice", "text", "photo", "auto"


def item(key, label, kind, *, required=True, help="", unit="", min=None, max=None, options=(), field="", auto="",
         params=None):  # fmt: skip
    return {
        "key": key, "label": label, "kind": kind, "required": required and kind not in (PHOTO, AUTO),
        "help_text": help, "unit": unit, "min_value": min, "max_value": max, "options": list(options),
        "record_field": field, "auto_check": auto, "params": params or {},
    }  # fmt: skip


TEMPLATES = [
    {
        "key": "cleaning", "name": "Cooling and dust cleaning", "record_kind": "cleaning", "applies_to": "gpu",
        "description": "Dust is the first enemy of a GPU under long training runs: clean heatsinks, fans and "
        "filters and keep the airflow path clear. The portal then checks that the cards really run cooler.",
        "items": [
            item("photo_before", "Photo before cleaning", PHOTO, help="The heatsink and fans as you found them."),
            item("dust_level", "Dust level found", CHOICE, options=["none", "light", "moderate", "heavy"],
                 field="dust_level", help="Look at the heatsink fins and the fan blades before you clean."),
            item("filters", "Dust filters cleaned or replaced", CHECK),
            item("fans_spin", "Fans spin freely (no grinding, wobble or stiff bearing)", PF,
                 help="Spin each fan by hand with the host powered off."),
            item("airflow_path", "Airflow path clear (intake and exhaust unobstructed, cables tidy)", PF,
                 field="airflow_ok"),
            item("heatsink_fins", "Heatsink fins clean and straight", PF),
            item("photo_after", "Photo after cleaning", PHOTO),
            item("cooler_after", "Cooler at equal power after the cleaning (≥ 3 °C)", AUTO, auto="cleaning_effect",
                 params={"min_drop_c": 3},
                 help="Judged by the portal from loaded readings after the cleaning against the week before, "
                 "compared at equal power draw."),
        ],
    },
    {
        "key": "connection_check", "name": "Connections and power", "record_kind": "connection_check",
        "applies_to": "gpu",
        "description": "Loose or heat-damaged connectors fail under sustained current: check every connector "
        "of each card.",
        "items": [
            item("power_connectors", "Power connectors seated and undamaged", PF, field="power_ok",
                 help="8-pin / 12VHPWR fully latched, no bent or burnt pins."),
            item("risers", "Risers seated, retention clips closed", PF, field="risers_ok"),
            item("cables", "PCIe and NVLink cables / bridges seated", PF, field="cables_ok"),
            item("discoloration", "No heat discoloration or melted plastic on connectors", PF),
            item("photo", "Photo of anything suspicious", PHOTO),
        ],
    },
    {
        "key": "driver_update", "name": "Driver and firmware update", "record_kind": "driver_update",
        "applies_to": "host",
        "description": "Keep the NVIDIA driver and firmware current, in a maintenance window, after reading the "
        "release notes.",
        "items": [
            item("current_version", "Current driver version", TEXT, field="from_version",
                 help="nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
            item("target_version", "Target driver version", TEXT, field="to_version"),
            item("release_notes", "Release notes read (known issues, CUDA compatibility)", CHECK),
            item("reboot", "Host rebooted after the update", CHECK),
            item("nvidia_smi", "nvidia-smi healthy: every GPU listed, no errors", PF),
            item("ecc", "No uncorrected ECC errors and no pending remap after the update", AUTO, auto="ecc_clean"),
        ],
    },
    {
        "key": "backup_verification", "name": "Backup verification", "record_kind": "backup", "applies_to": "host",
        "description": "Back up training data and model checkpoints so a GPU failure never loses work, and "
        "prove the backup by restoring from it.",
        "items": [
            item("content", "What was backed up", CHOICE, options=["training_data", "checkpoints", "both", "other"],
                 field="backup_content"),
            item("training_data", "Training data copied", CHECK),
            item("checkpoints", "Model checkpoints copied", CHECK),
            item("restore_tested", "A restore was tested (files read back and compared)", PF, field="verified"),
            item("destination", "Destination", TEXT, field="destination", help="e.g. nas01:/backups/node-a"),
            item("size", "Size", NUM, unit="GB", min=0, field="size_gb", required=False),
        ],
    },
    {
        "key": "pre_training", "name": "Before a long training run", "record_kind": "inspection",
        "applies_to": "gpu",
        "description": "Before days of training: cool at idle, fans working, memory clean, data backed up, and a "
        "plan that rests the cards and keeps checkpoints.",
        "items": [
            item("idle_temperature", "Idle temperature below 45 °C", AUTO, auto="idle_temperature",
                 params={"limit_c": 45}),
            item("fans", "Fans respond", AUTO, auto="fans_respond"),
            item("ecc", "No uncorrected ECC errors and no pending remap", AUTO, auto="ecc_clean"),
            item("backup", "A backup record in the last 7 days", AUTO, auto="recent_backup", params={"days": 7}),
            item("segments", "Training planned in segments with checkpoints (rest between segments)", CHECK),
            item("checkpoint_hours", "Checkpoint interval", NUM, unit="h", min=0.1, max=24, required=False),
            item("clocks", "Clocks and power limit at stock or a tested, moderate overclock", PF),
        ],
    },
    {
        "key": "repair_return", "name": "Repair return", "record_kind": "repair", "applies_to": "gpu",
        "description": "A GPU back from repair returns to service only after this checklist passes.",
        "items": [
            item("what_repaired", "What was repaired", TEXT, field="parts"),
            item("vendor", "Repaired by (vendor or technician)", TEXT, field="vendor"),
            item("rma_number", "RMA number", TEXT, field="rma_number", required=False),
            item("outcome", "Outcome", CHOICE, options=["fixed", "replaced"], field="outcome"),
            item("downtime", "Downtime", NUM, unit="h", min=0, field="downtime_hours", required=False),
            item("cost", "Cost", NUM, min=0, field="cost", required=False),
            item("stress_test", "Stress test passed (e.g. 30 min burn-in or DCGM diagnostics level 3)", PF),
            item("ecc", "No uncorrected ECC errors and no pending remap", AUTO, auto="ecc_clean"),
            item("back_in_service", "Reinstalled; ready to go back in service", CHECK),
            item("photo", "Photo of the repaired card", PHOTO),
        ],
    },
]  # fmt: skip


def ship(apps, schema_editor):
    Template = apps.get_model("checklists", "ChecklistTemplate")
    Item = apps.get_model("checklists", "TemplateItem")
    for spec in TEMPLATES:
        spec = dict(spec)
        items = spec.pop("items")
        template, created = Template.objects.get_or_create(key=spec["key"], defaults=spec)
        if not created:
            continue
        Item.objects.bulk_create([Item(template=template, position=n, **i) for n, i in enumerate(items)])


def unship(apps, schema_editor):
    apps.get_model("checklists", "ChecklistTemplate").objects.filter(
        key__in=[t["key"] for t in TEMPLATES], runs__isnull=True
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("checklists", "0001_initial")]
    operations = [migrations.RunPython(ship, unship)]

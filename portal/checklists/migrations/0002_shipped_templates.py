"""The checklists shipped with the portal, from the practices of the article the portal grew
from (shared/seed/gpu-wear-and-maintenance): keep cooling clean and airflow good, keep drivers
current and connections seated, watch temperature and load, back up data and checkpoints, rest
the cards between long runs, get repairs done properly, overclock only with care.

The data is written out here (not imported from the app) so that this migration means the same
thing forever; admins edit the templates afterwards in the portal. Photo items are optional.
"""

from django.db import migrations


def gettext_noop(text):
    """Marks a text for makemessages and returns it as it is: the checklist pages show a shipped
    text in the reader's language while it is still this one (portal.checklists.shipped)."""
    return text


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
        "key": "cleaning", "name": gettext_noop("Cooling and dust cleaning"), "record_kind": "cleaning", "applies_to": "gpu",
        "description": gettext_noop("Dust is the first enemy of a GPU under long training runs: clean heatsinks, fans and "
        "filters and keep the airflow path clear. The portal then checks that the cards really run cooler."),
        "items": [
            item("photo_before", gettext_noop("Photo before cleaning"), PHOTO, help=gettext_noop("The heatsink and fans as you found them.")),
            item("dust_level", gettext_noop("Dust level found"), CHOICE, options=["none", "light", "moderate", "heavy"],
                 field="dust_level", help=gettext_noop("Look at the heatsink fins and the fan blades before you clean.")),
            item("filters", gettext_noop("Dust filters cleaned or replaced"), CHECK),
            item("fans_spin", gettext_noop("Fans spin freely (no grinding, wobble or stiff bearing)"), PF,
                 help=gettext_noop("Spin each fan by hand with the host powered off.")),
            item("airflow_path", gettext_noop("Airflow path clear (intake and exhaust unobstructed, cables tidy)"), PF,
                 field="airflow_ok"),
            item("heatsink_fins", gettext_noop("Heatsink fins clean and straight"), PF),
            item("photo_after", gettext_noop("Photo after cleaning"), PHOTO),
            item("cooler_after", gettext_noop("Cooler at equal power after the cleaning (≥ 3 °C)"), AUTO, auto="cleaning_effect",
                 params={"min_drop_c": 3},
                 help=gettext_noop("Judged by the portal from loaded readings after the cleaning against the week before, "
                 "compared at equal power draw.")),
        ],
    },
    {
        "key": "connection_check", "name": gettext_noop("Connections and power"), "record_kind": "connection_check",
        "applies_to": "gpu",
        "description": gettext_noop("Loose or heat-damaged connectors fail under sustained current: check every connector "
        "of each card."),
        "items": [
            item("power_connectors", gettext_noop("Power connectors seated and undamaged"), PF, field="power_ok",
                 help=gettext_noop("8-pin / 12VHPWR fully latched, no bent or burnt pins.")),
            item("risers", gettext_noop("Risers seated, retention clips closed"), PF, field="risers_ok"),
            item("cables", gettext_noop("PCIe and NVLink cables / bridges seated"), PF, field="cables_ok"),
            item("discoloration", gettext_noop("No heat discoloration or melted plastic on connectors"), PF),
            item("photo", gettext_noop("Photo of anything suspicious"), PHOTO),
        ],
    },
    {
        "key": "driver_update", "name": gettext_noop("Driver and firmware update"), "record_kind": "driver_update",
        "applies_to": "host",
        "description": gettext_noop("Keep the NVIDIA driver and firmware current, in a maintenance window, after reading the "
        "release notes."),
        "items": [
            item("current_version", gettext_noop("Current driver version"), TEXT, field="from_version",
                 help=gettext_noop("nvidia-smi --query-gpu=driver_version --format=csv,noheader")),
            item("target_version", gettext_noop("Target driver version"), TEXT, field="to_version"),
            item("release_notes", gettext_noop("Release notes read (known issues, CUDA compatibility)"), CHECK),
            item("reboot", gettext_noop("Host rebooted after the update"), CHECK),
            item("nvidia_smi", gettext_noop("nvidia-smi healthy: every GPU listed, no errors"), PF),
            item("ecc", gettext_noop("No uncorrected ECC errors and no pending remap after the update"), AUTO, auto="ecc_clean"),
        ],
    },
    {
        "key": "backup_verification", "name": gettext_noop("Backup verification"), "record_kind": "backup", "applies_to": "host",
        "description": gettext_noop("Back up training data and model checkpoints so a GPU failure never loses work, and "
        "prove the backup by restoring from it."),
        "items": [
            item("content", gettext_noop("What was backed up"), CHOICE, options=["training_data", "checkpoints", "both", "other"],
                 field="backup_content"),
            item("training_data", gettext_noop("Training data copied"), CHECK),
            item("checkpoints", gettext_noop("Model checkpoints copied"), CHECK),
            item("restore_tested", gettext_noop("A restore was tested (files read back and compared)"), PF, field="verified"),
            item("destination", gettext_noop("Destination"), TEXT, field="destination", help=gettext_noop("e.g. nas01:/backups/node-a")),
            item("size", gettext_noop("Size"), NUM, unit="GB", min=0, field="size_gb", required=False),
        ],
    },
    {
        "key": "pre_training", "name": gettext_noop("Before a long training run"), "record_kind": "inspection",
        "applies_to": "gpu",
        "description": gettext_noop("Before days of training: cool at idle, fans working, memory clean, data backed up, and a "
        "plan that rests the cards and keeps checkpoints."),
        "items": [
            item("idle_temperature", gettext_noop("Idle temperature below 45 °C"), AUTO, auto="idle_temperature",
                 params={"limit_c": 45}),
            item("fans", gettext_noop("Fans respond"), AUTO, auto="fans_respond"),
            item("ecc", gettext_noop("No uncorrected ECC errors and no pending remap"), AUTO, auto="ecc_clean"),
            item("backup", gettext_noop("A backup record in the last 7 days"), AUTO, auto="recent_backup", params={"days": 7}),
            item("segments", gettext_noop("Training planned in segments with checkpoints (rest between segments)"), CHECK),
            item("checkpoint_hours", gettext_noop("Checkpoint interval"), NUM, unit="h", min=0.1, max=24, required=False),
            item("clocks", gettext_noop("Clocks and power limit at stock or a tested, moderate overclock"), PF),
        ],
    },
    {
        "key": "repair_return", "name": gettext_noop("Repair return"), "record_kind": "repair", "applies_to": "gpu",
        "description": gettext_noop("A GPU back from repair returns to service only after this checklist passes."),
        "items": [
            item("what_repaired", gettext_noop("What was repaired"), TEXT, field="parts"),
            item("vendor", gettext_noop("Repaired by (vendor or technician)"), TEXT, field="vendor"),
            item("rma_number", gettext_noop("RMA number"), TEXT, field="rma_number", required=False),
            item("outcome", gettext_noop("Outcome"), CHOICE, options=["fixed", "replaced"], field="outcome"),
            item("downtime", gettext_noop("Downtime"), NUM, unit="h", min=0, field="downtime_hours", required=False),
            item("cost", gettext_noop("Cost"), NUM, min=0, field="cost", required=False),
            item("stress_test", gettext_noop("Stress test passed (e.g. 30 min burn-in or DCGM diagnostics level 3)"), PF),
            item("ecc", gettext_noop("No uncorrected ECC errors and no pending remap"), AUTO, auto="ecc_clean"),
            item("back_in_service", gettext_noop("Reinstalled; ready to go back in service"), CHECK),
            item("photo", gettext_noop("Photo of the repaired card"), PHOTO),
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

"""The words of the checklists the portal ships (migrations/0002_shipped_templates.py), listed once
for makemessages. The templates are stored rows that admins may edit: the pages translate a name,
label or help text only when it is still one of these; what a person wrote stays as typed."""

from __future__ import annotations

from django.utils.translation import gettext, gettext_noop, pgettext, pgettext_lazy

SHIPPED_TEXTS = frozenset(
    (
        gettext_noop("Cooling and dust cleaning"),
        gettext_noop(
            "Dust is the first enemy of a GPU under long training runs: clean heatsinks, fans and "
            "filters and keep the airflow path clear. The portal then checks that the cards really run "
            "cooler."
        ),
        gettext_noop("Photo before cleaning"),
        gettext_noop("The heatsink and fans as you found them."),
        gettext_noop("Dust level found"),
        gettext_noop("Look at the heatsink fins and the fan blades before you clean."),
        gettext_noop("Dust filters cleaned or replaced"),
        gettext_noop("Fans spin freely (no grinding, wobble or stiff bearing)"),
        gettext_noop("Spin each fan by hand with the host powered off."),
        gettext_noop("Airflow path clear (intake and exhaust unobstructed, cables tidy)"),
        gettext_noop("Heatsink fins clean and straight"),
        gettext_noop("Photo after cleaning"),
        gettext_noop("Cooler at equal power after the cleaning (≥ 3 °C)"),
        gettext_noop("Diagnostic passed after the repair"),
        gettext_noop(
            "Judged by the portal: a diagnostic (dcgmi diag, or the agent's NVML checks) of the return-to-service "
            "level passed on the GPU after the repair, on the host's current driver. Signing off requests one when "
            "there is none; the GPU returns to service when it passes."
        ),
        gettext_noop(
            "Judged by the portal from loaded readings after the cleaning against the week before, "
            "compared at equal power draw."
        ),
        gettext_noop("Connections and power"),
        gettext_noop(
            "Loose or heat-damaged connectors fail under sustained current: check every connector of each card."
        ),
        gettext_noop("Power connectors seated and undamaged"),
        gettext_noop("8-pin / 12VHPWR fully latched, no bent or burnt pins."),
        gettext_noop("Risers seated, retention clips closed"),
        gettext_noop("PCIe and NVLink cables / bridges seated"),
        gettext_noop("No heat discoloration or melted plastic on connectors"),
        gettext_noop("Photo of anything suspicious"),
        gettext_noop("Driver and firmware update"),
        gettext_noop(
            "Keep the NVIDIA driver and firmware current, in a maintenance window, after reading the release notes."
        ),
        gettext_noop("Current driver version"),
        gettext_noop("nvidia-smi --query-gpu=driver_version --format=csv,noheader"),
        gettext_noop("Target driver version"),
        gettext_noop("Release notes read (known issues, CUDA compatibility)"),
        gettext_noop("Host rebooted after the update"),
        gettext_noop("nvidia-smi healthy: every GPU listed, no errors"),
        gettext_noop("No uncorrected ECC errors and no pending remap after the update"),
        gettext_noop("Backup verification"),
        gettext_noop(
            "Back up training data and model checkpoints so a GPU failure never loses work, and prove "
            "the backup by restoring from it."
        ),
        gettext_noop("What was backed up"),
        gettext_noop("Training data copied"),
        gettext_noop("Model checkpoints copied"),
        gettext_noop("A restore was tested (files read back and compared)"),
        gettext_noop("Destination"),
        gettext_noop("e.g. nas01:/backups/node-a"),
        gettext_noop("Size"),
        gettext_noop("Before a long training run"),
        gettext_noop(
            "Before days of training: cool at idle, fans working, memory clean, data backed up, and a "
            "plan that rests the cards and keeps checkpoints."
        ),
        gettext_noop("Idle temperature below 45 °C"),
        gettext_noop("Fans respond"),
        gettext_noop("No uncorrected ECC errors and no pending remap"),
        gettext_noop("A backup record in the last 7 days"),
        gettext_noop("Training planned in segments with checkpoints (rest between segments)"),
        gettext_noop("Checkpoint interval"),
        gettext_noop("Clocks and power limit at stock or a tested, moderate overclock"),
        gettext_noop("Repair return"),
        gettext_noop("A GPU back from repair returns to service only after this checklist passes."),
        gettext_noop("What was repaired"),
        gettext_noop("Repaired by (vendor or technician)"),
        gettext_noop("RMA number"),
        gettext_noop("Outcome"),
        gettext_noop("Downtime"),
        gettext_noop("Cost"),
        gettext_noop("Stress test passed (e.g. 30 min burn-in or DCGM diagnostics level 3)"),
        gettext_noop("Reinstalled; ready to go back in service"),
        gettext_noop("Photo of the repaired card"),
    )
)
# The answers a shipped choice item offers: stored as they are, shown translated.
SHIPPED_OPTIONS = {
    "none": pgettext_lazy("checklist option", "none"),
    "light": pgettext_lazy("checklist option", "light"),
    "moderate": pgettext_lazy("checklist option", "moderate"),
    "heavy": pgettext_lazy("checklist option", "heavy"),
    "training_data": pgettext_lazy("checklist option", "training_data"),
    "checkpoints": pgettext_lazy("checklist option", "checkpoints"),
    "both": pgettext_lazy("checklist option", "both"),
    "other": pgettext_lazy("checklist option", "other"),
    "fixed": pgettext_lazy("checklist option", "fixed"),
    "replaced": pgettext_lazy("checklist option", "replaced"),
}


def shipped_text(text: str) -> str:
    """A checklist's name, item label or help text in the active language when the portal shipped it."""
    return gettext(text) if text and text in SHIPPED_TEXTS else text


def shipped_option(option: str) -> str:
    """A choice item's answer in the active language when the portal shipped it."""
    return pgettext("checklist option", option) if option in SHIPPED_OPTIONS else option

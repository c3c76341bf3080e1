"""The three roles of the portal, kept as Django groups (created by a migration).

admin: everything, Django admin included. technician: adds and edits maintenance records and
works tickets. viewer: reads everything, writes nothing.
"""

from django.utils.translation import pgettext_lazy

ROLE_ADMIN = "admin"
ROLE_TECHNICIAN = "technician"
ROLE_VIEWER = "viewer"
ROLES = (ROLE_ADMIN, ROLE_TECHNICIAN, ROLE_VIEWER)
# How pages name them (the group names themselves never change with the language).
ROLE_LABELS = {
    ROLE_ADMIN: pgettext_lazy("role", "admin"),
    ROLE_TECHNICIAN: pgettext_lazy("role", "technician"),
    ROLE_VIEWER: pgettext_lazy("role", "viewer"),
}

# Model permissions each role gets, as "app_label.codename" patterns; "*" means every action.
ROLE_PERMISSIONS = {
    ROLE_ADMIN: {
        "fleet": ["*"],
        "accounts": ["*"],
        "telemetry": ["*"],
        "maintenance": ["*"],
        "checklists": ["*"],
        "scheduler": ["*"],
        "diagnostics": ["*"],
        "enrolment": ["*"],
        "windows": ["*"],
        "inventory": ["*"],
        "remote_write": ["*"],  # ingest sources (a lab's Prometheus)
        "auditlog": ["view"],
        "auth": ["*"],
        "axes": ["*"],  # login lockouts: the admin lifts them
    },
    ROLE_TECHNICIAN: {
        "fleet": ["view"],
        # Status (out for repair, retired), service dates and notes, not the inventory itself.
        "fleet.gpu": ["view", "service"],
        "fleet.maintenancerecord": ["add", "change", "view"],
        "fleet.attachment": ["add", "change", "view"],
        "telemetry": ["view"],
        "maintenance": ["view"],
        "maintenance.ticket": ["view", "change"],
        "maintenance.ticketcomment": ["view", "add"],
        "maintenance.subscription": ["view", "add", "change", "delete"],
        "checklists": ["view"],
        "checklists.checklistrun": ["view", "add", "change"],
        "checklists.checklistanswer": ["view", "add", "change"],
        "checklists.checklistphoto": ["view", "add"],
        "scheduler": ["view"],
        "scheduler.scheduleraction": ["view", "add"],
        "diagnostics": ["view"],
        "diagnostics.diagnostic": ["view", "add"],
        # Planned maintenance windows: plan, complete and cancel them (admins too; viewers read).
        "windows.maintenancewindow": ["view", "add", "change"],
        # Stock and RMA cases, not the warranty contracts (admins own those).
        "inventory": ["view"],
        "inventory.part": ["view", "add", "change"],
        "inventory.stockmovement": ["view", "add"],
        "inventory.rmacase": ["view", "add", "change"],
        "auditlog": ["view"],
    },
    ROLE_VIEWER: {
        "fleet": ["view"],
        "telemetry": ["view"],
        "maintenance": ["view"],
        "checklists": ["view"],
        "scheduler": ["view"],
        "diagnostics": ["view"],
        "windows": ["view"],
        "inventory": ["view"],
        "auditlog": ["view"],
    },
}


def user_has_role(user, role: str) -> bool:
    if not user.is_authenticated:
        return False
    cache = getattr(user, "_portal_roles", None)
    if cache is None:
        cache = set(user.groups.values_list("name", flat=True))
        user._portal_roles = cache
    return role in cache


def role_flags(user) -> dict:
    """What the templates need to decide which buttons to show (the views enforce it again)."""
    is_super = getattr(user, "is_superuser", False)
    return {
        "admin": is_super or user_has_role(user, ROLE_ADMIN),
        "technician": is_super or user_has_role(user, ROLE_ADMIN) or user_has_role(user, ROLE_TECHNICIAN),
    }

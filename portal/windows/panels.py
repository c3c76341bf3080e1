"""What the windows app adds to the fleet and host pages (portal.core.panels): the scheduled and
active maintenance windows, one query each whatever the fleet's size."""

from __future__ import annotations

from portal.core.panels import panel
from portal.windows import selectors

VIEW = "windows.view_maintenancewindow"


def _can_see(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user and user.has_perm(VIEW))


@panel("fleet.fleet", slot="messages", name="windows", template="windows/_panel.html", order=20)
def fleet_page_panel(*, request=None, **context) -> dict | None:
    if not _can_see(request):
        return None
    windows = selectors.windows_open_panel()
    return {"windows": windows, "host": None} if windows else None


@panel("fleet.host", slot="summary", name="windows", template="windows/_panel.html", order=20)
def host_page_panel(*, host, request=None, **context) -> dict | None:
    if not _can_see(request):
        return None
    windows = selectors.windows_open_panel(host_id=host.pk)
    return {"windows": windows, "host": host} if windows else None

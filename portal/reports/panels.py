"""What the reports app adds to a GPU's page (portal.core.panels): the repeat-offender flag and
the links to its repair history and RMA evidence pack."""

from django.utils import timezone

from portal.core.panels import panel
from portal.reports.selectors import gpu_repeat_offender


@panel("fleet.gpu", slot="main", name="reliability", template="reports/_gpu_panel.html", order=30)
def gpu_page_panel(*, gpu, **page) -> dict:
    return {"gpu": gpu, "repeat_offender": gpu_repeat_offender(gpu=gpu, now=timezone.now())}

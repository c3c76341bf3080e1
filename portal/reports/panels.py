"""What the reports app adds to a GPU's page (through portal.fleet.pages): the repeat-offender flag
and the links to its repair history and RMA evidence pack."""

from django.utils import timezone

from portal.reports.selectors import gpu_repeat_offender


def gpu_page_panel(*, gpu, **context) -> dict:
    offender = gpu_repeat_offender(gpu=gpu, now=timezone.now())
    return {"reliability_panel": {"gpu": gpu, "repeat_offender": offender}}

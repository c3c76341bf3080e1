import shlex

from django.conf import settings
from django.db.models import QuerySet

from portal.enrolment.models import EnrolmentCode


def enrolment_codes() -> QuerySet[EnrolmentCode]:
    return EnrolmentCode.objects.select_related("created_by").order_by("-created_at", "-id")


def install_command(*, base_url: str, code: str) -> str:
    """The one line an admin pastes on a GPU host: everything comes from this portal. A portal
    that takes plain HTTP on purpose (INGEST_ALLOW_HTTP) gets --insecure-http for its agents."""
    base = base_url.rstrip("/")
    insecure = " --insecure-http" if base.startswith("http://") and settings.INGEST_ALLOW_HTTP else ""
    return (
        f"curl -fsSL {shlex.quote(base + '/agent/install.sh')} | sudo sh -s -- "
        f"--url {shlex.quote(base)} --code {shlex.quote(code)}{insecure}"
    )

import shlex

from django.conf import settings
from django.db.models import QuerySet

from portal.enrolment.models import EnrolmentCode


def enrolment_codes() -> QuerySet[EnrolmentCode]:
    return EnrolmentCode.objects.select_related("created_by").order_by("-created_at", "-id")


CODE_ENV = "GPU_FLEET_ENROL_CODE"


def install_command(*, base_url: str, code: str) -> str:
    """The one line an admin pastes on a GPU host: everything comes from this portal. The code
    travels in the environment (the shell's assignment, then sudo's --preserve-env), never in a
    command line that other users of the host can read. A portal that takes plain HTTP on purpose
    (INGEST_ALLOW_HTTP) gets --insecure-http for its agents."""
    base = base_url.rstrip("/")
    insecure = " --insecure-http" if base.startswith("http://") and settings.INGEST_ALLOW_HTTP else ""
    return (
        f"curl -fsSL {shlex.quote(base + '/agent/install.sh')} | {CODE_ENV}={shlex.quote(code)} "
        f"sudo --preserve-env={CODE_ENV} sh -s -- --url {shlex.quote(base)}{insecure}"
    )

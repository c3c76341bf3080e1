from django.db.models import QuerySet

from portal.enrolment.models import EnrolmentCode


def enrolment_codes() -> QuerySet[EnrolmentCode]:
    return EnrolmentCode.objects.select_related("created_by").order_by("-created_at", "-id")


def install_command(*, base_url: str, code: str) -> str:
    """The one line an admin pastes on a GPU host: everything comes from this portal."""
    import shlex

    base = base_url.rstrip("/")
    return (
        f"curl -fsSL {shlex.quote(base + '/agent/install.sh')} | sudo sh -s -- "
        f"--url {shlex.quote(base)} --code {shlex.quote(code)}"
    )

import ipaddress
import shlex
from urllib.parse import urlsplit

from django.conf import settings
from django.db.models import QuerySet

from portal.enrolment.agent_dist import agent_dist_manifest, agent_project
from portal.enrolment.models import EnrolmentCode


def enrolment_codes() -> QuerySet[EnrolmentCode]:
    return EnrolmentCode.objects.select_related("created_by").order_by("-created_at", "-id")


CODE_ENV = "GPU_FLEET_ENROL_CODE"


# What install.sh checks before it installs anything (its "check:" step) and agents/pyproject.toml's
# requires-python: the page lists the same, so an admin finds out before pasting.
AGENT_PYTHON_MIN = "3.11"


def install_address_unreachable(base_url: str) -> bool:
    """True when the install line's address names the machine it runs on (localhost, a loopback
    address): pasted on a GPU host, it would look for the portal on that host."""
    hostname = (urlsplit(base_url).hostname or "").lower()
    if hostname == "localhost" or hostname.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False


def agent_dist_missing() -> list[str]:
    """What /agent/ lacks for a host to install the agent: the dependencies a start could not
    fetch, or everything when no start prepared the files."""
    manifest = agent_dist_manifest()
    if manifest is None:
        return [agent_project().wheel_name]
    return list(manifest["missing"])


def install_command(*, base_url: str, code: str) -> str:
    """The one line an admin pastes on a GPU host: everything comes from this portal. The code
    travels in the environment (the shell's assignment, then sudo's --preserve-env), never in a
    command line that other users of the host can read; each wheel's sha256 rides along
    (`--sha256 FILE=HEX`: install.sh installs with pip's --require-hashes, so a file changed on the
    way or on the portal is refused). A portal that takes plain HTTP on purpose (PLAIN_HTTP)
    gets --insecure-http for its agents."""
    base = base_url.rstrip("/")
    insecure = " --insecure-http" if base.startswith("http://") and settings.INGEST_ALLOW_HTTP else ""
    manifest = agent_dist_manifest()
    hashes = "".join(
        f" --sha256 {shlex.quote(entry['name'] + '=' + entry['sha256'])}" for entry in (manifest or {}).get("files", [])
    )
    return (
        f"curl -fsSL {shlex.quote(base + '/agent/install.sh')} | {CODE_ENV}={shlex.quote(code)} "
        f"sudo --preserve-env={CODE_ENV} sh -s -- --url {shlex.quote(base)}{hashes}{insecure}"
    )

"""The portal's public base URL (PORTAL_URL): what links in notifications, the agents' install
command and the OpenAPI document's `servers` name. Required with DEBUG off (core.E001)."""

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.http import HttpRequest

# With DEBUG on and PORTAL_URL unset, links made outside a request (notifications) use this: the
# development server's address (`manage.py demo`, `make serve`).
DEVELOPMENT_URL = "http://127.0.0.1:8000"


def portal_url(request: HttpRequest | None = None) -> str:
    """PORTAL_URL without a trailing slash; unset (DEBUG only): the address `request` came to, else
    the development server's."""
    if settings.PORTAL_URL:
        return settings.PORTAL_URL
    if request is not None:
        return request.build_absolute_uri("/").rstrip("/")
    return DEVELOPMENT_URL


def portal_url_errors() -> list[Error]:
    if settings.DEBUG or settings.PORTAL_URL:
        return []
    return [
        Error(
            "PORTAL_URL is not set: with DEBUG off the portal needs its public base URL for the links in "
            "notifications, the agents' install command and the API's OpenAPI servers",
            hint="set PORTAL_URL, e.g. PORTAL_URL=https://gpu-portal.lab.example (docs/configuration.md)",
            id="core.E001",
        )
    ]


@register(Tags.security, deploy=True)
def portal_url_check(app_configs=None, **kwargs) -> list[Error]:
    return portal_url_errors()

"""The URL converter for identifiers that come from outside (host names, GPU uuids).

Django's `str` converter cannot carry a `/`: `reverse()` then fails (NoReverseMatch, a 500 on every
page that links to the object), and `.`/`..` would be read by the browser as path steps. This one
percent-escapes what a path segment cannot hold, so whatever a stored value contains, its URL is
built and resolves back to it. (The values are validated too: portal/fleet/identifiers.py.)

    path("gpus/<segment:uuid>/", ...)            # Django URLs
    "/gpus/{segment:uuid}"                        # django-ninja paths
    url_segment(value)                            # a path segment built by hand (WebSocket URLs)
"""

from urllib.parse import quote, unquote

from django.urls import register_converter

# What reverse() leaves unescaped in a path (django.urls.resolvers); everything else it escapes.
_REVERSE_SAFE = "!$&'()*+,;=/~:@"


class SegmentConverter:
    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return unquote(value)

    def to_url(self, value: str) -> str:
        value = str(value)
        if value.strip(".") == "":  # "", ".", "..": path steps, not names
            return value.replace(".", "%2E") or "%20"
        return quote(value, safe="-._~!$&'()*+,;=:@")


def url_segment(value: str) -> str:
    """The segment as reverse() would write it in a URL (escaped once more, as reverse does)."""
    return quote(SegmentConverter().to_url(value), safe=_REVERSE_SAFE)


def register() -> None:
    register_converter(SegmentConverter, "segment")


register()

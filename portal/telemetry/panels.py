"""What telemetry adds to fleet's pages (portal.core.panels): a host's agent tokens, and the
pipeline's lag on the fleet page."""

from portal.accounts.roles import role_flags
from portal.core.panels import panel
from portal.telemetry import pipeline, selectors


@panel("fleet.host", slot="after_timeline", name="agent-tokens", template="telemetry/_host_tokens.html")
def host_tokens(*, request, host, **page) -> dict | None:
    if not request.user.has_perm("telemetry.view_hosttoken"):
        return None
    return {"tokens": selectors.host_tokens(host=host)}


@panel("fleet.fleet", slot="messages", name="pipeline-lag", template="telemetry/_pipeline_lag.html")
def pipeline_lag(*, request, **page) -> dict | None:
    # Admins only: a stage that falls behind is theirs to look into.
    if not role_flags(request.user)["admin"]:
        return None
    lagging = pipeline.pipeline_lagging()
    return {"lagging": lagging} if lagging else None

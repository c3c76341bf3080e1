"""What remote write adds to fleet's pages (portal.core.panels): a host fed by a source says so."""

from portal.core.panels import panel
from portal.remote_write import selectors


@panel("fleet.host", slot="summary", name="fed-by-source", template="remote_write/_host_source.html", order=5)
def host_source(*, request, host, **page) -> dict | None:
    source = selectors.host_source(host_id=host.pk)
    if source is None:
        return None
    return {"source": source, "can_manage": request.user.has_perm("remote_write.view_ingestsource")}
